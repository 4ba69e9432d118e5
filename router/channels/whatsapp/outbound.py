"""WhatsApp Cloud API: ``POST {base}/{phone_number_id}/messages`` with a bearer token.

A text body holds at most 4096 characters: a longer reply goes out as ordered parts, each with
its own ``wamid`` (kept in ``outbox_parts`` so status receipts find their message).
"""

from __future__ import annotations

import httpx

from router.channels.delivery import Delivery, SendResult, json_of, need, post, send_in_parts
from router.channels.split import TextLimit
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
        return send_in_parts(delivery, self.text_limit, lambda text: self._send_text(url, to, text))

    def _send_text(self, url: str, to, text: str) -> SendResult:
        body = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": str(to),
                "type": "text", "text": {"preview_url": False, "body": text}}
        response = post(self.client, url, "whatsapp messages", json=body,
                        headers={"Authorization": f"Bearer {secret(self.settings.whatsapp_access_token)}"})
        messages = json_of(response).get("messages") or [{}]
        first = messages[0] if isinstance(messages, list) and messages and isinstance(messages[0], dict) else {}
        return SendResult(provider_message_id=first.get("id"), http_status=response.status_code)
