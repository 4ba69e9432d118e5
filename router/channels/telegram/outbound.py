"""Telegram: ``POST {base}/bot<token>/sendMessage`` with the chat id.

sendMessage takes at most 4096 characters (counted in UTF-16 code units, as Telegram counts
entity offsets): a longer reply goes out as ordered parts. A reply's ``suggestions`` become a
one-time reply keyboard on its last part (tapping one sends its text back as a message).
"""

from __future__ import annotations

from typing import Any

import httpx

from router.channels.delivery import Delivery, DeliveryError, SendResult, json_of, need, post, send_in_parts
from router.channels.split import TextLimit, split_text
from router.channels.settings import secret


class TelegramSender:
    channel = "telegram"
    text_limit = TextLimit(4096, "utf16")

    def __init__(self, settings, client: httpx.Client):
        self.settings = settings
        self.client = client

    def configured(self) -> tuple[bool, str]:
        if secret(self.settings.telegram_bot_token) is None:
            return False, "set SWITCHBOARD_TELEGRAM_BOT_TOKEN"
        return True, "ok"

    def send(self, delivery: Delivery) -> SendResult:
        (chat_id,) = need(delivery.address, "chat_id")
        markup = reply_keyboard(delivery.payload.get("suggestions"))
        last = split_text(delivery.text, self.text_limit)[-1] if markup else None
        return send_in_parts(delivery, self.text_limit,
                             lambda text: self._send_text(chat_id, text, markup if text == last else None))

    def _send_text(self, chat_id, text: str, markup: dict | None = None) -> SendResult:
        url = f"{self.settings.telegram_api_base_url.rstrip('/')}/bot{secret(self.settings.telegram_bot_token)}/sendMessage"
        try:
            body = {"chat_id": chat_id, "text": text}
            if markup:
                body["reply_markup"] = markup
            response = post(self.client, url, "telegram sendMessage", json=body)
        except DeliveryError as exc:
            # the URL carries the bot token: never let it into a stored error
            exc.reason = exc.reason.replace(secret(self.settings.telegram_bot_token) or "<token>", "<token>")
            raise
        data = json_of(response)
        if data.get("ok") is False:
            raise DeliveryError(f"telegram: {data.get('description')}", retryable=False,
                                http_status=response.status_code)
        result: dict[str, Any] = data["result"] if isinstance(data.get("result"), dict) else {}
        return SendResult(provider_message_id=str(result.get("message_id") or "") or None,
                          http_status=response.status_code)


def reply_keyboard(suggestions) -> dict | None:
    """Bot API ReplyKeyboardMarkup: one suggestion a row, hidden after a tap."""
    items = [str(x)[:100] for x in (suggestions or []) if isinstance(x, str) and x.strip()]
    if not items:
        return None
    return {"keyboard": [[{"text": x}] for x in items[:12]], "one_time_keyboard": True, "resize_keyboard": True}
