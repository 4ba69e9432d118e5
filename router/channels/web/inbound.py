"""The ``web`` channel: the ``/v1/messages`` JSON shape, optionally signed with a shared secret.

For a site's own backend (or chat widget server). With ``SWITCHBOARD_WEB_HMAC_SECRET`` set, every
request needs ``X-Switchboard-Signature: sha256=<hex HMAC-SHA256 of the raw body>``; the same
header signs the replies the dispatcher POSTs back to ``SWITCHBOARD_WEB_API_BASE_URL``.
"""

from __future__ import annotations

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
from router.schemas import InboundMessage, MessageIn

SIGNATURE_HEADER = "x-switchboard-signature"


def sign(secret_value: str, body: bytes) -> str:
    return "sha256=" + hmac_hex(secret_value, body)


class WebAdapter(BaseAdapter):
    name = "web"

    def verify(self, request: WebhookRequest) -> None:
        key = secret(self.settings.web_hmac_secret)
        if key is None:
            return  # unsigned mode: the endpoint is meant to sit behind the site's own backend
        if not same(request.headers.get(SIGNATURE_HEADER), sign(key, request.body)):
            raise SignatureError(f"missing or bad {SIGNATURE_HEADER} header")

    def parse(self, request: WebhookRequest) -> Parsed:
        data = json_body(request)
        if not isinstance(data, dict):
            raise MalformedPayload("the body must be a JSON object")
        data.setdefault("channel", self.name)
        if data.get("channel") != self.name:
            raise MalformedPayload("channel must be 'web' on this endpoint (or omitted)")
        try:
            body = MessageIn.model_validate(data)
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
