"""Telegram Bot API webhooks (one ``Update`` per POST).

Telegram does not sign bodies: the ``secret_token`` given to ``setWebhook`` comes back in
``X-Telegram-Bot-Api-Secret-Token`` on every request. Only new ``message`` updates are routed;
edits, channel posts, callbacks and member updates are acknowledged and ignored. Message ids are
unique per chat, so the idempotency key is ``<chat id>:<message id>``.
"""

from __future__ import annotations

from typing import Any

from router.channels.base import (
    BaseAdapter,
    MalformedPayload,
    Parsed,
    ParsedMessage,
    Route,
    SignatureError,
    WebhookRequest,
    from_unix,
    json_body,
    obj,
    same,
    text_of,
)
from router.channels.settings import secret
from router.schemas import InboundMessage

SECRET_HEADER = "x-telegram-bot-api-secret-token"
MEDIA = ("document", "audio", "video", "voice", "video_note", "sticker", "animation")


class TelegramAdapter(BaseAdapter):
    name = "telegram"

    def enabled(self) -> tuple[bool, str]:
        if secret(self.settings.telegram_secret_token) is None:
            return False, "set SWITCHBOARD_TELEGRAM_SECRET_TOKEN to enable the telegram channel"
        return True, "ok"

    def verify(self, request: WebhookRequest) -> None:
        if not same(request.headers.get(SECRET_HEADER), secret(self.settings.telegram_secret_token)):
            raise SignatureError("missing or bad X-Telegram-Bot-Api-Secret-Token header")

    def parse(self, request: WebhookRequest) -> Parsed:
        update = obj(json_body(request), "body")
        if isinstance(update.get("update_id"), bool) or not isinstance(update.get("update_id"), int):
            raise MalformedPayload("update_id must be an integer")
        message = update.get("message")
        if message is None:
            kinds = [k for k in update if k != "update_id"]
            return Parsed(ignored=[f"update:{kinds[0] if kinds else 'empty'}"])
        m = obj(message, "message")
        chat = obj(m.get("chat"), "message.chat")
        chat_id = text_of(chat.get("id"), "message.chat.id")
        message_id = text_of(m.get("message_id"), "message.message_id")
        sender: dict[str, Any] = m["from"] if isinstance(m.get("from"), dict) else {}
        if sender.get("is_bot"):
            return Parsed(ignored=["from_bot"])
        user_id = text_of(sender.get("id"), "message.from.id", required=False) or chat_id
        text, attachments, kind = self._content(m)
        if kind == "other" and not text:  # service messages: members joined, pinned, topics...
            return Parsed(ignored=["message:service"])
        metadata: dict[str, Any] = {"kind": kind, "chat_type": chat.get("type")}
        if attachments:
            metadata["attachments"] = attachments
        if isinstance(sender.get("language_code"), str):
            metadata["language_code"] = sender["language_code"]
        msg = InboundMessage(
            channel=self.name, conversation_external_id=chat_id, customer_id=user_id,
            message_external_id=f"{chat_id}:{message_id}", text=text, sent_at=from_unix(m.get("date")),
            metadata=metadata, attachments=attachments,
        )
        profile = {k: sender[k] for k in ("first_name", "last_name", "username") if isinstance(sender.get(k), str)}
        route = Route(channel_user_id=user_id, address={"chat_id": chat.get("id")}, profile=profile)
        return Parsed(messages=[ParsedMessage(msg, route)])

    @staticmethod
    def _content(m: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str]:
        if isinstance(m.get("text"), str):
            return m["text"], [], "text"
        caption: str = m["caption"] if isinstance(m.get("caption"), str) else ""
        if isinstance(m.get("photo"), list) and m["photo"]:
            largest = m["photo"][-1] if isinstance(m["photo"][-1], dict) else {}
            return caption, [{"type": "photo", "file_id": largest.get("file_id"),
                              "width": largest.get("width"), "height": largest.get("height")}], "photo"
        for kind in MEDIA:
            media = m.get(kind)
            if isinstance(media, dict):
                att = {"type": kind, **{k: media.get(k) for k in ("file_id", "mime_type", "file_name", "duration")
                                        if media.get(k) is not None}}
                return caption, [att], kind
        if isinstance(m.get("location"), dict):
            loc = m["location"]
            return "", [{"type": "location", "lat": loc.get("latitude"), "lon": loc.get("longitude")}], "location"
        if isinstance(m.get("contact"), dict):
            return "", [{"type": "contact", "phone_number": m["contact"].get("phone_number")}], "contact"
        return caption, [], "other"
