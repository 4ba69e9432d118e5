"""Chatwoot Agent Bot webhooks.

Chatwoot posts every event of a bot-connected inbox; only ``message_created`` with an
``incoming``, non-private message from a contact is routed (outgoing, private notes, activity
and template messages are ignored). Conversations with a bot start ``pending``; when the turn
hands the customer to a human (L3), the gateway queues a status change to ``open`` so Chatwoot's
agents take it, and from then on stays silent: messages of an ``open`` conversation are ignored.

Authenticity: newer Chatwoot versions sign webhooks with ``X-Chatwoot-Signature: sha256=<hex
HMAC-SHA256(secret, "{X-Chatwoot-Timestamp}.{body}")>``; for versions that do not sign, the bot
URL carries a secret ``?token=``. One of the two must be configured.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from router.channels.base import (
    BaseAdapter,
    MalformedPayload,
    Outcome,
    OutboundAction,
    Parsed,
    ParsedMessage,
    Route,
    SignatureError,
    WebhookRequest,
    from_unix,
    hmac_hex,
    json_body,
    obj,
    same,
    text_of,
)
from router.channels.settings import secret
from router.schemas import InboundMessage

MAX_SKEW_SECONDS = 300
INCOMING = ("incoming", 0)


def chatwoot_signature(secret_value: str, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac_hex(secret_value, timestamp.encode() + b"." + body)


def _created_at(value: Any) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return from_unix(int(value))
    if isinstance(value, str):
        for fmt in ("%Y-%m-%d %H:%M:%S UTC", "%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
            try:
                return datetime.strptime(value, fmt).replace(tzinfo=UTC)
            except ValueError:
                continue
        return from_unix(value)
    return None


class ChatwootAdapter(BaseAdapter):
    name = "chatwoot"

    def enabled(self) -> tuple[bool, str]:
        if secret(self.settings.chatwoot_webhook_secret) is None and secret(self.settings.chatwoot_webhook_token) is None:
            return False, "set SWITCHBOARD_CHATWOOT_WEBHOOK_SECRET (or _TOKEN) to enable the chatwoot channel"
        return True, "ok"

    def verify(self, request: WebhookRequest) -> None:
        key = secret(self.settings.chatwoot_webhook_secret)
        if key is not None and request.headers.get("x-chatwoot-signature"):
            ts = request.headers.get("x-chatwoot-timestamp") or ""
            try:
                skew = abs(time.time() - int(ts))
            except ValueError:
                raise SignatureError("missing or bad X-Chatwoot-Timestamp header") from None
            if skew > MAX_SKEW_SECONDS:
                raise SignatureError("X-Chatwoot-Timestamp is too old (replay?)")
            if not same(request.headers["x-chatwoot-signature"], chatwoot_signature(key, ts, request.body)):
                raise SignatureError("bad X-Chatwoot-Signature")
            return
        token = secret(self.settings.chatwoot_webhook_token)
        if token is not None and same(request.query.get("token"), token):
            return
        raise SignatureError("missing or bad X-Chatwoot-Signature (or ?token=)")

    def parse(self, request: WebhookRequest) -> Parsed:
        data = obj(json_body(request), "body")
        event = data.get("event")
        if not isinstance(event, str):
            raise MalformedPayload("event must be a string")
        if event != "message_created":
            return Parsed(ignored=[f"event:{event}"])
        message_type = data.get("message_type")
        if message_type not in INCOMING:
            return Parsed(ignored=[f"message_type:{message_type}"])
        if data.get("private") is True:
            return Parsed(ignored=["private"])
        conversation = obj(data.get("conversation"), "conversation")
        status = conversation.get("status")
        if status == "open":   # human agents own it: the bot stays silent
            return Parsed(ignored=["conversation_open"])
        if status in ("resolved", "snoozed"):
            return Parsed(ignored=[f"conversation_{status}"])
        account = obj(data.get("account"), "account")
        account_id = text_of(account.get("id"), "account.id")
        conversation_id = text_of(conversation.get("id"), "conversation.id")
        if not account_id.isdigit() or not conversation_id.isdigit():
            raise MalformedPayload("account.id and conversation.id must be numbers")
        configured = self.settings.chatwoot_account_id
        if configured is not None and account_id != str(configured):
            raise MalformedPayload("account.id is not the configured SWITCHBOARD_CHATWOOT_ACCOUNT_ID")
        message_id = text_of(data.get("id"), "id")
        sender: dict[str, Any] = data["sender"] if isinstance(data.get("sender"), dict) else {}
        contact_id = text_of(sender.get("id"), "sender.id", required=False)
        if contact_id is None:
            inbox: dict[str, Any] = (conversation["contact_inbox"] if isinstance(conversation.get("contact_inbox"), dict)
                                     else {})
            contact_id = text_of(inbox.get("contact_id"), "conversation.contact_inbox.contact_id")
        content = data.get("content")
        if content is not None and not isinstance(content, str):
            raise MalformedPayload("content must be a string")
        attachments = [
            {"type": a.get("file_type"), "url": a.get("data_url"), "id": a.get("id")}
            for a in (data.get("attachments") or []) if isinstance(a, dict)
        ]
        metadata: dict[str, Any] = {"kind": "text" if not attachments else "attachment",
                                    "inbox_id": (data.get("inbox") or {}).get("id") if isinstance(data.get("inbox"), dict) else None}
        if attachments:
            metadata["attachments"] = attachments
        user = f"{account_id}:{contact_id}"
        msg = InboundMessage(
            channel=self.name, conversation_external_id=f"{account_id}:{conversation_id}", customer_id=user,
            message_external_id=f"{account_id}:{message_id}", text=content or "",
            sent_at=_created_at(data.get("created_at")), metadata=metadata, attachments=attachments,
        )
        profile = {k: sender[k] for k in ("name", "email", "phone_number") if isinstance(sender.get(k), str)}
        route = Route(channel_user_id=user, profile=profile,
                      address={"account_id": account_id, "conversation_id": conversation_id})
        return Parsed(messages=[ParsedMessage(msg, route)])

    def after_turn(self, outcome: Outcome) -> list[OutboundAction]:
        if not outcome.handed_to_human:
            return []
        turn = outcome.response.get("turn_id")
        return [OutboundAction(kind="conversation_status", payload={"status": "open"}, dedupe_key=f"chatwoot-open:{turn}")]
