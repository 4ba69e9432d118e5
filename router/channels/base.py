"""The channel adapter protocol: verify, handshake, parse, answer.

Every channel's webhook is flattened into :class:`router.schemas.InboundMessage` here, so
nothing downstream branches on the channel. An adapter is pure: it reads the raw request and
settings, never the database; the webhook route does the storing, after ``verify`` passed.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, overload

from router.schemas import scrub  # noqa: F401  (re-exported for the adapters)
from router.schemas import InboundMessage


class WebhookError(Exception):
    """A refusal with its HTTP status; the route turns it into problem+json."""

    status = 400
    title: str | None = None

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class SignatureError(WebhookError):
    """Bad or missing signature: 401 and nothing is stored."""

    status = 401


class HandshakeError(WebhookError):
    """A verification handshake with the wrong token."""

    status = 403


class MalformedPayload(WebhookError):
    """The body is not what the channel documents: 422."""

    status = 422


class NoHandshake(WebhookError):
    """The channel has no GET verification handshake."""

    status = 405


@dataclass(frozen=True)
class WebhookRequest:
    """The raw request as an adapter needs it (headers lower-cased)."""

    method: str
    url: str
    headers: Mapping[str, str]
    query: Mapping[str, str]
    body: bytes = b""


@dataclass
class Route:
    """Where a message came from and how to answer: stored per conversation for the dispatcher."""

    channel_user_id: str
    address: dict[str, Any]
    profile: dict[str, Any] = field(default_factory=dict)
    customer_id: str | None = None   # for a first-seen identity; default "<channel>:<channel_user_id>"


@dataclass
class ParsedMessage:
    message: InboundMessage
    route: Route


@dataclass
class Receipt:
    """A channel's status report on a message we sent (WhatsApp ``statuses``)."""

    provider_message_id: str
    status: str                         # sent | delivered | read | failed
    at: datetime | None = None
    error_code: str | None = None
    error_title: str | None = None
    error_detail: str | None = None


@dataclass
class Parsed:
    """What one webhook delivery carries: customer messages, receipts, and events that carry neither."""

    messages: list[ParsedMessage] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)   # why each other event was skipped
    receipts: list[Receipt] = field(default_factory=list)
    receipts_recorded: int = 0                          # set by the route once stored


@dataclass
class Outcome:
    """One routed message, as the webhook answer and the post-turn hooks see it."""

    message: InboundMessage
    response: dict[str, Any]
    replayed: bool

    @property
    def reply_text(self) -> str | None:
        reply = self.response.get("reply") or None
        return reply.get("text") if isinstance(reply, dict) else None

    @property
    def handed_to_human(self) -> bool:
        decision = self.response.get("decision") or {}
        state = str(self.response.get("state") or "")
        return decision.get("tier") == "L3" or state.startswith("l3_")


@dataclass
class OutboundAction:
    """Something a channel needs queued after a turn (e.g. Chatwoot: open the conversation)."""

    kind: str
    payload: dict[str, Any]
    dedupe_key: str


@dataclass
class Ack:
    """The HTTP answer to a webhook delivery."""

    body: str | bytes | dict | list
    media_type: str = "application/json"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


