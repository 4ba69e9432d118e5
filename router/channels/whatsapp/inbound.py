"""WhatsApp Business Cloud API webhooks.

Meta signs the raw body: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256(app secret, body)>``; the
subscription handshake is a GET with ``hub.mode=subscribe``, ``hub.verify_token`` and
``hub.challenge`` (echoed back). One POST may batch several messages and delivery statuses
(``entry[].changes[].value``). Statuses (sent, delivered, read, failed with its errors) become
receipts the route stores against the outbox row that got that ``wamid``. Retries repeat the ``wamid``.
"""

from __future__ import annotations

from typing import Any

from router.channels.base import (
    Ack,
    BaseAdapter,
    HandshakeError,
    MalformedPayload,
    Parsed,
    ParsedMessage,
    Receipt,
    Route,
    SignatureError,
    WebhookRequest,
    from_unix,
    hmac_hex,
    json_body,
    obj,
    same,
    scrub,
    text_of,
)
from router.channels.settings import configured, secret
from router.schemas import InboundMessage

MEDIA = ("image", "audio", "video", "document", "sticker")
RECEIPT_STATUSES = ("sent", "delivered", "read", "failed")


class WhatsAppAdapter(BaseAdapter):
    name = "whatsapp"

    def enabled(self) -> tuple[bool, str]:
        if secret(self.settings.whatsapp_app_secret) is None:
            return False, "set SWITCHBOARD_WHATSAPP_APP_SECRET to enable the whatsapp channel"
        return True, "ok"

    def verify(self, request: WebhookRequest) -> None:
        expected = "sha256=" + hmac_hex(configured(self.settings.whatsapp_app_secret), request.body)
        if not same(request.headers.get("x-hub-signature-256"), expected):
            raise SignatureError("missing or bad X-Hub-Signature-256 header")

    def handshake(self, request: WebhookRequest) -> Ack:
        q = request.query
        token = secret(self.settings.whatsapp_verify_token)
        if q.get("hub.mode") != "subscribe" or not same(q.get("hub.verify_token"), token):
            raise HandshakeError("hub.mode must be 'subscribe' and hub.verify_token must match")
        challenge = q.get("hub.challenge")
        if not challenge:
            raise HandshakeError("missing hub.challenge")
        return Ack(challenge, media_type="text/plain")

    def parse(self, request: WebhookRequest) -> Parsed:
        data = obj(json_body(request), "body")
        if data.get("object") != "whatsapp_business_account":
            raise MalformedPayload("object must be 'whatsapp_business_account'")
        entries = data.get("entry")
        if not isinstance(entries, list):
            raise MalformedPayload("entry must be a list")
        parsed = Parsed()
        for entry in entries:
            changes = obj(entry, "entry[]").get("changes") or []
            if not isinstance(changes, list):
                raise MalformedPayload("entry[].changes must be a list")
            for change in changes:
                change = obj(change, "changes[]")
                if change.get("field") != "messages":
                    parsed.ignored.append(f"field:{change.get('field')}")
                    continue
                self._value(obj(change.get("value"), "changes[].value"), parsed)
        return parsed

    def _value(self, value: dict[str, Any], parsed: Parsed) -> None:
        meta = obj(value.get("metadata") or {}, "value.metadata")
        phone_number_id = text_of(meta.get("phone_number_id"), "metadata.phone_number_id")
        names = {}
        for contact in value.get("contacts") or []:
            if isinstance(contact, dict) and contact.get("wa_id") and isinstance(contact.get("profile"), dict):
                name = contact["profile"].get("name")
                names[str(contact["wa_id"])] = name if isinstance(name, str) else None
        statuses = value.get("statuses") or []
        for status in statuses if isinstance(statuses, list) else []:
            receipt = self._receipt(status)
            if receipt is None:
                parsed.ignored.append(f"status:{status.get('status') if isinstance(status, dict) else '?'}")
            else:
                parsed.receipts.append(receipt)
        messages = value.get("messages") or []
        if not isinstance(messages, list):
            raise MalformedPayload("value.messages must be a list")
        for m in messages:
            m = obj(m, "messages[]")
            wa_id = text_of(m.get("from"), "messages[].from")
            msg_id = text_of(m.get("id"), "messages[].id")
            kind = text_of(m.get("type"), "messages[].type", required=False) or "unknown"
            if kind in ("reaction", "unsupported", "system", "ephemeral", "request_welcome"):
                parsed.ignored.append(f"type:{kind}")
                continue
            text, attachments = self._content(kind, m)
            metadata: dict[str, Any] = {"kind": kind, "phone_number_id": phone_number_id}
            if attachments:
                metadata["attachments"] = attachments
            if isinstance(m.get("context"), dict) and m["context"].get("id"):
                metadata["in_reply_to"] = str(m["context"]["id"])
            msg = InboundMessage(
                channel=self.name, conversation_external_id=wa_id, customer_id=wa_id,
                message_external_id=msg_id, text=text, sent_at=from_unix(m.get("timestamp")),
                metadata=metadata, attachments=attachments,
            )
            profile = {"name": names[wa_id]} if names.get(wa_id) else {}
            route = Route(channel_user_id=wa_id, profile=profile,
                          address={"phone_number_id": phone_number_id, "to": wa_id})
            parsed.messages.append(ParsedMessage(msg, route))

    @staticmethod
    def _receipt(status: Any) -> Receipt | None:
        """A status notification as a receipt; None for one we do not track (or cannot read)."""
        if not isinstance(status, dict) or status.get("status") not in RECEIPT_STATUSES:
            return None
        status = scrub(status)      # strings Postgres can store
        wamid = status.get("id")
        if not isinstance(wamid, str) or not wamid or len(wamid) > 512:
            return None
        receipt = Receipt(provider_message_id=wamid, status=status["status"], at=from_unix(status.get("timestamp")))
        errors = status.get("errors")
        if receipt.status == "failed" and isinstance(errors, list) and errors and isinstance(errors[0], dict):
            err = errors[0]
            details: dict[str, Any] = err["error_data"] if isinstance(err.get("error_data"), dict) else {}
            receipt.error_code = str(err["code"])[:32] if isinstance(err.get("code"), int | str) else None
            # kept long here: the receipt store masks, then cuts (a cut first could split a phone number)
            receipt.error_title = str(err.get("title") or err.get("message") or "")[:4000] or None
            detail = details.get("details") or (err.get("message") if err.get("message") != err.get("title") else None)
            receipt.error_detail = str(detail)[:4000] if detail else None
        return receipt

    @staticmethod
    def _content(kind: str, m: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        if kind == "text":
            body = obj(m.get("text"), "messages[].text").get("body")
            if not isinstance(body, str):
                raise MalformedPayload("messages[].text.body must be a string")
            return body, []
        if kind in MEDIA:
            media = obj(m.get(kind), f"messages[].{kind}")
            att = {"type": kind, **{k: media.get(k) for k in ("id", "mime_type", "sha256", "filename") if media.get(k)}}
            caption = media.get("caption")
            return caption if isinstance(caption, str) else "", [att]
        if kind == "location":
            loc = obj(m.get("location"), "messages[].location")
            label = " ".join(loc[k] for k in ("name", "address") if isinstance(loc.get(k), str))
            return label, [{"type": "location", "lat": loc.get("latitude"), "lon": loc.get("longitude"), "label": label}]
        if kind == "button":  # quick-reply button of a template message
            button = obj(m.get("button"), "messages[].button").get("text")
            return button if isinstance(button, str) else "", []
        if kind == "interactive":
            inter = obj(m.get("interactive"), "messages[].interactive")
            chosen = inter.get("button_reply") or inter.get("list_reply") or {}
            title = chosen.get("title") if isinstance(chosen, dict) else None
            return title if isinstance(title, str) else "", []
        return "", [{"type": kind}]
