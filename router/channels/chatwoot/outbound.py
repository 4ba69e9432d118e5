"""Chatwoot: messages through the conversation messages API; ``status`` rows toggle the status.

The bot posts ``outgoing`` public messages with its ``api_access_token``. On an L3 handoff the
gateway queues a ``conversation_status`` row (no text: a channel action, not a message), sent as ``toggle_status {"status": "open"}`` so the inbox's
human agents take the conversation (the webhook then ignores it: the bot stays silent).
"""

from __future__ import annotations

import httpx

from router.channels.delivery import Delivery, SendResult, json_of, need, post
from router.channels.settings import secret


class ChatwootSender:
    channel = "chatwoot"

    def __init__(self, settings, client: httpx.Client):
        self.settings = settings
        self.client = client

    def configured(self) -> tuple[bool, str]:
        if not self.settings.chatwoot_api_url or secret(self.settings.chatwoot_api_token) is None:
            return False, "set SWITCHBOARD_CHATWOOT_API_URL and SWITCHBOARD_CHATWOOT_API_TOKEN"
        return True, "ok"

    def send(self, delivery: Delivery) -> SendResult:
        account, conversation = need(delivery.address, "account_id", "conversation_id")
        base = f"{self.settings.chatwoot_api_url.rstrip('/')}/api/v1/accounts/{account}/conversations/{conversation}"
        headers = {"api_access_token": secret(self.settings.chatwoot_api_token)}
        if delivery.kind == "conversation_status":
            status = delivery.payload.get("status") or "open"
            response = post(self.client, f"{base}/toggle_status", "chatwoot toggle_status",
                            json={"status": status}, headers=headers)
            return SendResult(provider_message_id=f"status:{status}", http_status=response.status_code)
        response = post(self.client, f"{base}/messages", "chatwoot messages", headers=headers,
                        json={"content": delivery.text, "message_type": "outgoing", "private": False})
        return SendResult(provider_message_id=str(json_of(response).get("id") or "") or None,
                          http_status=response.status_code)
