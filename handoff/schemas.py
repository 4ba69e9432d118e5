"""Wire shapes of the handoff API (also its OpenAPI documentation)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from text.content import HAS_CONTENT

Kind = Literal["assist", "handoff", "approval"]
Status = Literal["queued", "claimed", "resolved", "returned_to_bot", "cancelled"]
Priority = Literal["urgent", "high", "normal", "low"]
View = Literal["all", "mine", "unassigned"]


class ProblemOut(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str | None = None
    request_id: str | None = None


class TicketSummary(BaseModel):
    """A ticket as listed: everything but the context package and the draft."""

    id: str
    kind: Kind
    status: Status
    conversation_id: str
    channel: str
    customer_id: str
    reason: str = Field(description="Why the ticket was opened, as the gateway wrote it (for machines).")
    reason_text: dict[str, str] = Field(default_factory=dict, description=(
        "The reason in words an agent reads, per UI language: {\"en\": ..., \"zh\": ...}."))
    customer_name: str | None = Field(default=None, description="The customer's name where the shop knows it.")
    last_message: str | None = Field(default=None, description="What the customer wrote last (agent view); "
                                     "in lists only.")
    language: str | None = Field(default=None, description="The customer's language (zh, en, ...) from the "
                                 "context package or the customer's latest message.")
    priority: Priority
    team: str
    skills: list[str] = []
    tags: list[str] = []
    hold: Literal["pending", "on_hold"] | None = Field(default=None, description=(
        "pending: waiting for the customer (cleared when they write); on_hold: waiting on someone else."))
    draft_status: str | None = None
    amount: float | None = None
    currency: str | None = None
    approval_level: str | None = Field(default=None, description="Lowest approval level allowed to approve the amount.")
    approved_by: str | None = None
    approved_at: datetime | None = None
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    lease_expires_at: datetime | None = None
    first_claimed_at: datetime | None = None
    sla_due_at: datetime = Field(description="Deadline for a human to pick the ticket up.")
    sla_breaches: int = 0
    requeues: int = 0
    outcome: str | None = None
    resolved_by: str | None = None
    created_at: datetime
    updated_at: datetime
    closed_at: datetime | None = None


class Ticket(TicketSummary):
    """A ticket with its context package (transcript, decisions, evidence, customer facts) and L2 draft."""

    context: dict[str, Any] = Field(description=(
        "The context package. Its `memory` (the customer as the shop knows them: profile, recent orders, "
        "earlier outcomes) is loaded when an agent first reads or claims the ticket: `memory_status` is "
        "`pending` until then "
        "(`memory` null), then `loaded`, `partial` (some of the shop's reads failed: `memory.failed`) or "
        "`unavailable` (the shop gave none). A package without `memory_status` has no memory to load."))
    draft: dict[str, Any] | None = None


class TicketPage(BaseModel):
    items: list[TicketSummary]
    next_cursor: str | None = Field(default=None, description="Pass as `cursor` for the next page; null at the end.")


class EventOut(BaseModel):
    id: int
    actor: str
    agent: str | None = None
    action: str
    payload: dict[str, Any]
    at: datetime


class EventPage(BaseModel):
    items: list[EventOut]
    next_after: int | None = Field(default=None, description="Pass as `after` for more; null at the end.")


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class ClaimNextIn(_In):
    kind: Kind | None = Field(default=None, description="Only assist (L2) or only handoff (L3) tickets.")
    team: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
                             description="One of your teams (default: all of them).")


class ReleaseIn(_In):
    reason: str | None = Field(default=None, max_length=500)


class TransferIn(_In):
    """A team, an agent, or both (the schema says so, so a request naming neither is malformed: 422)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, json_schema_extra={"anyOf": [
        {"required": ["team"], "properties": {"team": {"type": "string"}}},
        {"required": ["agent"], "properties": {"agent": {"type": "string"}}}]})
    team: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
                             description="An existing team (an active agent works in it, or the default team); "
                                         "another is 404.")
    agent: str | None = Field(default=None, min_length=1, max_length=64,
                              description="Agent name or id: they hold it at once (an unknown or disabled one "
                                          "is 404).")
    note: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _names_a_target(self) -> TransferIn:
        if self.team is None and self.agent is None:
            raise ValueError("name a team, an agent, or both")
        return self


class TextIn(_In):
    text: str = Field(min_length=1, pattern=HAS_CONTENT,
                      description="Above the configured limit (4000 characters) the answer is 413.")


class RejectIn(_In):
    reason: str = Field(min_length=1, max_length=500, pattern=HAS_CONTENT)


class ResolveIn(_In):
    outcome: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", examples=["solved", "refunded", "duplicate"])
    note: str | None = Field(default=None, max_length=2000)


class NoteIn(_In):
    note: str | None = Field(default=None, max_length=2000)


class CancelIn(_In):
    reason: str = Field(min_length=1, max_length=500)


class ActionOut(BaseModel):
    ticket: Ticket
    event_id: int
    action: str
    delivery: dict[str, Any] | None = Field(default=None, description="Ids of the transcript and outbox rows.")
    replayed: bool = Field(default=False, description="True when an Idempotency-Key repeated an earlier action.")


class HeartbeatOut(BaseModel):
    ticket_id: str
    status: str
    lease_expires_at: datetime


class DepthRow(BaseModel):
    kind: str
    team: str
    priority: str
    queued: int
    claimed: int
    overdue: int


class HandlingRow(BaseModel):
    team: str
    closed_24h: int
    handle_seconds_avg: float | None = Field(description="First claim to close, on average.")
    handle_seconds_p50: float | None
    wait_seconds_avg: float | None = Field(description="Opened to first claim, on average.")


class StatsOut(BaseModel):
    queued: int
    claimed: int
    depth: list[DepthRow]
    queued_by_kind: dict[str, int]
    queued_by_team: dict[str, int]
    queued_by_priority: dict[str, int]
    oldest_wait_seconds: float | None
    overdue: int = Field(description="Queued tickets past their SLA right now.")
    breached_open: int = Field(description="Open tickets that breached their SLA at least once.")
    sla_breaches_24h: int
    handling: list[HandlingRow] = Field(default_factory=list,
                                        description="Per team, tickets closed in the last 24 hours.")
    teams: list[str] | None = Field(description="The teams counted (null: all).")
    at: datetime


class AgentOut(BaseModel):
    id: str | None
    name: str
    display_name: str | None = None
    role: str
    teams: list[str]
    skills: list[str]
    approval_level: str
    can_reveal: bool = Field(default=False, description="May reveal one masked personal value for a reason "
                             "(supervisors and admins always; agents when granted).")
