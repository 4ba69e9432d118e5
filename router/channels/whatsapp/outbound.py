"""WhatsApp Cloud API: ``POST {base}/{phone_number_id}/messages`` with a bearer token.

A text body holds at most 4096 characters: a longer reply goes out as ordered parts, each with
its own ``wamid`` (kept in ``outbox_parts`` so status receipts find their message). A reply's
``suggestions`` go out as an interactive message with reply buttons (at most 3, titles of at most
20 characters, a body of at most 1024): a longer text is sent as text parts, the last part
carrying the buttons when it fits.
"""

from __future__ import annotations

import httpx

from router.channels.delivery import Delivery, SendResult, json_of, need, post, send_in_parts
from router.channels.split import TextLimit, split_text
from router.channels.settings import secret


class WhatsAppSender:
    channel = "whatsapp"
    text_limit = TextLimit(4096, "utf16")

    def __init__(self, settings, client: httpx.Client):
        self.settings = settings
        self.client = client

    def configured(self) -> tuple[bool, str]:
        if secret(self.settings.whatsapp_access_token) is None:
            return False, "set SWITCHBOARD_WHATSAPP_ACCESS_TOKEN"
        return True, "ok"

    def send(self, delivery: Delivery) -> SendResult:
        phone_number_id, to = need(delivery.address, "phone_number_id", "to")
        url = f"{self.settings.whatsapp_api_base_url.rstrip('/')}/{phone_number_id}/messages"
        buttons = reply_buttons(delivery.payload.get("suggestions"))
        last = split_text(delivery.text, self.text_limit)[-1] if buttons else None
        return send_in_parts(delivery, self.text_limit, lambda text: self._send_text(
            url, to, text, buttons if text == last and len(text) <= INTERACTIVE_BODY_LIMIT else None))

    def _send_text(self, url: str, to, text: str, buttons: list[dict] | None = None) -> SendResult:
        body = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": str(to),
                "type": "text", "text": {"preview_url": False, "body": text}}
        if buttons:
            body = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": str(to),
                    "type": "interactive", "interactive": {"type": "button", "body": {"text": text},
                                                           "action": {"buttons": buttons}}}
        response = post(self.client, url, "whatsapp messages", json=body,
                        headers={"Authorization": f"Bearer {secret(self.settings.whatsapp_access_token)}"})
        messages = json_of(response).get("messages") or [{}]
        first = messages[0] if isinstance(messages, list) and messages and isinstance(messages[0], dict) else {}
        return SendResult(provider_message_id=first.get("id"), http_status=response.status_code)


INTERACTIVE_BODY_LIMIT = 1024


def reply_buttons(suggestions) -> list[dict] | None:
    """Cloud API reply buttons: the first three suggestions, titles cut to 20 characters."""
    items = [str(x).strip() for x in (suggestions or []) if isinstance(x, str) and x.strip()]
    if not items:
        return None
    return [{"type": "reply", "reply": {"id": f"suggestion-{i}", "title": x[:20]}} for i, x in enumerate(items[:3])]
