"""Replies and agent messages of the ``web`` channel, POSTed to the site's callback URL.

Signed like inbound web webhooks (``X-Switchboard-Signature: sha256=<hex>`` when the shared secret
is set) and carrying ``Idempotency-Key: outbox-<id>`` so the site can drop a repeated delivery.
Without ``SWITCHBOARD_WEB_API_BASE_URL`` there is nowhere to push to: the reply was already in the
webhook's HTTP response and stays in the transcript, so the row is recorded as skipped.
"""

from __future__ import annotations

import json

import httpx

from router.channels.delivery import Delivery, SendResult, json_of, post
from router.channels.settings import secret
from router.channels.web.inbound import SIGNATURE_HEADER, sign


class WebSender:
    channel = "web"

    def __init__(self, settings, client: httpx.Client):
        self.settings = settings
        self.client = client

    def configured(self) -> tuple[bool, str]:
        return True, "ok"

    def send(self, delivery: Delivery) -> SendResult:
        url = self.settings.web_api_base_url
        if not url:
            return SendResult(skipped=True, note="no SWITCHBOARD_WEB_API_BASE_URL: reply returned in the HTTP response")
        body = json.dumps({
            "outbox_id": delivery.outbox_id,
            "kind": delivery.kind,
            "conversation_id": delivery.address.get("conversation_id") or delivery.conversation_external_id,
            "customer_id": delivery.address.get("customer_id") or delivery.customer_id,
            **delivery.payload,
        }, ensure_ascii=False, default=str).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": f"outbox-{delivery.outbox_id}"}
        key = secret(self.settings.web_hmac_secret)
        if key:
            headers[SIGNATURE_HEADER] = sign(key, body)
        response = post(self.client, url, "web callback", content=body, headers=headers)
        return SendResult(provider_message_id=str(json_of(response).get("id") or "") or None,
                          http_status=response.status_code)
