"""The ``web`` channel: the ``/v1/messages`` JSON shape, signed with a shared secret.

For a site's own backend (or chat widget server). The channel is on only with ``SWITCHBOARD_WEB_HMAC_SECRET``
set (or, explicitly, ``SWITCHBOARD_WEB_UNSIGNED=true``; otherwise it answers 404): every request needs ``X-Switchboard-Timestamp: <unix seconds>`` and ``X-Switchboard-Signature: sha256=<hex
HMAC-SHA256 of "<timestamp>." + the raw body>``; a timestamp more than
``SWITCHBOARD_WEB_SIGNATURE_WINDOW_SECONDS`` (300) away from now is refused, so a captured request
cannot be replayed later (within the window a replay is a retry: deduplicated on the message id).
The same headers sign the replies the dispatcher POSTs back to ``SWITCHBOARD_WEB_API_BASE_URL``.
"""

from __future__ import annotations

import time

from pydantic import ValidationError

from router.channels.base import (
    Ack,
    BaseAdapter,
    MalformedPayload,
    Outcome,
    Parsed,
    ParsedMessage,
    Route,
    SignatureError,
    WebhookRequest,
    hmac_hex,
    json_body,
    same,
)
from router.channels.settings import secret
from router.schemas import InboundMessage, MessageBody

SIGNATURE_HEADER = "x-switchboard-signature"
TIMESTAMP_HEADER = "x-switchboard-timestamp"


def sign(secret_value: str, body: bytes, timestamp: str) -> str:
    return "sha256=" + hmac_hex(secret_value, timestamp.encode() + b"." + body)


def signed_headers(secret_value: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """The two headers that sign ``body`` now (for the dispatcher's callbacks and for clients)."""
    ts = str(int(time.time() if now is None else now))
    return {TIMESTAMP_HEADER: ts, SIGNATURE_HEADER: sign(secret_value, body, ts)}


class WebAdapter(BaseAdapter):
    name = "web"

    def enabled(self) -> tuple[bool, str]:
        if secret(self.settings.web_hmac_secret) is None and not self.settings.web_unsigned:
            return False, ("set SWITCHBOARD_WEB_HMAC_SECRET to enable the web channel (or post to /v1/messages "
                           "with an integration key)")
        return True, "ok"

    def verify(self, request: WebhookRequest) -> None:
        key = secret(self.settings.web_hmac_secret)
        if key is None:
            if self.settings.web_unsigned:   # explicitly configured: behind the site's own backend only
                return
            raise SignatureError("the web channel has no secret configured")
        ts = request.headers.get(TIMESTAMP_HEADER) or ""
        if not ts.isdigit() or len(ts) > 12:
            raise SignatureError(f"missing or bad {TIMESTAMP_HEADER} header")
        if abs(time.time() - int(ts)) > self.settings.web_signature_window_seconds:
            raise SignatureError(f"{TIMESTAMP_HEADER} is outside the accepted window (a replay?)")
        if not same(request.headers.get(SIGNATURE_HEADER), sign(key, request.body, ts)):
            raise SignatureError(f"missing or bad {SIGNATURE_HEADER} header")

    def parse(self, request: WebhookRequest) -> Parsed:
        data = json_body(request)
        if not isinstance(data, dict):
            raise MalformedPayload("the body must be a JSON object")
        data.setdefault("channel", self.name)
        if data.get("channel") != self.name:
            raise MalformedPayload("channel must be 'web' on this endpoint (or omitted)")
        try:
            body = MessageBody.model_validate(data)
        except ValidationError as exc:
            errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
            raise MalformedPayload(errors) from None
        msg = InboundMessage.from_api(body)
        msg.metadata = {**msg.metadata, "kind": "text"}
        route = Route(channel_user_id=body.customer_id, customer_id=body.customer_id,
                      address={"conversation_id": body.conversation_id, "customer_id": body.customer_id})
        return Parsed(messages=[ParsedMessage(msg, route)])

    def acknowledge(self, outcomes: list[Outcome], parsed: Parsed) -> Ack:
        # the same answer as POST /v1/messages: the turn, with its reply
        outcome = outcomes[0]
        headers = {"Idempotent-Replayed": "true"} if outcome.replayed else {}
        return Ack(outcome.response, headers=headers)
