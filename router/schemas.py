"""The gateway's wire contracts: the generic inbound message and the turn it produces."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from text.content import NOT_SPACE


def scrub(value: Any) -> Any:
    """Values Postgres can store: no NUL characters, no lone surrogates, no infinite numbers (all occur in
    hostile JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "replace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


#: ids and text must keep something after whitespace is stripped (the API strips it): a character every regex
#: engine, the schema's clients' included, reads as content
_ID = NOT_SPACE
_TEXT = _ID


class MessageBody(BaseModel):
    """The generic message shape of ``POST /v1/messages`` (and of the ``web`` channel). Its channel is any
    string here: the API's model (:class:`router.app.api.messages.MessageIn`) narrows it to the channel
    registry's names, which this layer cannot import; the web channel fixes it to ``web``."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    channel: str = Field(examples=["web"], description="A known channel; the integration key must list it.")
    conversation_id: str = Field(min_length=1, max_length=200, pattern=_ID, description="The channel's conversation id.")
    customer_id: str = Field(min_length=1, max_length=200, pattern=_ID)
    message_id: str = Field(min_length=1, max_length=200, pattern=_ID,
                            description="Unique per channel; retries repeat it.")
    text: str = Field(min_length=1, pattern=_TEXT, description="Over the configured limit the answer is 413.")
    sent_at: datetime | None = None
    metadata: dict[str, Any] | None = Field(
        default=None, description="The client's own data, stored under `client` with the message and never "
        "read as gateway state.")

    @model_validator(mode="before")
    @classmethod
    def _scrub(cls, data: Any) -> Any:
        return scrub(data)


class InboundMessage(BaseModel):
    """A message from any channel after normalisation: what the pipeline routes."""

    channel: str
    conversation_external_id: str
    customer_id: str
    message_external_id: str
    text: str
    sent_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    attachments: list[dict[str, Any]] = Field(default_factory=list)
    integration_key_id: str | None = None   # the direct API's caller: a retry must come from the same key

    @model_validator(mode="before")
    @classmethod
    def _scrub(cls, data: Any) -> Any:
        return scrub(data)

    @classmethod
    def from_api(cls, m: MessageBody, *, integration_key_id: str | None = None) -> "InboundMessage":
        """Client metadata goes under ``client``: nothing the gateway reads as its own state can come from it."""
        return cls(
            channel=m.channel,
            conversation_external_id=m.conversation_id,
            customer_id=m.customer_id,
            message_external_id=m.message_id,
            text=m.text,
            sent_at=m.sent_at,
            metadata={"client": m.metadata} if m.metadata else {},
            integration_key_id=integration_key_id,
        )


class Citation(BaseModel):
    doc_id: str
    chunk_id: str | None = None
    title: str | None = None
    section: str | None = None
    source: str | None = None
    score: float | None = None


class Reply(BaseModel):
    text: str
    citations: list[Citation] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list, description="Quick replies the customer may tap.")
    lang: str | None = Field(default=None, description="The reply's language (en | zh).")


class Escalation(BaseModel):
    rule: str
    reason: str
    priority: str = "normal"


class Decision(BaseModel):
    intent: str | None = None
    tier: str | None = None
    confidence: float | None = None
    channel: str | None = Field(default=None, description="What decided: harness, rules, embeddings, state.")
    explanation: dict[str, Any] = Field(default_factory=dict)
    escalation: Escalation | None = None


class TurnOut(BaseModel):
    conversation_id: str = Field(description="The gateway's conversation id (for /v1/conversations/{id}/...).")
    external_conversation_id: str
    turn_id: str
    state: str
    decision: Decision
    reply: Reply | None = None
    ticket_id: str | None = None
    lang: str | None = Field(default=None, description="The language the gateway answers this customer in.")
    outcome: str | None = Field(default=None, description="What the turn did: resolved (answered by the bot), "
                                "clarified (asked back), ticketed (opened a ticket), held (added to the ticket "
                                "of a person), none.")
    flow: dict[str, Any] | None = Field(default=None, description="The workflow that answered: workflow, "
                                        "instance_id, step, status, awaiting, pending_action.")
