"""WhatsApp Cloud API: ``POST {base}/{phone_number_id}/messages`` with a bearer token."""

from __future__ import annotations

import httpx

from router.dispatch.base import Delivery, SendResult, json_of, need, post
from router.ingress.settings import secret


class WhatsAppSender:
    channel = "whatsapp"

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
        body = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": str(to),
                "type": "text", "text": {"preview_url": False, "body": delivery.text}}
        response = post(self.client, url, "whatsapp messages", json=body,
                        headers={"Authorization": f"Bearer {secret(self.settings.whatsapp_access_token)}"})
        messages = json_of(response).get("messages") or [{}]
        first = messages[0] if isinstance(messages, list) and messages and isinstance(messages[0], dict) else {}
        return SendResult(provider_message_id=first.get("id"), http_status=response.status_code)