class ChannelAdapter(Protocol):
    name: str
    #: replies can be returned in the webhook response when ready within this many seconds (WeChat)
    passive_reply_seconds: float | None

    def enabled(self) -> tuple[bool, str]:
        """Whether the channel is configured (its secret set); the reason when not."""

    def verify(self, request: WebhookRequest) -> None:
        """Raise :class:`SignatureError` unless the request is signed by the channel."""

    def handshake(self, request: WebhookRequest) -> Ack:
        """Answer the channel's GET verification, or raise HandshakeError / NoHandshake."""

    def parse(self, request: WebhookRequest) -> Parsed:
        """Normalise the body; raise :class:`MalformedPayload` when it is not the documented shape."""

    def acknowledge(self, outcomes: list[Outcome], parsed: Parsed) -> Ack:
        """The response when the reply (if any) goes through the outbox."""

    def build_reply(self, outcome: Outcome, text: str) -> Ack | None:
        """A synchronous reply carrying ``text`` (WeChat passive XML); None where the channel has none."""

    def passive_reply_fits(self, text: str) -> bool:
        """Whether ``text`` fits one synchronous reply; a longer one goes through the outbox in parts."""

    def after_turn(self, outcome: Outcome) -> list[OutboundAction]:
        """Extra outbound actions a turn implies on this channel."""

    def replay_key(self, request: WebhookRequest) -> tuple[str, int] | None:
        """A key that a verified request may present again only with the same body (see the nonce cache)."""


class BaseAdapter:
    """Defaults shared by the adapters: no handshake, JSON acknowledgement, no synchronous reply."""

    name = "base"
    passive_reply_seconds: float | None = None

    def __init__(self, settings):
        self.settings = settings

    def enabled(self) -> tuple[bool, str]:
        return True, "ok"

    def handshake(self, request: WebhookRequest) -> Ack:
        raise NoHandshake(f"the {self.name} channel has no GET verification handshake; POST messages")

    def acknowledge(self, outcomes: list[Outcome], parsed: Parsed) -> Ack:
        body: dict[str, Any] = {
            "status": "accepted",
            "messages": [{
                "message_id": o.message.message_external_id,
                "conversation_id": o.response.get("conversation_id"),
                "turn_id": o.response.get("turn_id"),
                "replayed": o.replayed,
            } for o in outcomes],
            "ignored": parsed.ignored,
        }
        if parsed.receipts:
            body["receipts"] = parsed.receipts_recorded
        return Ack(body)

    def build_reply(self, outcome: Outcome, text: str) -> Ack | None:
        return None

    def passive_reply_fits(self, text: str) -> bool:
        return True

    def after_turn(self, outcome: Outcome) -> list[OutboundAction]:
        return []

    def replay_key(self, request: WebhookRequest) -> tuple[str, int] | None:
        """(nonce key, seconds to remember it) where the signature does not cover the body; else None."""
        return None


# -- helpers shared by the adapters ------------------------------------------------------------

def hmac_hex(secret: str, body: bytes, digest=hashlib.sha256) -> str:
    return hmac.new(secret.encode(), body, digest).hexdigest()


def same(a: str | None, b: str | None) -> bool:
    """Constant-time comparison that treats a missing value as a mismatch."""
    if not a or not b:
        return False
    return hmac.compare_digest(a.encode(), b.encode())


def from_unix(value: Any) -> datetime | None:
    """A channel's unix timestamp (int or numeric string) as an aware datetime; None when absent/bad."""
    try:
        ts = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    if ts <= 0 or ts > 32503680000:  # beyond year 3000: not a timestamp
        return None
    return datetime.fromtimestamp(ts, tz=UTC)


@overload
def text_of(value: Any, field_name: str, *, required: Literal[True] = True, max_len: int = 512) -> str: ...
@overload
def text_of(value: Any, field_name: str, *, required: bool, max_len: int = 512) -> str | None: ...
def text_of(value: Any, field_name: str, *, required: bool = True, max_len: int = 512) -> str | None:
    """A scalar field as a string id (ints allowed), or MalformedPayload (a required one is never None)."""
    if value is None or value == "":
        if required:
            raise MalformedPayload(f"missing field: {field_name}")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise MalformedPayload(f"field {field_name} must be a string or an integer")
    s = str(value)
    if len(s) > max_len:
        raise MalformedPayload(f"field {field_name} is too long")
    return s


def obj(value: Any, field_name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedPayload(f"field {field_name} must be an object")
    return value


def json_body(request: WebhookRequest) -> Any:
    import json

    try:
        return json.loads(request.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedPayload(f"the body is not JSON: {exc}") from None
