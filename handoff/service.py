"""The L2 assist and L3 human queue: tickets, claims and leases, SLA, approvals, audit.

Two kinds of callers:

* the router opens tickets and feeds customer messages **inside its own transaction**
  (``open_ticket``, ``active_ticket``, ``add_customer_message``, ``cancel_ticket`` take a
  connection), so a turn and the ticket it created commit together;
* agents act through the API; each action is **one transaction** here: the ticket row is
  locked, the change, its audit event, its NOTIFY and the conversation's state change (through
  the :class:`~handoff.ports.ConversationPort`) commit or roll back together.

Claims are atomic: ``claim_next`` picks the best visible ticket with ``FOR NO KEY UPDATE SKIP
LOCKED`` in one statement, so concurrent claimers never get the same ticket and never wait
on each other. A claim is a lease: without heartbeats it lapses and the sweeper puts the
ticket back in the queue with an event, so no ticket is ever stranded.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import random
import re
import time
from collections.abc import Callable
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import psycopg

from handoff import tickets as T
from handoff.config import HandoffConfig
from handoff.errors import Conflict, Forbidden, Invalid, NotFound, TooLarge, Unavailable
from handoff.events import EventHub
from handoff.models import KINDS, OPEN_STATUSES, PRIORITIES, STATUSES, Agent, level_rank, priority_rank
from handoff.ports import ConversationPort, CustomerUnreachable, DeliveryUnavailable, NullConversationPort

log = logging.getLogger(__name__)

SWEEP_LOCK_KEY = 0x5357_4831  # "SWH1": one sweeper at a time across all pods
_TEAM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_OUTCOME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")

MetricsHook = Callable[[str, dict[str, str], float], None]


def _cursor_encode(values: list[Any]) -> str:
    raw = json.dumps(values, default=str, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _no_constant(name: str):
    raise ValueError(f"{name} is not allowed")


def _cursor_decode(cursor: str, size: int) -> list[Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw, parse_constant=_no_constant)   # NaN / Infinity are not cursor values
    except (ValueError, TypeError):
        raise Invalid("the cursor is malformed; use the next_cursor of a previous page") from None
    if not isinstance(values, list) or len(values) != size:
        raise Invalid("the cursor is malformed; use the next_cursor of a previous page")
    return values


_RETRYABLE = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


def _retrying(fn):
    """Re-run an action that lost a deadlock: it rolled back whole (its port calls and notifications
    included), so running it again is safe."""

    @functools.wraps(fn)
    def run(self, *args, **kwargs):
        for attempt in range(1, 5):
            try:
                return fn(self, *args, **kwargs)
            except _RETRYABLE:
                if attempt == 4:
                    raise
                log.info("handoff %s lost a deadlock; retrying (attempt %d)", fn.__name__, attempt + 1)
                time.sleep(random.uniform(0.005, 0.03) * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

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


class HandoffService:
    def __init__(self, pool, port: ConversationPort | None = None, config: HandoffConfig | None = None,
                 metrics_hook: MetricsHook | None = None):
        self.pool = pool
        self.port = port or NullConversationPort()
        self.config = config or HandoffConfig()
        self.metrics_hook = metrics_hook
        self._publish = T.Publisher(on_failure=self._publish_failed)
        self.hub = EventHub(pool.conninfo)

    def _publish_failed(self, notes: list[str]) -> None:
        """A NOTIFY after a commit failed: try once more on a fresh connection; if that fails too, tell this
        process's screens to resynchronise (other processes' listeners lost the same database and resync
        when they reconnect). Never a silent gap."""
        try:
            with self.pool.connection() as conn:
                if T.publish(conn, notes):
                    return
        except Exception:  # noqa: BLE001 - the database is away: fall through to the resync
            log.warning("handoff notifications could not be republished", exc_info=True)
        self.hub.resync()

    # -- plumbing -----------------------------------------------------------------------------

    def _metric(self, name: str, value: float = 1.0, **labels: str) -> None:
        if self.metrics_hook is None:
            return
        try:
            self.metrics_hook(name, labels, value)
        except Exception:  # noqa: BLE001 - metrics never break the queue
            log.exception("metrics hook failed")

    def _count(self, ticket: dict[str, Any], event: str) -> None:
        self._metric("ticket_event", 1.0, kind=ticket["kind"], event=event)

    def _lease(self) -> float:
        return float(self.config.lease_seconds)

    @staticmethod
    def _check_visible(agent: Agent, ticket: dict[str, Any]) -> None:
        if not agent.may_see(ticket["team"]):
            raise Forbidden(f"ticket {ticket['id']} belongs to team {ticket['team']!r}, which you are not in")

    @staticmethod
    def _check_open(ticket: dict[str, Any]) -> None:
        if ticket["status"] not in OPEN_STATUSES:
            raise Conflict(f"ticket {ticket['id']} is {ticket['status']}", status_now=ticket["status"])

    def _check_holder(self, agent: Agent, ticket: dict[str, Any], *, supervisors_too: bool = False) -> None:
        """The caller holds the claim (or, where allowed, is a supervisor/admin acting on any open ticket)."""
        self._check_visible(agent, ticket)
        self._check_open(ticket)
        if ticket["claimed_by"] == agent.id:
            return
        if supervisors_too and agent.sees_all_teams:
            return
        if ticket["status"] == "queued":
            raise Conflict(f"ticket {ticket['id']} is queued; claim it first", status_now="queued")
        raise Conflict(f"ticket {ticket['id']} is held by another agent", status_now="claimed",
                       claimed_by=ticket["claimed_by"])

    def _update(self, conn: psycopg.Connection, ticket_id: str, **fields: Any) -> dict[str, Any]:
        """Set columns (names are ours, never user input) and return the new row."""
        sets, params = [], []
        for col, value in fields.items():
            if isinstance(value, _Sql):
                sets.append(f"{col} = {value.sql}")
                params.extend(value.params)
            else:
                sets.append(f"{col} = %s")
                params.append(value)
        sets.append("updated_at = now()")
        row = conn.execute(f"UPDATE tickets SET {', '.join(sets)} WHERE id = %s RETURNING *",
                           (*params, T.parse_id(ticket_id))).fetchone()
        return T.ticket_row(row)

    def _lease_expr(self) -> _Sql:
        return _Sql("now() + make_interval(secs => %s)", self._lease())

    def _lock(self, conn: psycopg.Connection, ticket_id) -> dict[str, Any]:
        """Lock the ticket for an agent action, after its conversation.

        The router locks a conversation and then touches its ticket; an action that locked the
        ticket first and then (through the port) the conversation could deadlock with it. The
        port's ``before_ticket_change(conn, conversation_id)`` locks the conversation first, so
        every writer takes the two in the same order.
        """
        row = conn.execute("SELECT conversation_id FROM tickets WHERE id = %s", (T.parse_id(ticket_id),)).fetchone()
        if row is None:
            raise NotFound(f"no ticket {ticket_id}")
        self.port.before_ticket_change(conn, row["conversation_id"])
        return T.lock_ticket(conn, ticket_id)

    @staticmethod
    def _event(conn, notes: list[str], ticket: dict[str, Any], actor: Agent, action: str,
               payload: dict[str, Any] | None = None, *, idempotency_key: str | None = None,
               from_team: str | None = None) -> dict[str, Any]:
        return T.record_event(conn, ticket, actor, action, payload, idempotency_key=idempotency_key, notes=notes,
                              from_team=from_team)

    @contextmanager
    def _read(self):
        """A connection in autocommit for single statements: one round trip instead of BEGIN/query/COMMIT."""
        with self.pool.connection() as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                if not conn.closed:
                    conn.autocommit = False

    @contextmanager
    def _action(self):
        """One agent action: (connection, notes) in a transaction; notifications go out after the commit."""
        notes: list[str] = []
        with self.pool.connection() as conn:
            with conn.transaction():
                yield conn, notes
            self._publish(conn, notes)

    def authenticate(self, token: str | None) -> Agent | None:
        """The agent behind a Bearer token (None: missing, unknown, expired, revoked or agent disabled)."""
        from handoff.agents import authenticate

        with self._read() as conn:
            return authenticate(conn, token)

    # -- the router's side (caller's transaction) -----------------------------------------------

    def open_ticket(self, conn: psycopg.Connection, *, kind: str, conversation_id: str, channel: str,
                    customer_id: str, reason: str, priority: str = "normal", team: str | None = None,
                    context: dict, draft: dict | None = None, amount: float | None = None,
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
            row = conn.execute(
                """
                INSERT INTO tickets (kind, conversation_id, channel, customer_id, reason, priority, team, skills,
                                     context, draft, draft_status, amount, currency, approval_level, sla_due_at)
                VALUES (%(kind)s, %(conversation_id)s, %(channel)s, %(customer_id)s, %(reason)s, %(priority)s,
                        %(team)s, %(skills)s, %(context)s, %(draft)s, %(draft_status)s, %(amount)s, %(currency)s,
                        %(approval_level)s, now() + make_interval(secs => %(sla)s))
                ON CONFLICT (conversation_id) WHERE status IN ('queued', 'claimed') DO NOTHING
                RETURNING *
                """,
                params,
            ).fetchone()
            if row is not None:
                ticket = T.ticket_row(row)
                T.record_event(conn, ticket, actor, "opened", {
                    "kind": kind, "reason": reason, "priority": priority, "team": team,
                    "amount": amount, "currency": currency, "approval_level": ticket["approval_level"]},
                    notes=notes)
                self._count(ticket, "opened")
                return {**ticket, "created": True}
            existing = conn.execute(
                "SELECT * FROM tickets WHERE conversation_id = %s AND status IN ('queued', 'claimed') "
                "FOR NO KEY UPDATE",
                (conversation_id,),
            ).fetchone()
            if existing is not None:
                return {**self._join(conn, T.ticket_row(existing), params, actor, notes), "created": False}
        raise Conflict(f"could not open a ticket for conversation {conversation_id}: it keeps changing")

    def _join(self, conn, ticket: dict[str, Any], params: dict[str, Any], actor: str,
              notes: list[str] | None = None) -> dict[str, Any]:
        changes: dict[str, Any] = {"context": params["context"]}
        payload: dict[str, Any] = {"reason": params["reason"], "kind": params["kind"],
                                   "priority": params["priority"]}
        if priority_rank(params["priority"]) < priority_rank(ticket["priority"]):
            changes["priority"] = params["priority"]
            changes["sla_due_at"] = _Sql("least(sla_due_at, now() + make_interval(secs => %s))", params["sla"])
            payload["priority_from"] = ticket["priority"]
        if params["kind"] == "handoff" and ticket["kind"] == "assist":
            changes["kind"] = "handoff"
            payload["kind_from"] = "assist"
        if params["draft"] is not None and ticket["draft"] is None:
            changes.update(draft=params["draft"], draft_status="pending")
        if params["amount"] is not None and (ticket["amount"] is None or params["amount"] > ticket["amount"]):
            changes.update(amount=params["amount"], currency=params["currency"],
                           approval_level=params["approval_level"])
        updated = self._update(conn, ticket["id"], **changes)
        T.record_event(conn, updated, actor, "escalated", payload, notes=notes)
        self._count(updated, "escalated")
        return updated

    def active_ticket(self, conn: psycopg.Connection, conversation_id: str) -> dict[str, Any] | None:
        """The conversation's open (queued or claimed) ticket, if any."""
        row = conn.execute(
            "SELECT * FROM tickets WHERE conversation_id = %s AND status IN ('queued', 'claimed')",
            (str(conversation_id),),
        ).fetchone()
        return T.ticket_row(row)

    def add_customer_message(self, conn: psycopg.Connection, ticket_id, text: str,
                             notes: list[str] | None = None, message_id: int | None = None) -> None:
        """The customer wrote while a human holds the conversation: an event on the ticket (and a live NOTIFY,
        or its note in ``notes`` for :meth:`publish` after the commit). With ``message_id`` its masked values
        carry references for a recorded reveal (handoff.reveal)."""
        from handoff.reveal import refs

        ticket = T.fetch_ticket(conn, ticket_id)
        payload = {"text": text} if message_id is None else {
            "text": text, "message_id": message_id, "personal": refs(text, message_id)}
        T.record_event(conn, ticket, "customer", "customer_message", payload, notes=notes)

    def publish(self, conn: psycopg.Connection, notes: list[str]) -> None:
        """Announce the notes collected by the calls above once the caller's transaction has committed."""
        self._publish(conn, notes)

    def cancel_ticket(self, conn: psycopg.Connection, ticket_id, *, reason: str,
                      actor: Agent | str = "bot") -> dict[str, Any]:
        """Cancel an open ticket (the customer left, the router withdrew it), in the caller's transaction."""
        ticket = T.lock_ticket(conn, ticket_id)
        self._check_open(ticket)
        updated = self._update(conn, ticket["id"], status="cancelled", claimed_by=None, lease_expires_at=None,
                               outcome="cancelled", closed_at=_Sql("now()"),
                               resolved_by=actor.id if isinstance(actor, Agent) else None)
        T.record_event(conn, updated, actor, "cancelled", {"reason": reason})
        self.port.on_ticket_cancelled(conn, updated)
        self._count(updated, "cancelled")
        return updated

    # -- reading ----------------------------------------------------------------------------

    def _team_scope(self, agent: Agent, teams: list[str] | None) -> list[str] | None:
        """The teams a query may cover: the requested ones (each must be visible), or all visible."""
        if teams:
            hidden = [t for t in teams if not agent.may_see(t)]
            if hidden:
                raise Forbidden(f"you are not in team(s) {', '.join(hidden)}")
            return list(teams)
        return None if agent.sees_all_teams else list(agent.teams)

    def list_tickets(self, agent: Agent, *, status: list[str] | None = None, kind: list[str] | None = None,
                     team: list[str] | None = None, priority: list[str] | None = None, limit: int | None = None,
                     cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """Tickets in queue order (priority, SLA due, age), a page at a time; (rows, next cursor or None)."""
        for name, values, allowed in (("status", status, STATUSES), ("kind", kind, KINDS),
                                      ("priority", priority, PRIORITIES)):
            bad = [v for v in values or () if v not in allowed]
            if bad:
                raise Invalid(f"unknown {name} {', '.join(bad)}; one of {', '.join(allowed)}")
        limit = min(max(1, limit or self.config.page_size), 500)
        where = ["status = ANY(%(status)s)"]
        params: dict[str, Any] = {"status": list(status or OPEN_STATUSES), "limit": limit + 1}
        teams = self._team_scope(agent, team)
        if teams is not None:
            where.append("team = ANY(%(teams)s)")
            params["teams"] = teams
        if kind:
            where.append("kind = ANY(%(kind)s)")
            params["kind"] = list(kind)
        if priority:
            where.append("priority = ANY(%(priority)s)")
            params["priority"] = list(priority)
        if cursor:
            rank, due, created, tid = _cursor_decode(cursor, 4)
            where.append("(priority_rank, sla_due_at, created_at, id) > "
                         "(%(c_rank)s, %(c_due)s::timestamptz, %(c_created)s::timestamptz, %(c_id)s::uuid)")
            try:
                params.update(c_rank=int(rank), c_due=datetime.fromisoformat(due),
                              c_created=datetime.fromisoformat(created), c_id=T.parse_id(tid))
            except (ValueError, TypeError, OverflowError, NotFound):
                raise Invalid("the cursor is malformed; use the next_cursor of a previous page") from None
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT * FROM tickets WHERE {' AND '.join(where)} "
                "ORDER BY priority_rank, sla_due_at, created_at, id LIMIT %(limit)s",
                params,
            ).fetchall()
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            last = rows[-1]
            next_cursor = _cursor_encode([last["priority_rank"], last["sla_due_at"].isoformat(),
                                          last["created_at"].isoformat(), str(last["id"])])
        return [T.ticket_row(r) for r in rows], next_cursor

    def get_ticket(self, agent: Agent, ticket_id) -> dict[str, Any]:
        with self._read() as conn:
            ticket = T.fetch_ticket(conn, ticket_id)
        self._check_visible(agent, ticket)
        return ticket

    def ticket_events(self, agent: Agent, ticket_id, *, after: int | None = None,
                      limit: int = 100) -> tuple[list[dict[str, Any]], int | None]:
        """The audit trail of a ticket, oldest first; (events, id to pass as ``after`` for more, or None)."""
        limit = min(max(1, limit), 500)
        with self._read() as conn:
            ticket = T.fetch_ticket(conn, ticket_id)
            self._check_visible(agent, ticket)
            rows = conn.execute(
                """
                SELECT e.id, e.actor, a.name AS agent, e.action, e.payload, e.at FROM ticket_events e
                LEFT JOIN handoff_agents a ON a.id = e.actor_agent_id
                WHERE e.ticket_id = %s AND e.id > %s ORDER BY e.id LIMIT %s
                """,
                (T.parse_id(ticket_id), after or 0, limit + 1),
            ).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, (rows[-1]["id"] if more else None)

    def events_since(self, agent: Agent, after: int, *, limit: int = 1000) -> list[dict[str, Any]]:
        """Queue events after an event id, as live notifications carry them (replay for a reconnecting screen)."""
        teams = self._team_scope(agent, None)
        with self._read() as conn:
            return conn.execute(
                f"""
                SELECT e.id, e.ticket_id::text AS ticket_id, e.action, e.actor, e.at, t.kind, t.team, t.priority,
                       t.status, t.claimed_by::text AS claimed_by, true AS replayed
                FROM ticket_events e JOIN tickets t ON t.id = e.ticket_id
                WHERE e.id > %(after)s {"AND t.team = ANY(%(teams)s)" if teams is not None else ""}
                ORDER BY e.id LIMIT %(limit)s
                """,
                {"after": after, "teams": teams, "limit": limit},
            ).fetchall()

    def stats(self, agent: Agent) -> dict[str, Any]:
        """Queue depth by kind/team/priority, the oldest wait, SLA breaches (over the teams the caller sees)."""
        teams = self._team_scope(agent, None)
        scope = "AND team = ANY(%(teams)s)" if teams is not None else ""
        t_scope = "AND t.team = ANY(%(teams)s)" if teams is not None else ""
        with self._read() as conn:
            rows = conn.execute(
                f"""
                SELECT kind, team, priority,
                       count(*) FILTER (WHERE status = 'queued') AS queued,
                       count(*) FILTER (WHERE status = 'claimed') AS claimed,
                       count(*) FILTER (WHERE status = 'queued' AND sla_due_at < now()) AS overdue,
                       count(*) FILTER (WHERE sla_breaches > 0) AS breached,
                       min(created_at) FILTER (WHERE status = 'queued') AS oldest
                FROM tickets WHERE status IN ('queued', 'claimed') {scope}
                GROUP BY kind, team, priority ORDER BY kind, team, min(priority_rank)
                """,
                {"teams": teams},
            ).fetchall()
            recent = conn.execute(
                f"""
                SELECT count(*) AS n FROM ticket_events e JOIN tickets t ON t.id = e.ticket_id
                WHERE e.action = 'sla_breached' AND e.at > now() - interval '24 hours' {t_scope}
                """,
                {"teams": teams},
            ).fetchone()
            now = conn.execute("SELECT now() AS now").fetchone()["now"]
            handling = conn.execute(
                f"""
                SELECT team, count(*) AS closed_24h,
                       avg(extract(epoch FROM closed_at - first_claimed_at))::float8 AS handle_seconds_avg,
                       (percentile_cont(0.5) WITHIN GROUP (
                           ORDER BY extract(epoch FROM closed_at - first_claimed_at)))::float8 AS handle_seconds_p50,
                       avg(extract(epoch FROM first_claimed_at - created_at))::float8 AS wait_seconds_avg
                FROM tickets
                WHERE closed_at > now() - interval '24 hours' AND status IN ('resolved', 'returned_to_bot') {scope}
                GROUP BY team ORDER BY team
                """,
                {"teams": teams},
            ).fetchall()
        depth = [{k: r[k] for k in ("kind", "team", "priority", "queued", "claimed", "overdue")} for r in rows]
        by: dict[str, dict[str, int]] = {"kind": {}, "team": {}, "priority": {}}
        for r in (r for r in rows if r["queued"]):
            for key in by:
                by[key][r[key]] = by[key].get(r[key], 0) + r["queued"]
        oldest = min((r["oldest"] for r in rows if r["oldest"] is not None), default=None)
        return {
            "queued": sum(r["queued"] for r in rows),
            "claimed": sum(r["claimed"] for r in rows),
            "depth": depth,
            "queued_by_kind": by["kind"], "queued_by_team": by["team"], "queued_by_priority": by["priority"],
            "oldest_wait_seconds": (now - oldest).total_seconds() if oldest else None,
            "overdue": sum(r["overdue"] for r in rows),
            "breached_open": sum(r["breached"] for r in rows),
            "sla_breaches_24h": recent["n"],
            "handling": handling,
            "teams": teams,
            "at": now,
        }

    # -- claiming -----------------------------------------------------------------------------

    _CLAIM_NEXT = """
    WITH next AS (
        SELECT id FROM tickets
        WHERE status = 'queued' {filters}
        ORDER BY priority_rank, sla_due_at, created_at, id
        LIMIT 1
        FOR NO KEY UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE tickets t SET status = 'claimed', claimed_by = %(agent_id)s, claimed_at = now(),
                             lease_expires_at = now() + make_interval(secs => %(lease)s),
                             first_claimed_at = coalesce(t.first_claimed_at, now()), updated_at = now()
        FROM next WHERE t.id = next.id
        RETURNING t.*
    ), ev AS (
        INSERT INTO ticket_events (ticket_id, actor, actor_agent_id, action, payload)
        SELECT id, %(actor)s, %(agent_id)s, 'claimed', json_build_object('via', 'claim_next') FROM claimed
        RETURNING id, at
    ){port}
    SELECT c.*, json_build_object(
        'id', ev.id, 'ticket_id', c.id, 'action', 'claimed', 'actor', %(actor)s::text, 'at', ev.at,
        'kind', c.kind, 'team', c.team, 'priority', c.priority, 'status', c.status,
        'claimed_by', c.claimed_by)::text AS _note
    FROM claimed c, ev
    """

    @_retrying
    def claim_next(self, agent: Agent, *, kind: str | None = None, team: str | None = None) -> dict[str, Any] | None:
        """Atomically take the best ticket the agent may work on (None when there is none)."""
        if kind is not None and kind not in KINDS:
            raise Invalid(f"unknown ticket kind {kind!r}; one of {', '.join(KINDS)}")
        teams = self._team_scope(agent, [team] if team else None)
        filters, params = [], {"agent_id": agent.id, "actor": agent.actor, "lease": self._lease()}
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
        sql = self._CLAIM_NEXT.format(filters=" ".join(filters), port=port_sql or "")
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
    def claim(self, agent: Agent, ticket_id) -> dict[str, Any]:
        """Take a given ticket. Claiming one you already hold renews the lease (a retry is harmless)."""
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            self._check_visible(agent, ticket)
            if not agent.has_skills(ticket["skills"]):
                raise Forbidden(f"ticket {ticket['id']} needs skills {', '.join(ticket['skills'])}")
            if ticket["status"] == "claimed" and ticket["claimed_by"] == agent.id:
                return self._update(conn, ticket["id"], lease_expires_at=self._lease_expr())
            self._check_open(ticket)
            if ticket["status"] == "claimed":
                raise Conflict(f"ticket {ticket['id']} is held by another agent", status_now="claimed",
                               claimed_by=ticket["claimed_by"])
            updated = self._update(conn, ticket["id"], status="claimed", claimed_by=agent.id,
                                   claimed_at=_Sql("now()"), lease_expires_at=self._lease_expr(),
                                   first_claimed_at=_Sql("coalesce(first_claimed_at, now())"))
            self._event(conn, notes, updated, agent, "claimed", {"via": "claim"})
            self.port.on_ticket_claimed(conn, updated)
        self._count(updated, "claimed")
        return updated

    def heartbeat(self, agent: Agent, ticket_id) -> dict[str, Any]:
        """Extend the caller's lease. 409 when the lease was lost (expired and requeued, or transferred)."""
        tid = T.parse_id(ticket_id)
        with self._read() as conn:
            row = conn.execute(
                """
                UPDATE tickets SET lease_expires_at = now() + make_interval(secs => %s)
                WHERE id = %s AND status = 'claimed' AND claimed_by = %s
                RETURNING id, status, claimed_by, lease_expires_at
                """,
                (self._lease(), tid, agent.id),
            ).fetchone()
            if row is None:
                ticket = T.fetch_ticket(conn, tid)
                self._check_visible(agent, ticket)
                raise Conflict(f"you no longer hold ticket {ticket['id']} (it is {ticket['status']})",
                               status_now=ticket["status"])
        return {"ticket_id": str(row["id"]), "status": row["status"], "lease_expires_at": row["lease_expires_at"]}

    def _requeue(self, conn, notes: list[str], agent: Agent, ticket: dict[str, Any], action: str,
                 payload: dict[str, Any], **changes: Any) -> dict[str, Any]:
        was_claimed = ticket["status"] == "claimed"
        updated = self._update(conn, ticket["id"], status="queued", claimed_by=None, claimed_at=None,
                               lease_expires_at=None, requeues=_Sql("requeues + 1"), **changes)
        moved = ticket["team"] if ticket["team"] != updated["team"] else None
        self._event(conn, notes, updated, agent, action, payload, from_team=moved)
        if was_claimed:
            self.port.on_ticket_requeued(conn, updated)
        return updated

    @_retrying
    def release(self, agent: Agent, ticket_id, *, reason: str | None = None) -> dict[str, Any]:
        """Give a claimed ticket back to the queue."""
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            self._check_holder(agent, ticket, supervisors_too=True)
            if ticket["status"] != "claimed":
                raise Conflict(f"ticket {ticket['id']} is not claimed", status_now=ticket["status"])
            updated = self._requeue(conn, notes, agent, ticket, "released",
                                    {"reason": reason, "previous_agent": ticket["claimed_by"]})
        self._count(updated, "released")
        return updated

    @_retrying
    def transfer(self, agent: Agent, ticket_id, *, team: str | None = None, to_agent: str | None = None,
                 note: str | None = None) -> dict[str, Any]:
        """Move a ticket to another team (back in the queue there) and/or straight to another agent (claimed)."""
        if team is None and to_agent is None:
            raise Invalid("name a team, an agent, or both")
        if team is not None and not _TEAM.match(team):
            raise Invalid(f"invalid team {team!r}")
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            self._check_holder(agent, ticket, supervisors_too=True)
            new_team = team or ticket["team"]
            payload = {"from_team": ticket["team"], "to_team": new_team, "from_agent": ticket["claimed_by"],
                       "note": note}
            if to_agent is None:
                updated = self._requeue(conn, notes, agent, ticket, "transferred", payload, team=new_team)
            else:
                target_row = conn.execute(
                    "SELECT * FROM handoff_agents WHERE name = %s OR id::text = %s",
                    (to_agent.lower(), to_agent),
                ).fetchone()
                if target_row is None or not target_row["active"]:
                    raise Invalid(f"no active agent {to_agent!r}")
                target = Agent.from_row(target_row)
                if not target.may_see(new_team):
                    raise Invalid(f"agent {target.name!r} is not in team {new_team!r}")
                if not target.has_skills(ticket["skills"]):
                    raise Invalid(f"agent {target.name!r} lacks skills {', '.join(ticket['skills'])}")
                payload["to_agent"] = target.id
                updated = self._update(conn, ticket["id"], team=new_team, status="claimed", claimed_by=target.id,
                                       claimed_at=_Sql("now()"), lease_expires_at=self._lease_expr(),
                                       first_claimed_at=_Sql("coalesce(first_claimed_at, now())"))
                self._event(conn, notes, updated, agent, "transferred", payload,
                            from_team=ticket["team"] if ticket["team"] != new_team else None)
                if ticket["status"] == "queued":
                    self.port.on_ticket_claimed(conn, updated)
        self._count(updated, "transferred")
        return updated

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

    def _replay(self, conn, agent: Agent, ticket: dict[str, Any], key: str | None) -> dict[str, Any] | None:
        """The stored result of an action already done with this Idempotency-Key (under the ticket lock)."""
        if key is None:
            return None
        prior = conn.execute(
            "SELECT id, actor, action, payload FROM ticket_events WHERE ticket_id = %s AND idempotency_key = %s",
            (T.parse_id(ticket["id"]), key),
        ).fetchone()
        if prior is None:
            return None
        if prior["actor"] != agent.actor:
            raise Conflict("this Idempotency-Key was used by another agent on this ticket")
        return {"ticket": ticket, "event_id": prior["id"], "action": prior["action"],
                "delivery": prior["payload"].get("delivery"), "replayed": True}

    def _send(self, conn, agent: Agent, ticket: dict[str, Any], text: str) -> dict[str, Any]:
        try:
            delivery = self.port.send_to_customer(conn, ticket, text=text, sender="agent", agent_id=agent.id)
        except CustomerUnreachable as exc:
            raise Conflict(f"the message cannot be delivered: {exc}") from None
        except DeliveryUnavailable as exc:
            raise Unavailable(f"the message cannot be delivered: {exc}") from None
        return {k: (str(v) if v is not None and not isinstance(v, int | float | str) else v)
                for k, v in (delivery or {}).items()}

    @_retrying
    def post_message(self, agent: Agent, ticket_id, text: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Send an agent message to the customer: stored in the transcript and queued for delivery."""
        text = self._check_text(text)
        key = self._check_key(idempotency_key)
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            self._check_visible(agent, ticket)
            replay = self._replay(conn, agent, ticket, key)
            if replay:
                return replay
            self._check_holder(agent, ticket)
            delivery = self._send(conn, agent, ticket, text)
            ev = self._event(conn, notes, ticket, agent, "agent_message",
                             {"delivery": delivery, "chars": len(text)}, idempotency_key=key)
        self._count(ticket, "agent_message")
        return {"ticket": ticket, "event_id": ev["id"], "action": "agent_message", "delivery": delivery,
                "replayed": False}

    @_retrying
    def _decide_draft(self, agent: Agent, ticket_id, *, text: str | None, key: str | None) -> dict[str, Any]:
        action = "approved" if text is None else "edited"
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            self._check_visible(agent, ticket)
            replay = self._replay(conn, agent, ticket, key)
            if replay:
                return replay
            self._check_holder(agent, ticket)
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
            changes: dict[str, Any] = {"draft_status": action, "approved_by": agent.id, "approved_at": _Sql("now()"),
                                       "draft": json.dumps(draft, ensure_ascii=False, default=str)}
            if ticket["kind"] in ("assist", "approval"):
                changes.update(status="resolved", outcome=action, claimed_by=None, lease_expires_at=None,
                               resolved_by=agent.id, closed_at=_Sql("now()"))
            updated = self._update(conn, ticket["id"], **changes)
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

    def _apply_approval(self, conn, ticket: dict[str, Any], agent: Agent, *, approved: bool,
                        reason: str | None = None) -> dict[str, Any] | None:
        try:
            return self.port.on_approval_decided(conn, ticket, approved=approved, approver=agent.id, reason=reason)
        except DeliveryUnavailable as exc:
            raise Unavailable(f"the approval cannot be applied: {exc}") from None

    def approve(self, agent: Agent, ticket_id, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Approve the L2 draft as it is: it is sent, the approver recorded; an assist ticket is then resolved."""
        return self._decide_draft(agent, ticket_id, text=None, key=self._check_key(idempotency_key))

    def edit_and_send(self, agent: Agent, ticket_id, text: str, *,
                      idempotency_key: str | None = None) -> dict[str, Any]:
        """Approve the L2 draft with the agent's wording (both versions are kept for review)."""
        return self._decide_draft(agent, ticket_id, text=self._check_text(text),
                                  key=self._check_key(idempotency_key))

    @_retrying
    def reject(self, agent: Agent, ticket_id, *, reason: str) -> dict[str, Any]:
        """Reject the draft with a reason; the agent keeps the ticket to answer, hand back or transfer."""
        reason = (reason or "").strip()
        if not reason:
            raise Invalid("a rejection needs a reason")
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            self._check_holder(agent, ticket)
            if ticket["draft"] is None or ticket["draft_status"] != "pending":
                raise Conflict(f"ticket {ticket['id']} has no pending draft")
            if ticket["kind"] == "approval":   # a rejected approval ends the wait: the workflow is told
                if not agent.may_approve(ticket["approval_level"]):
                    raise Forbidden(f"deciding this approval needs approval level {ticket['approval_level']!r}; "
                                    f"yours is {agent.approval_level!r}", required_level=ticket["approval_level"],
                                    your_level=agent.approval_level)
                decided = self._apply_approval(conn, ticket, agent, approved=False, reason=reason)
                updated = self._update(conn, ticket["id"], draft_status="rejected", status="resolved",
                                       outcome="rejected", claimed_by=None, lease_expires_at=None,
                                       resolved_by=agent.id, closed_at=_Sql("now()"))
                self._event(conn, notes, updated, agent, "rejected", {"reason": reason, "workflow": decided})
                self.port.on_ticket_resolved(conn, updated)
                self._count(updated, "rejected")
                return updated
            updated = self._update(conn, ticket["id"], draft_status="rejected")
            self._event(conn, notes, updated, agent, "rejected", {"reason": reason})
        self._count(updated, "rejected")
        return updated

    # -- closing --------------------------------------------------------------------------------

    @_retrying
    def resolve(self, agent: Agent, ticket_id, *, outcome: str, note: str | None = None) -> dict[str, Any]:
        """Close the ticket with an outcome; the conversation moves on to feedback and does not bounce back."""
        if not _OUTCOME.match(outcome or ""):
            raise Invalid("outcome must be a lower-case word such as 'solved', 'refunded' or 'duplicate'")
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            self._check_holder(agent, ticket, supervisors_too=True)
            updated = self._update(conn, ticket["id"], status="resolved", outcome=outcome, claimed_by=None,
                                   lease_expires_at=None, resolved_by=agent.id, closed_at=_Sql("now()"))
            self._event(conn, notes, updated, agent, "resolved",
                        {"outcome": outcome, "note": note, "held_by": ticket["claimed_by"]})
            self.port.on_ticket_resolved(conn, updated)
        self._count(updated, "resolved")
        return updated

    @_retrying
    def return_to_bot(self, agent: Agent, ticket_id, *, note: str | None = None) -> dict[str, Any]:
        """Hand the conversation back: the bot is in charge again."""
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            self._check_holder(agent, ticket, supervisors_too=True)
            updated = self._update(conn, ticket["id"], status="returned_to_bot", outcome="returned_to_bot",
                                   claimed_by=None, lease_expires_at=None, resolved_by=agent.id,
                                   closed_at=_Sql("now()"))
            self._event(conn, notes, updated, agent, "returned_to_bot",
                        {"note": note, "held_by": ticket["claimed_by"]})
            self.port.on_returned_to_bot(conn, updated)
        self._count(updated, "returned_to_bot")
        return updated

    @_retrying
    def cancel(self, agent: Agent, ticket_id, *, reason: str) -> dict[str, Any]:
        """Cancel from the API (supervisors and admins)."""
        if not agent.sees_all_teams:
            raise Forbidden("only supervisors and admins cancel tickets")
        with self._action() as (conn, notes):
            self._lock(conn, ticket_id)
            return self.cancel_ticket(conn, ticket_id, reason=reason, actor=agent)

    # -- sweeps (any pod; one at a time) -------------------------------------------------------

    _SWEEP_LEASES = """
    WITH expired AS (
        SELECT id, claimed_by AS previous_agent, lease_expires_at AS lapsed_at FROM tickets
        WHERE status = 'claimed' AND lease_expires_at < now()
        ORDER BY lease_expires_at LIMIT %(batch)s
        FOR NO KEY UPDATE SKIP LOCKED
    ), upd AS (
        UPDATE tickets t SET status = 'queued', claimed_by = NULL, claimed_at = NULL, lease_expires_at = NULL,
                             requeues = t.requeues + 1, updated_at = now()
        FROM expired WHERE t.id = expired.id
        RETURNING t.*, expired.previous_agent, expired.lapsed_at
    ), ev AS (
        INSERT INTO ticket_events (ticket_id, actor, action, payload)
        SELECT id, 'system:lease-sweeper', 'lease_expired',
               json_build_object('previous_agent', previous_agent, 'lapsed_at', lapsed_at) FROM upd
        RETURNING id, ticket_id, at
    )
    SELECT upd.*, json_build_object(
        'id', ev.id, 'ticket_id', upd.id, 'action', 'lease_expired', 'actor', 'system:lease-sweeper', 'at', ev.at,
        'kind', upd.kind, 'team', upd.team, 'priority', upd.priority, 'status', upd.status,
        'claimed_by', NULL)::text AS _note
    FROM upd JOIN ev ON ev.ticket_id = upd.id
    """

    _SWEEP_SLA = """
    WITH due AS (
        SELECT id, priority AS previous_priority, sla_due_at AS missed_due FROM tickets
        WHERE status = 'queued' AND sla_due_at < now()
        ORDER BY sla_due_at LIMIT %(batch)s
        FOR NO KEY UPDATE SKIP LOCKED
    ), upd AS (
        UPDATE tickets t SET
            priority = CASE t.priority WHEN 'low' THEN 'normal' WHEN 'normal' THEN 'high' ELSE 'urgent' END,
            sla_due_at = now() + make_interval(secs => CASE t.priority
                WHEN 'low' THEN %(sla_normal)s WHEN 'normal' THEN %(sla_high)s ELSE %(sla_urgent)s END),
            sla_breaches = t.sla_breaches + 1,
            sla_breached_at = coalesce(t.sla_breached_at, now()),
            updated_at = now()
        FROM due WHERE t.id = due.id
        RETURNING t.*, due.previous_priority, due.missed_due
    ), ev AS (
        INSERT INTO ticket_events (ticket_id, actor, action, payload)
        SELECT id, 'system:sla-sweeper', 'sla_breached',
               json_build_object('previous_priority', previous_priority, 'priority', priority,
                                 'missed_due', missed_due, 'breaches', sla_breaches) FROM upd
        RETURNING id, ticket_id, at
    )
    SELECT upd.*, json_build_object(
        'id', ev.id, 'ticket_id', upd.id, 'action', 'sla_breached', 'actor', 'system:sla-sweeper', 'at', ev.at,
        'kind', upd.kind, 'team', upd.team, 'priority', upd.priority, 'status', upd.status,
        'claimed_by', NULL)::text AS _note
    FROM upd JOIN ev ON ev.ticket_id = upd.id
    """

    def _sweep_leases(self, conn: psycopg.Connection, notes: list[str], batch: int) -> list[dict[str, Any]]:
        """Expired leases go back to the queue, each with a ``lease_expired`` event."""
        rows = conn.execute(self._SWEEP_LEASES, {"batch": batch}).fetchall()
        notes.extend(r["_note"] for r in rows)
        tickets = [T.ticket_row({k: v for k, v in r.items() if k not in ("previous_agent", "lapsed_at")})
                   for r in rows]
        for ticket in tickets:
            self.port.on_ticket_requeued(conn, ticket)
        return tickets

    def _sweep_sla(self, conn: psycopg.Connection, notes: list[str], batch: int) -> list[dict[str, Any]]:
        """Queued tickets past their SLA: priority up one step, a new deadline at that priority, breach counted."""
        sla = self.config.sla_seconds
        rows = conn.execute(self._SWEEP_SLA, {
            "batch": batch, "sla_normal": float(sla["normal"]), "sla_high": float(sla["high"]),
            "sla_urgent": float(sla["urgent"]),
        }).fetchall()
        notes.extend(r["_note"] for r in rows)
        return [T.ticket_row({k: v for k, v in r.items() if k not in ("previous_priority", "missed_due")})
                for r in rows]

    @_retrying
    def run_sweeps(self, *, batch: int = 1000) -> dict[str, Any]:
        """Both sweeps under a transaction-scoped advisory lock: when another pod holds it, this one skips.

        Every pod refreshes its queue-depth gauge either way, so no pod reports a stale depth.
        """
        requeued: list[dict[str, Any]] = []
        breached: list[dict[str, Any]] = []
        with self._action() as (conn, notes):
            leader = conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS got",
                                  (SWEEP_LOCK_KEY,)).fetchone()["got"]
            if leader:
                requeued = self._sweep_leases(conn, notes, batch)
                breached = self._sweep_sla(conn, notes, batch)
        for t in requeued:
            self._count(t, "lease_expired")
        for t in breached:
            self._count(t, "sla_breached")
        if self.metrics_hook is not None:
            with self._read() as conn:
                depth = conn.execute("SELECT kind, priority, count(*) AS n FROM tickets WHERE status = 'queued' "
                                     "GROUP BY kind, priority").fetchall()
            seen = {(r["kind"], r["priority"]): r["n"] for r in depth}
            for kind in KINDS:
                for prio in PRIORITIES:
                    self._metric("queue_depth", float(seen.get((kind, prio), 0)), kind=kind, priority=prio)
        return {"leader": leader, "requeued": len(requeued), "breached": len(breached),
                "requeued_ids": [t["id"] for t in requeued], "breached_ids": [t["id"] for t in breached]}


class _Sql:
    """A SQL expression for :meth:`HandoffService._update` (our own fragments, never user input)."""

    __slots__ = ("sql", "params")

    def __init__(self, sql: str, *params: Any):
        self.sql = sql
        self.params = params
