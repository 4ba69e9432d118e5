"""Changing tickets: the router's side (open, join, cancel), claims and leases, agent actions, approvals, sweeps.

The commands side of the queue (:class:`TicketCommands`, mixed into :class:`handoff.service.HandoffService`).
Each agent action is one transaction: the ticket row is locked (after its conversation, see
:meth:`TicketCommands._lock`), the change, its audit event, its notification and the conversation's state
change (through the port) commit or roll back together; an action that loses a deadlock is run again whole.
The SQL is in :mod:`handoff.tickets`.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from decimal import Decimal, InvalidOperation
from typing import Any, Concatenate, ParamSpec, TypeVar

import psycopg
from psycopg.rows import DictRow

from failures.retry import retry_lost_races
from handoff import agents as A
from handoff import tickets as T
from handoff.access import check_holder, check_open, check_visible, team_scope
from handoff.config import HandoffConfig
from handoff.errors import Conflict, Forbidden, Invalid, NotFound, TooLarge, Unavailable
from handoff.models import KINDS, PRIORITIES, Agent, level_rank, priority_rank
from handoff.ports import ConversationPort, CustomerUnreachable, DeliveryUnavailable
from handoff.queries import queue_depth, queue_position

SWEEP_LOCK_KEY = T.SWEEP_LOCK_KEY
_TEAM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_OUTCOME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")

Conn = psycopg.Connection[DictRow]   # the service's connections hand out rows as dicts
_S = TypeVar("_S")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _retrying(fn: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """Re-run an action that lost a deadlock: it rolled back whole (its port calls and notifications
    included), so running it again is safe. Retries are logged under the service's module."""

    @functools.wraps(fn)
    def run(self: _S, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        def logged(attempt: int) -> None:
            logging.getLogger(type(self).__module__).info("handoff %s lost a deadlock; retrying (attempt %d)",
                                                          fn.__name__, attempt)

        return retry_lost_races(lambda: fn(self, *args, **kwargs), attempts=4, low=0.005, high=0.03,
                                on_retry=logged)

    return run


def _proposed_action(draft: dict[str, Any] | None) -> Any:
    """What the draft proposes: drafts carry ``proposed_action`` (older ones ``action``)."""
    draft = draft or {}
    return draft.get("proposed_action", draft.get("action"))


def _draft_amount(draft: dict[str, Any] | None) -> Decimal | None:
    """A money amount the draft carries, on itself or on its proposed action; None if none (or not a number)."""
    draft = draft or {}
    action = _proposed_action(draft)
    for value in (draft.get("amount"), action.get("amount") if isinstance(action, dict) else None):
        if value is None or isinstance(value, bool):
            continue
        try:
            amount = Decimal(str(value))
        except (InvalidOperation, ValueError):
            continue
        if amount.is_finite():
            return abs(amount)
    return None


class TicketCommands:
    """Every change to a ticket (mixed into :class:`handoff.service.HandoffService`)."""

    pool: Any
    port: ConversationPort
    config: HandoffConfig
    metrics_hook: Any
    _action: Callable[[], AbstractContextManager[tuple[Conn, list[str]]]]
    _read: Callable[[], AbstractContextManager[Conn]]
    _publish: Callable[[Conn, list[str]], None]
    _count: Callable[[dict[str, Any], str], None]
    _metric: Callable[..., None]

    def _lease(self) -> float:
        return float(self.config.lease_seconds)

    def _lease_expr(self) -> T.Sql:
        return T.Sql("now() + make_interval(secs => %s)", self._lease())

    def _lock(self, conn: Conn, ticket_id: Any) -> dict[str, Any]:
        """Lock the ticket for an agent action, after its conversation.

        The router locks a conversation and then touches its ticket; an action that locked the
        ticket first and then (through the port) the conversation could deadlock with it. The
        port's ``before_ticket_change(conn, conversation_id)`` locks the conversation first, so
        every writer takes the two in the same order.
        """
        self.port.before_ticket_change(conn, T.conversation_of(conn, ticket_id))
        return T.lock_ticket(conn, ticket_id)

    @staticmethod
    def _event(conn: Conn, notes: list[str], ticket: dict[str, Any], actor: Agent, action: str,
               payload: dict[str, Any] | None = None, *, idempotency_key: str | None = None,
               from_team: str | None = None) -> dict[str, Any]:
        return T.record_event(conn, ticket, actor, action, payload, idempotency_key=idempotency_key, notes=notes,
                              from_team=from_team)

    # -- the router's side (caller's transaction) -----------------------------------------------

    def open_ticket(self, conn: Conn, *, kind: str, conversation_id: str, channel: str,
                    customer_id: str, reason: str, priority: str = "normal", team: str | None = None,
                    context: dict[str, Any], draft: dict[str, Any] | None = None, amount: float | None = None,
                    currency: str | None = None, skills: list[str] | tuple[str, ...] = (),
                    actor: str = "bot", notes: list[str] | None = None) -> dict[str, Any]:
        """Queue a ticket for the conversation, in the caller's transaction; returns the row (with ``created``).

        A conversation has at most one open ticket: a second escalation joins the open one
        (its priority can only rise, an assist becomes a handoff when a human is needed, the
        newer context replaces the older) instead of queueing a duplicate. With ``notes`` the
        queue notification is collected there for :meth:`publish` after the caller commits
        (recommended: a NOTIFY inside the caller's transaction serialises its commit behind
        Postgres's notification lock); without, it is sent with the transaction.
        """
        if kind not in KINDS:
            raise Invalid(f"unknown ticket kind {kind!r}; one of {', '.join(KINDS)}")
        if priority not in PRIORITIES:
            raise Invalid(f"unknown priority {priority!r}; one of {', '.join(PRIORITIES)}")
        if not reason:
            raise Invalid("a ticket needs a reason")
        floor = self.config.priority_floor(reason)
        if floor and priority_rank(floor) < priority_rank(priority):
            priority = floor
        team = team or self.config.default_team
        if not _TEAM.match(team):
            raise Invalid(f"invalid team {team!r}")
        if amount is not None and amount < 0:
            raise Invalid("amount must not be negative")
        package = T.normalise_context(context, draft)
        conversation_id = str(conversation_id)
        params = {
            "kind": kind, "conversation_id": conversation_id, "channel": channel, "customer_id": str(customer_id),
            "reason": reason, "priority": priority, "team": team, "skills": list(skills or ()),
            "context": json.dumps(package, ensure_ascii=False, default=str),
            "draft": json.dumps(draft, ensure_ascii=False, default=str) if draft is not None else None,
            "draft_status": "pending" if draft is not None else None,
            "amount": amount, "currency": currency, "approval_level": self.config.required_level(amount),
            "sla": float(self.config.sla_seconds[priority]),
        }
        for _ in range(3):
            ticket = T.insert_open_ticket(conn, params)
            if ticket is not None:
                T.record_event(conn, ticket, actor, "opened", {
                    "kind": kind, "reason": reason, "priority": priority, "team": team,
                    "amount": amount, "currency": currency, "approval_level": ticket["approval_level"]},
                    notes=notes)
                self._count(ticket, "opened")
                return {**ticket, "created": True}
            existing = T.open_ticket_of(conn, conversation_id, lock=True)
            if existing is not None:
                return {**self._join(conn, existing, params, actor, notes), "created": False}
        raise Conflict(f"could not open a ticket for conversation {conversation_id}: it keeps changing")

    def fill_memory(self, conn: Conn, ticket_id: Any, memory: dict[str, Any] | None, status: str) -> bool:
        """The session memory of a ticket opened with it still loading (``memory_status`` ``pending``), in the
        caller's transaction: only the package's ``memory`` and ``memory_status`` change (masked like the rest
        of it); a better outcome replaces a worse one, never the reverse. Whether it was written."""
        return T.fill_context_memory(conn, ticket_id, memory, status)

    def _join(self, conn: Conn, ticket: dict[str, Any], params: dict[str, Any], actor: str,
              notes: list[str] | None = None) -> dict[str, Any]:
        changes: dict[str, Any] = {"context": params["context"]}
        payload: dict[str, Any] = {"reason": params["reason"], "kind": params["kind"],
                                   "priority": params["priority"]}
        if priority_rank(params["priority"]) < priority_rank(ticket["priority"]):
            changes["priority"] = params["priority"]
            changes["sla_due_at"] = T.Sql("least(sla_due_at, now() + make_interval(secs => %s))", params["sla"])
            payload["priority_from"] = ticket["priority"]
        if params["kind"] == "handoff" and ticket["kind"] == "assist":
            changes["kind"] = "handoff"
            payload["kind_from"] = "assist"
        if params["draft"] is not None and ticket["draft"] is None:
            changes.update(draft=params["draft"], draft_status="pending")
        if params["amount"] is not None and (ticket["amount"] is None or params["amount"] > ticket["amount"]):
            changes.update(amount=params["amount"], currency=params["currency"],
                           approval_level=params["approval_level"])
        updated = T.update_ticket(conn, ticket["id"], **changes)
        T.record_event(conn, updated, actor, "escalated", payload, notes=notes)
        self._count(updated, "escalated")
        return updated

    def active_ticket(self, conn: Conn, conversation_id: str) -> dict[str, Any] | None:
        """The conversation's open (queued or claimed) ticket, if any."""
        return T.open_ticket_of(conn, conversation_id)

    def queue_position(self, conn: Conn, conversation_id: str) -> dict[str, Any] | None:
        """Where the conversation's queued ticket stands: its place in its team's queue and the team's usual
        wait (handoff.queries.queue_position), for the word to a customer who writes while waiting."""
        return queue_position(conn, conversation_id)

    def add_customer_message(self, conn: Conn, ticket_id: Any, text: str,
                             notes: list[str] | None = None, message_id: int | None = None) -> None:
        """The customer wrote while a human holds the conversation: an event on the ticket (and a live NOTIFY,
        or its note in ``notes`` for :meth:`publish` after the commit). With ``message_id`` its masked values
        carry references for a recorded reveal (handoff.reveal)."""
        from handoff.reveal import refs

        ticket = T.fetch_ticket(conn, ticket_id)
        payload = {"text": text} if message_id is None else {
            "text": text, "message_id": message_id, "personal": refs(text, message_id)}
        T.record_event(conn, ticket, "customer", "customer_message", payload, notes=notes)
        if ticket.get("hold") == "pending":   # the answer the agent waited for: the ticket is open again
            conn.execute("UPDATE tickets SET hold = NULL, updated_at = now() WHERE id = %s AND hold = 'pending'",
                         (T.parse_id(ticket["id"]),))

    def publish(self, conn: Conn, notes: list[str]) -> None:
        """Announce the notes collected by the calls above once the caller's transaction has committed."""
        self._publish(conn, notes)

    def cancel_ticket(self, conn: Conn, ticket_id: Any, *, reason: str,
                      actor: Agent | str = "bot") -> dict[str, Any]:
        """Cancel an open ticket (the customer left, the router withdrew it), in the caller's transaction."""
        ticket = T.lock_ticket(conn, ticket_id)
        check_open(ticket)
        updated = T.update_ticket(conn, ticket["id"], status="cancelled", claimed_by=None, lease_expires_at=None,
                                  outcome="cancelled", closed_at=T.Sql("now()"),
                                  resolved_by=actor.id if isinstance(actor, Agent) else None)
        T.record_event(conn, updated, actor, "cancelled", {"reason": reason})
        try:   # an approval ticket's waiting workflow ends in this transaction, or nothing is cancelled
            self.port.on_ticket_cancelled(conn, updated)
        except DeliveryUnavailable as exc:
            raise Unavailable(f"the ticket cannot be cancelled: {exc}") from None
        self._count(updated, "cancelled")
        return updated

    # -- claiming -----------------------------------------------------------------------------

    @_retrying
    def claim_next(self, agent: Agent, *, kind: str | None = None, team: str | None = None) -> dict[str, Any] | None:
        """Atomically take the best ticket the agent may work on (None when there is none)."""
        if kind is not None and kind not in KINDS:
            raise Invalid(f"unknown ticket kind {kind!r}; one of {', '.join(KINDS)}")
        teams = team_scope(agent, [team] if team else None)
        filters: list[str] = []
        params: dict[str, Any] = {"agent_id": agent.id, "actor": agent.actor, "lease": self._lease()}
        if teams is not None:
            filters.append("AND team = ANY(%(teams)s)")
            params["teams"] = teams
        if kind is not None:
            filters.append("AND kind = %(kind)s")
            params["kind"] = kind
        if not agent.sees_all_teams:
            filters.append("AND skills <@ %(skills)s::text[]")
            params["skills"] = list(agent.skills)
        port_sql = self.port.claim_sql()
        sql = T.claim_next_sql(filters, port_sql)
        if port_sql is not None:
            # the whole claim (pick, claim, audit, the conversation's move) is one statement, in
            # autocommit its own transaction: one round trip instead of four
            with self._read() as conn:
                row = conn.execute(sql, params).fetchone()
                if row is None:
                    return None
                ticket = T.ticket_row(row)
                self._publish(conn, [row["_note"]])
        else:
            with self._action() as (conn, notes):
                row = conn.execute(sql, params).fetchone()
                if row is None:
                    return None
                notes.append(row["_note"])
                ticket = T.ticket_row(row)
                self.port.on_ticket_claimed(conn, ticket)
        self._count(ticket, "claimed")
        return ticket

    @_retrying
    def claim(self, agent: Agent, ticket_id: Any) -> dict[str, Any]:
        """Take a given ticket. Claiming one you already hold renews the lease (a retry is harmless)."""
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_visible(agent, ticket)
            if not agent.has_skills(ticket["skills"]):
                raise Forbidden(f"ticket {ticket['id']} needs skills {', '.join(ticket['skills'])}")
            if ticket["status"] == "claimed" and ticket["claimed_by"] == agent.id:
                return T.update_ticket(conn, ticket["id"], lease_expires_at=self._lease_expr())
            check_open(ticket)
            if ticket["status"] == "claimed":
                raise Conflict(f"ticket {ticket['id']} is held by another agent", status_now="claimed",
                               claimed_by=ticket["claimed_by"])
            updated = T.update_ticket(conn, ticket["id"], status="claimed", claimed_by=agent.id,
                                      claimed_at=T.Sql("now()"), lease_expires_at=self._lease_expr(),
                                      first_claimed_at=T.Sql("coalesce(first_claimed_at, now())"))
            self._event(conn, notes, updated, agent, "claimed", {"via": "claim"})
            self.port.on_ticket_claimed(conn, updated)
        self._count(updated, "claimed")
        return updated

    def heartbeat(self, agent: Agent, ticket_id: Any) -> dict[str, Any]:
        """Extend the caller's lease. 409 when the lease was lost (expired and requeued, or transferred)."""
        tid = T.parse_id(ticket_id)
        with self._read() as conn:
            # an actor without an account (no id) holds no ticket: its lease is lost like any other
            row = T.extend_lease(conn, tid, agent.id, self._lease()) if agent.id is not None else None
            if row is None:
                ticket = T.fetch_ticket(conn, tid)
                check_visible(agent, ticket)
                raise Conflict(f"you no longer hold ticket {ticket['id']} (it is {ticket['status']})",
                               status_now=ticket["status"])
        return {"ticket_id": str(row["id"]), "status": row["status"], "lease_expires_at": row["lease_expires_at"]}

    def _requeue(self, conn: Conn, notes: list[str], agent: Agent, ticket: dict[str, Any], action: str,
                 payload: dict[str, Any], **changes: Any) -> dict[str, Any]:
        was_claimed = ticket["status"] == "claimed"
        updated = T.update_ticket(conn, ticket["id"], status="queued", claimed_by=None, claimed_at=None,
                                  lease_expires_at=None, requeues=T.Sql("requeues + 1"), **changes)
        moved = ticket["team"] if ticket["team"] != updated["team"] else None
        self._event(conn, notes, updated, agent, action, payload, from_team=moved)
        if was_claimed:
            self.port.on_ticket_requeued(conn, updated)
        return updated

    @_retrying
    def release(self, agent: Agent, ticket_id: Any, *, reason: str | None = None) -> dict[str, Any]:
        """Give a claimed ticket back to the queue."""
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_holder(agent, ticket, supervisors_too=True)
            if ticket["status"] != "claimed":
                raise Conflict(f"ticket {ticket['id']} is not claimed", status_now=ticket["status"])
            updated = self._requeue(conn, notes, agent, ticket, "released",
                                    {"reason": reason, "previous_agent": ticket["claimed_by"]})
        self._count(updated, "released")
        return updated

    @_retrying
    def transfer(self, agent: Agent, ticket_id: Any, *, team: str | None = None, to_agent: str | None = None,
                 note: str | None = None) -> dict[str, Any]:
        """Move a ticket to another team (back in the queue there) and/or straight to another agent (claimed)."""
        if team is None and to_agent is None:
            raise Invalid("name a team, an agent, or both")
        if team is not None and not _TEAM.match(team):
            raise Invalid(f"invalid team {team!r}")
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_holder(agent, ticket, supervisors_too=True)
            new_team = team or ticket["team"]
            if new_team != ticket["team"]:
                self._check_team(conn, new_team)
            payload = {"from_team": ticket["team"], "to_team": new_team, "from_agent": ticket["claimed_by"],
                       "note": note}
            if to_agent is None:
                updated = self._requeue(conn, notes, agent, ticket, "transferred", payload, team=new_team)
            else:
                target = A.active_agent(conn, to_agent)
                if target is None:   # like an unknown team: a name that resolves to nothing
                    raise NotFound(f"no active agent {to_agent!r}", agent=to_agent)
                if not target.may_see(new_team):
                    raise Invalid(f"agent {target.name!r} is not in team {new_team!r}")
                if not target.has_skills(ticket["skills"]):
                    raise Invalid(f"agent {target.name!r} lacks skills {', '.join(ticket['skills'])}")
                payload["to_agent"] = target.id
                updated = T.update_ticket(conn, ticket["id"], team=new_team, status="claimed", claimed_by=target.id,
                                          claimed_at=T.Sql("now()"), lease_expires_at=self._lease_expr(),
                                          first_claimed_at=T.Sql("coalesce(first_claimed_at, now())"))
                self._event(conn, notes, updated, agent, "transferred", payload,
                            from_team=ticket["team"] if ticket["team"] != new_team else None)
                if ticket["status"] == "queued":
                    self.port.on_ticket_claimed(conn, updated)
        self._count(updated, "transferred")
        return updated

    def _check_team(self, conn: Conn, team: str) -> None:
        """A transfer goes only to a team someone works in (or the default team, where tickets open): a ticket
        sent to a misspelt team would drop out of every agent's queue. 404, like any name that resolves to
        nothing (422 is for requests the schema refuses)."""
        if team == self.config.default_team or A.team_exists(conn, team):
            return
        teams = sorted({*A.known_teams(conn), self.config.default_team})
        raise NotFound(f"no team {team!r}: no active agent works in it (teams: {', '.join(teams)}); "
                       f"add one with `switchboard agents add NAME --team {team}`", team=team, teams=teams)

    # -- talking to the customer and L2 decisions -----------------------------------------------

    def _check_text(self, text: str) -> str:
        text = (text or "").strip()
        if not text:
            raise Invalid("the message text is empty")
        if len(text) > self.config.max_message_chars:
            raise TooLarge(f"the message has {len(text)} characters; the limit is {self.config.max_message_chars}")
        return text

    @staticmethod
    def _check_key(key: str | None) -> str | None:
        if key is not None and not _KEY.match(key):
            raise Invalid("Idempotency-Key must be 1-200 visible ASCII characters")
        return key

    def _replay(self, conn: Conn, agent: Agent, ticket: dict[str, Any], key: str | None) -> dict[str, Any] | None:
        """The stored result of an action already done with this Idempotency-Key (under the ticket lock)."""
        if key is None:
            return None
        prior = T.event_by_key(conn, ticket["id"], key)
        if prior is None:
            return None
        if prior["actor"] != agent.actor:
            raise Conflict("this Idempotency-Key was used by another agent on this ticket")
        return {"ticket": ticket, "event_id": prior["id"], "action": prior["action"],
                "delivery": prior["payload"].get("delivery"), "replayed": True}

    def _send(self, conn: Conn, agent: Agent, ticket: dict[str, Any], text: str) -> dict[str, Any]:
        try:
            delivery = self.port.send_to_customer(conn, ticket, text=text, sender="agent", agent_id=agent.id)
        except CustomerUnreachable as exc:
            raise Conflict(f"the message cannot be delivered: {exc}") from None
        except DeliveryUnavailable as exc:
            raise Unavailable(f"the message cannot be delivered: {exc}") from None
        return {k: (str(v) if v is not None and not isinstance(v, int | float | str) else v)
                for k, v in (delivery or {}).items()}

    @_retrying
    def post_message(self, agent: Agent, ticket_id: Any, text: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Send an agent message to the customer: stored in the transcript and queued for delivery."""
        text = self._check_text(text)
        key = self._check_key(idempotency_key)
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_visible(agent, ticket)
            replay = self._replay(conn, agent, ticket, key)
            if replay:
                return replay
            check_holder(agent, ticket)
            delivery = self._send(conn, agent, ticket, text)
            ev = self._event(conn, notes, ticket, agent, "agent_message",
                             {"delivery": delivery, "chars": len(text)}, idempotency_key=key)
        self._count(ticket, "agent_message")
        return {"ticket": ticket, "event_id": ev["id"], "action": "agent_message", "delivery": delivery,
                "replayed": False}

    @_retrying
    def _decide_draft(self, agent: Agent, ticket_id: Any, *, text: str | None, key: str | None) -> dict[str, Any]:
        action = "approved" if text is None else "edited"
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_visible(agent, ticket)
            replay = self._replay(conn, agent, ticket, key)
            if replay:
                return replay
            check_holder(agent, ticket)
            if ticket["draft"] is None:
                raise Conflict(f"ticket {ticket['id']} has no draft to approve")
            if ticket["draft_status"] != "pending":
                raise Conflict(f"the draft of ticket {ticket['id']} was already {ticket['draft_status']}")
            required = self._required_level(ticket)
            if not agent.may_approve(required):
                money = " ".join(str(x) for x in (ticket["amount"], ticket["currency"]) if x is not None)
                raise Forbidden(
                    f"approving {money} needs approval level {required!r}; yours is {agent.approval_level!r}. "
                    "Transfer the ticket to someone who may approve it.",
                    required_level=required, your_level=agent.approval_level,
                )
            original = (ticket["draft"] or {}).get("text")
            final = text if text is not None else original
            delivery = self._send(conn, agent, ticket, final) if final else None
            decided = None
            if ticket["kind"] == "approval":   # the waiting workflow resumes in this transaction
                decided = self._apply_approval(conn, ticket, agent, approved=True)
            draft = {**ticket["draft"], "final_text": final} if final is not None else ticket["draft"]
            changes: dict[str, Any] = {"draft_status": action, "approved_by": agent.id, "approved_at": T.Sql("now()"),
                                       "draft": json.dumps(draft, ensure_ascii=False, default=str)}
            if ticket["kind"] in ("assist", "approval"):
                changes.update(status="resolved", outcome=action, claimed_by=None, lease_expires_at=None,
                               resolved_by=agent.id, closed_at=T.Sql("now()"))
            updated = T.update_ticket(conn, ticket["id"], **changes)
            payload = {"delivery": delivery, "amount": ticket["amount"], "currency": ticket["currency"],
                       "required_level": required, "approver_level": agent.approval_level,
                       "action": _proposed_action(ticket["draft"])}
            if decided is not None:
                payload["workflow"] = decided
            if text is not None:
                payload.update(original=original, edited=text)
            ev = self._event(conn, notes, updated, agent, action, payload, idempotency_key=key)
            if updated["status"] == "resolved":
                self.port.on_ticket_resolved(conn, updated)
        self._count(updated, action)
        return {"ticket": updated, "event_id": ev["id"], "action": action, "delivery": delivery, "replayed": False}

    def _required_level(self, ticket: dict[str, Any]) -> str | None:
        """The stricter of the ticket's approval level and the level the draft's own amount needs (a draft
        may carry an amount the ticket was not opened with); approve and edit-and-send both ask this."""
        levels = [ticket["approval_level"], self.config.required_level(_draft_amount(ticket["draft"]))]
        levels = [lv for lv in levels if lv is not None]
        return max(levels, key=level_rank) if levels else None

    def _apply_approval(self, conn: Conn, ticket: dict[str, Any], agent: Agent, *, approved: bool,
                        reason: str | None = None) -> dict[str, Any] | None:
        if agent.id is None:   # the workflow records who decided: an actor without an account cannot
            raise Forbidden(f"{agent.actor} has no agent account and cannot decide an approval")
        try:
            return self.port.on_approval_decided(conn, ticket, approved=approved, approver=agent.id, reason=reason)
        except DeliveryUnavailable as exc:
            raise Unavailable(f"the approval cannot be applied: {exc}") from None

    def approve(self, agent: Agent, ticket_id: Any, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Approve the L2 draft as it is: it is sent, the approver recorded; an assist ticket is then resolved."""
        return self._decide_draft(agent, ticket_id, text=None, key=self._check_key(idempotency_key))

    def edit_and_send(self, agent: Agent, ticket_id: Any, text: str, *,
                      idempotency_key: str | None = None) -> dict[str, Any]:
        """Approve the L2 draft with the agent's wording (both versions are kept for review)."""
        return self._decide_draft(agent, ticket_id, text=self._check_text(text),
                                  key=self._check_key(idempotency_key))

    @_retrying
    def reject(self, agent: Agent, ticket_id: Any, *, reason: str) -> dict[str, Any]:
        """Reject the draft with a reason; the agent keeps the ticket to answer, hand back or transfer."""
        reason = (reason or "").strip()
        if not reason:
            raise Invalid("a rejection needs a reason")
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_holder(agent, ticket)
            if ticket["draft"] is None or ticket["draft_status"] != "pending":
                raise Conflict(f"ticket {ticket['id']} has no pending draft")
            if ticket["kind"] == "approval":   # a rejected approval ends the wait: the workflow is told
                required = self._required_level(ticket)
                if not agent.may_approve(required):
                    raise Forbidden(f"deciding this approval needs approval level {required!r}; "
                                    f"yours is {agent.approval_level!r}", required_level=required,
                                    your_level=agent.approval_level)
                decided = self._apply_approval(conn, ticket, agent, approved=False, reason=reason)
                updated = T.update_ticket(conn, ticket["id"], draft_status="rejected", status="resolved",
                                          outcome="rejected", claimed_by=None, lease_expires_at=None,
                                          resolved_by=agent.id, closed_at=T.Sql("now()"))
                self._event(conn, notes, updated, agent, "rejected", {"reason": reason, "workflow": decided})
                self.port.on_ticket_resolved(conn, updated)
                self._count(updated, "rejected")
                return updated
            updated = T.update_ticket(conn, ticket["id"], draft_status="rejected")
            self._event(conn, notes, updated, agent, "rejected", {"reason": reason})
        self._count(updated, "rejected")
        return updated

    # -- closing --------------------------------------------------------------------------------

    def _check_not_approval(self, ticket: dict[str, Any], action: str) -> None:
        """An ``approval`` ticket is a workflow waiting for a decision: closing it any other way than approve,
        reject or cancel would leave the customer's request waiting forever with nothing run. 409 for
        everyone, whatever their level: no level makes this action right (403 would suggest one does)."""
        if ticket["kind"] != "approval":
            return
        required = self._required_level(ticket)
        raise Conflict(
            f"approval ticket {ticket['id']} cannot be {action}: it closes only by a decision. Approve or reject "
            f"it (approval level {required!r} or above), transfer it to someone who may, or cancel it "
            "(supervisors and admins), which ends the waiting request and tells the customer.",
            kind="approval", required_level=required, allowed=["approve", "reject", "cancel"])

    @_retrying
    def resolve(self, agent: Agent, ticket_id: Any, *, outcome: str, note: str | None = None) -> dict[str, Any]:
        """Close the ticket with an outcome; the conversation moves on to feedback and does not bounce back."""
        if not _OUTCOME.match(outcome or ""):
            raise Invalid("outcome must be a lower-case word such as 'solved', 'refunded' or 'duplicate'")
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_holder(agent, ticket, supervisors_too=True)
            self._check_not_approval(ticket, "resolved")
            updated = T.update_ticket(conn, ticket["id"], status="resolved", outcome=outcome, claimed_by=None,
                                      lease_expires_at=None, resolved_by=agent.id, closed_at=T.Sql("now()"))
            self._event(conn, notes, updated, agent, "resolved",
                        {"outcome": outcome, "note": note, "held_by": ticket["claimed_by"]})
            self.port.on_ticket_resolved(conn, updated)
        self._count(updated, "resolved")
        return updated

    @_retrying
    def return_to_bot(self, agent: Agent, ticket_id: Any, *, note: str | None = None) -> dict[str, Any]:
        """Hand the conversation back: the bot is in charge again."""
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_holder(agent, ticket, supervisors_too=True)
            self._check_not_approval(ticket, "returned to the bot")
            updated = T.update_ticket(conn, ticket["id"], status="returned_to_bot", outcome="returned_to_bot",
                                      claimed_by=None, lease_expires_at=None, resolved_by=agent.id,
                                      closed_at=T.Sql("now()"))
            self._event(conn, notes, updated, agent, "returned_to_bot",
                        {"note": note, "held_by": ticket["claimed_by"]})
            self.port.on_returned_to_bot(conn, updated)
        self._count(updated, "returned_to_bot")
        return updated

    @_retrying
    def cancel(self, agent: Agent, ticket_id: Any, *, reason: str) -> dict[str, Any]:
        """Cancel from the API (supervisors and admins). An approval ticket's waiting workflow is cancelled with
        it and the customer told (through the port), so nothing runs and nothing waits."""
        if not agent.sees_all_teams:
            raise Forbidden("only supervisors and admins cancel tickets")
        with self._action() as (conn, notes):
            self._lock(conn, ticket_id)
            return self.cancel_ticket(conn, ticket_id, reason=reason, actor=agent)

    # -- sweeps (any pod; one at a time) -------------------------------------------------------

    @_retrying
    def run_sweeps(self, *, batch: int = 1000) -> dict[str, Any]:
        """Both sweeps under a transaction-scoped advisory lock: when another pod holds it, this one skips.

        Every pod refreshes its queue-depth gauge either way, so no pod reports a stale depth.
        """
        requeued: list[dict[str, Any]] = []
        breached: list[dict[str, Any]] = []
        with self._action() as (conn, notes):
            leader = T.take_sweep_lock(conn)
            if leader:
                requeued = T.sweep_expired_leases(conn, notes, batch)
                for ticket in requeued:
                    self.port.on_ticket_requeued(conn, ticket)
                breached = T.sweep_missed_sla(conn, notes, batch, self.config.sla_seconds)
        for t in requeued:
            self._count(t, "lease_expired")
        for t in breached:
            self._count(t, "sla_breached")
        if self.metrics_hook is not None:
            with self._read() as conn:
                depth = queue_depth(conn)
            seen = {(r["kind"], r["priority"]): r["n"] for r in depth}
            for kind in KINDS:
                for prio in PRIORITIES:
                    self._metric("queue_depth", float(seen.get((kind, prio), 0)), kind=kind, priority=prio)
        return {"leader": leader, "requeued": len(requeued), "breached": len(breached),
                "requeued_ids": [t["id"] for t in requeued], "breached_ids": [t["id"] for t in breached]}

