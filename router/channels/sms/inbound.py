"""SMS through Twilio's messaging webhook (form-encoded POST).

Twilio signs ``X-Twilio-Signature = base64(HMAC-SHA1(auth token, full URL + every POST parameter
name and value, sorted by name, concatenated))``. The URL is the one Twilio called: behind a proxy
set ``SWITCHBOARD_PUBLIC_URL`` so the gateway rebuilds it. The webhook answers an empty TwiML
``<Response/>``; replies go out through the Messages REST API via the outbox. Retries repeat the
``MessageSid``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections import defaultdict
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

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
    same,
)
from router.channels.settings import configured, secret
from router.schemas import InboundMessage

EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'


def form_pairs(body: bytes) -> list[tuple[str, str]]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPayload("the form body is not UTF-8") from None
    try:
        return parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=500)
    except ValueError as exc:
        raise MalformedPayload(f"the body is not form-encoded: {exc}") from None


def twilio_signature(auth_token: str, url: str, pairs: list[tuple[str, str]]) -> str:
    grouped: dict[str, list[str]] = defaultdict(list)
    for k, v in pairs:
        grouped[k].append(v)
    payload = url + "".join(k + v for k in sorted(grouped) for v in sorted(grouped[k]))
    digest = hmac.new(auth_token.encode(), payload.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def _url_variants(url: str) -> list[str]:
    """The URL with and without an explicit default port: Twilio's own validators accept both."""
    parts = urlsplit(url)
    variants = [url]
    if parts.port is not None:
        variants.append(urlunsplit(parts._replace(netloc=parts.hostname or "")))
    else:
        port = 443 if parts.scheme == "https" else 80
        variants.append(urlunsplit(parts._replace(netloc=f"{parts.hostname}:{port}")))
    return variants


class SmsAdapter(BaseAdapter):
    name = "sms"

    def enabled(self) -> tuple[bool, str]:
        if secret(self.settings.twilio_auth_token) is None:
            return False, "set SWITCHBOARD_TWILIO_AUTH_TOKEN to enable the sms channel"
        return True, "ok"

    def signed_url(self, request: WebhookRequest) -> str:
        public = self.settings.public_url
        if not public:
            return request.url
        parts = urlsplit(request.url)
        return public.rstrip("/") + parts.path + (f"?{parts.query}" if parts.query else "")

    def verify(self, request: WebhookRequest) -> None:
        given = request.headers.get("x-twilio-signature")
        if not given:
            raise SignatureError("missing X-Twilio-Signature header")
        pairs = form_pairs(request.body)
        token = configured(self.settings.twilio_auth_token)
        if not any(same(given, twilio_signature(token, url, pairs)) for url in _url_variants(self.signed_url(request))):
            raise SignatureError("bad X-Twilio-Signature")

    def parse(self, request: WebhookRequest) -> Parsed:
        params: dict[str, str] = {}
        for k, v in form_pairs(request.body):
            params.setdefault(k, v)
        sid = params.get("MessageSid") or params.get("SmsMessageSid") or params.get("SmsSid")
        sender, to = params.get("From"), params.get("To")
        if not sid or not sender or not to:
            raise MalformedPayload("MessageSid, From and To are required")
        if max(len(sid), len(sender), len(to)) > 256:
            raise MalformedPayload("an id parameter is too long")
        try:
            n_media = min(int(params.get("NumMedia") or 0), 10)
        except ValueError:
            raise MalformedPayload("NumMedia must be an integer") from None
        attachments: list[dict[str, Any]] = [
            {"type": "media", "url": params.get(f"MediaUrl{i}"), "mime_type": params.get(f"MediaContentType{i}")}
            for i in range(n_media) if params.get(f"MediaUrl{i}")
        ]
        metadata: dict[str, Any] = {"kind": "mms" if attachments else "text", "to": to}
        if attachments:
            metadata["attachments"] = attachments
        for key in ("FromCountry", "NumSegments"):
            if params.get(key):
                metadata[key] = params[key]
        msg = InboundMessage(
            channel=self.name, conversation_external_id=sender, customer_id=sender, message_external_id=sid,
            text=params.get("Body", ""), metadata=metadata, attachments=attachments,
        )
        route = Route(channel_user_id=sender, address={"to": sender, "from": to,
                                                       "account_sid": params.get("AccountSid")})
        return Parsed(messages=[ParsedMessage(msg, route)])

    def acknowledge(self, outcomes: list[Outcome], parsed: Parsed) -> Ack:
        return Ack(EMPTY_TWIML, media_type="text/xml")
