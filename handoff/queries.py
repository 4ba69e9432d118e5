"""Reading handoff's tables: the agents' lists, stats and audit trails, and the gateway's operations views.

The queries side of the queue: nothing here changes a ticket. :class:`TicketQueries` answers the agent API
(scoped to the teams the caller sees); the module-level functions are the read functions the router's
operations code (metrics, trace, report) calls, so the ticket schema can change without touching the router.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, NoReturn

import psycopg
from psycopg.rows import DictRow, dict_row

from handoff import tickets as T
from handoff.access import check_visible, team_scope
from handoff.config import HandoffConfig
from handoff.errors import Invalid, NotFound
from handoff.models import KINDS, OPEN_STATUSES, PRIORITIES, STATUSES, Agent, one


def _cursor_encode(values: list[Any]) -> str:
    raw = json.dumps(values, default=str, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _no_constant(name: str) -> NoReturn:
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


VIEWS = ("all", "mine", "unassigned")
# CJK script (as tickets.customer_language reads it) as a Postgres regular-expression class
_CJK_CLASS = "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]"
_CUSTOMER_LINES = ("jsonb_path_query_array(t.context, "
                   "'strict $.transcript[*] ? (@.sender == \"customer\" && @.text != \"\").text')")
# the customer's language as tickets.customer_language computes it, in SQL, for the language filter
_LANGUAGE_SQL = (f"coalesce(nullif(t.context->>'language', ''), nullif(t.context->'customer'->>'language', ''), "
                 f"CASE WHEN jsonb_array_length({_CUSTOMER_LINES}) = 0 THEN NULL "
                 f"WHEN ({_CUSTOMER_LINES})->> -1 ~ %(cjk)s THEN 'zh' ELSE 'en' END)")
# what the customer wrote last: a message while the ticket waits (its event), else the package's transcript
_LAST_MESSAGE_SQL = (f"coalesce((SELECT e.payload->>'text' FROM ticket_events e WHERE e.ticket_id = t.id "
                     f"AND e.action = 'customer_message' ORDER BY e.id DESC LIMIT 1), ({_CUSTOMER_LINES})->> -1)")
_NAME_SQL = ("coalesce(nullif(btrim(t.context->'memory'->'profile'->>'name'), ''), "
             "nullif(btrim(t.context->'customer'->>'name'), ''))")
_LIST_COLUMNS: list[str] = []


def _list_columns(conn: psycopg.Connection[DictRow]) -> list[str]:
    """The tickets table's columns but the context package and the draft (read once per process)."""
    if not _LIST_COLUMNS:
        _LIST_COLUMNS.extend(r["column_name"] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'tickets' "
            "AND table_schema = current_schema() AND column_name NOT IN ('context', 'draft') ORDER BY ordinal_position"))
    return _LIST_COLUMNS


_SEARCH_SQL = ("concat_ws(' ', t.id::text, t.customer_id, t.reason, t.team, "
               "t.context->'memory'->'profile'->>'name', t.context->'customer'->>'name', "
               "jsonb_path_query_array(t.context, 'strict $.transcript[*].text')::text)")


def queue_depth(conn: psycopg.Connection[DictRow]) -> list[dict[str, Any]]:
    """Queued tickets by kind and priority: rows ``{kind, priority, n}``."""
    return conn.execute(
        "SELECT kind, priority, count(*) AS n FROM tickets WHERE status = 'queued' GROUP BY kind, priority"
    ).fetchall()


def conversation_ticket_events(conn: psycopg.Connection[DictRow], conversation_id: Any) -> list[dict[str, Any]]:
    """The audit trail of every ticket of a conversation, oldest first (with each ticket's kind)."""
    return conn.execute(
        """
        SELECT e.id, e.ticket_id, t.kind, e.action, e.actor, e.payload, e.at
        FROM ticket_events e JOIN tickets t ON t.id = e.ticket_id
        WHERE t.conversation_id = %s ORDER BY e.at, e.id
        """,
        (str(conversation_id),),
    ).fetchall()



_HANDLING_SQL = """
WITH r AS (
    SELECT ticket_id, min(at) AS resolved_at FROM ticket_events
    WHERE action = 'resolved' AND at >= %(since)s AND at < %(until)s GROUP BY ticket_id
), x AS (
    SELECT t.kind, r.resolved_at, t.created_at,
           (SELECT min(e.at) FROM ticket_events e WHERE e.ticket_id = t.id AND e.action = 'claimed') AS first_claim
    FROM r JOIN tickets t ON t.id = r.ticket_id
)
SELECT COALESCE(kind, 'all') AS kind, count(*) AS tickets,
       avg(EXTRACT(EPOCH FROM resolved_at - first_claim)) AS handling,
       count(first_claim) AS claimed,
       avg(EXTRACT(EPOCH FROM first_claim - created_at)) AS wait,
       avg(EXTRACT(EPOCH FROM resolved_at - created_at)) AS resolution
FROM x GROUP BY ROLLUP (kind)
"""


def handling_times(conn: psycopg.Connection[DictRow], since: datetime, until: datetime) -> dict[str, dict[str, Any]]:
    """Tickets resolved in [since, until) by kind (and ``all``): rows ``{kind, tickets, handling, claimed, wait,
    resolution}``, the durations in seconds (handling = first claim to resolved, wait = opened to first claim)."""
    return {r["kind"]: r for r in conn.execute(_HANDLING_SQL, {"since": since, "until": until})}


def tickets_opened(conn: psycopg.Connection[DictRow], since: datetime, until: datetime) -> dict[str, int]:
    """Tickets opened in [since, until), by kind."""
    return {r["kind"]: r["n"] for r in conn.execute(
        "SELECT kind, count(*) AS n FROM tickets WHERE created_at >= %(since)s AND created_at < %(until)s "
        "GROUP BY kind ORDER BY kind", {"since": since, "until": until})}


def sla_breaches(conn: psycopg.Connection[DictRow], since: datetime, until: datetime) -> int:
    """Tickets whose first SLA breach fell in [since, until)."""
    return int(one(conn.execute(
        "SELECT count(*) AS n FROM tickets WHERE sla_breached_at >= %(since)s AND sla_breached_at < %(until)s",
        {"since": since, "until": until}).fetchone())["n"])

class TicketQueries:
    """The agent API's reads (mixed into :class:`handoff.service.HandoffService`)."""

    config: HandoffConfig
    _read: Callable[[], AbstractContextManager[psycopg.Connection[DictRow]]]   # the service's autocommit connection

    def list_tickets(self, agent: Agent, *, status: Sequence[str] | None = None, kind: Sequence[str] | None = None,
                     team: Sequence[str] | None = None, priority: Sequence[str] | None = None,
                     limit: int | None = None, cursor: str | None = None, view: str = "all", q: str | None = None,
                     language: Sequence[str] | None = None, channel: Sequence[str] | None = None,
                     tag: Sequence[str] | None = None,
                     hold: Sequence[str] | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """Tickets in queue order (priority, SLA due, age), a page at a time; (rows, next cursor or None).

        ``view``: ``mine`` (held by the caller), ``unassigned`` (nobody holds it) or ``all``; ``q`` searches the
        reason, the customer (id and name), the ticket id and what the customer wrote (case-insensitive)."""
        if view not in VIEWS:
            raise Invalid(f"unknown view {view}; one of {', '.join(VIEWS)}")
        for name, values, allowed in (("status", status, STATUSES), ("kind", kind, KINDS),
                                      ("priority", priority, PRIORITIES)):
            bad = [v for v in values or () if v not in allowed]
            if bad:
                raise Invalid(f"unknown {name} {', '.join(bad)}; one of {', '.join(allowed)}")
        limit = min(max(1, limit or self.config.page_size), 500)
        where = ["status = ANY(%(status)s)"]
        params: dict[str, Any] = {"status": list(status or OPEN_STATUSES), "limit": limit + 1}
        teams = team_scope(agent, team)
        if teams is not None:
            where.append("team = ANY(%(teams)s)")
            params["teams"] = teams
        if kind:
            where.append("kind = ANY(%(kind)s)")
            params["kind"] = list(kind)
        if priority:
            where.append("priority = ANY(%(priority)s)")
            params["priority"] = list(priority)
        if channel:
            where.append("channel = ANY(%(channel)s)")
            params["channel"] = list(channel)
        if language:
            where.append(f"{_LANGUAGE_SQL} = ANY(%(language)s)")
            params["language"] = list(language)
        if tag:
            where.append("tags && %(tags)s::text[]")
            params["tags"] = [t.lower() for t in tag]
        if hold:
            where.append("coalesce(hold, 'open') = ANY(%(hold)s)")
            params["hold"] = list(hold)
        if view == "mine":
            where.append("claimed_by = %(me)s")
            params["me"] = agent.id
        elif view == "unassigned":
            where.append("claimed_by IS NULL")
        if q and q.strip():
            where.append(f"{_SEARCH_SQL} ILIKE %(q)s")
            params["q"] = "%" + re.sub(r"([\\%_])", r"\\\1", q.strip()) + "%"
        if cursor:
            rank, due, created, tid = _cursor_decode(cursor, 4)
            where.append("(priority_rank, sla_due_at, created_at, id) > "
                         "(%(c_rank)s, %(c_due)s::timestamptz, %(c_created)s::timestamptz, %(c_id)s::uuid)")
            try:
                params.update(c_rank=int(rank), c_due=datetime.fromisoformat(due),
                              c_created=datetime.fromisoformat(created), c_id=T.parse_id(tid))
            except (ValueError, TypeError, OverflowError, NotFound):
                raise Invalid("the cursor is malformed; use the next_cursor of a previous page") from None
        params["cjk"] = _CJK_CLASS
        with self._read() as conn:
            # a list carries no context package (the bulk of a row): what it shows of it is computed here
            columns = ", ".join(f"t.{c}" for c in _list_columns(conn))
            rows = conn.execute(
                f"SELECT {columns}, {_LANGUAGE_SQL} AS language, {_NAME_SQL} AS customer_name, "
                f"{_LAST_MESSAGE_SQL} AS last_message FROM tickets t WHERE {' AND '.join(where)} "
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

    def get_ticket(self, agent: Agent, ticket_id: Any) -> dict[str, Any]:
        with self._read() as conn:
            ticket = T.fetch_ticket(conn, ticket_id)
        check_visible(agent, ticket)
        return ticket

    def ticket_events(self, agent: Agent, ticket_id: Any, *, after: int | None = None,
                      limit: int = 100) -> tuple[list[dict[str, Any]], int | None]:
        """The audit trail of a ticket, oldest first; (events, id to pass as ``after`` for more, or None)."""
        limit = min(max(1, limit), 500)
        with self._read() as conn:
            ticket = T.fetch_ticket(conn, ticket_id)
            check_visible(agent, ticket)
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
        teams = team_scope(agent, None)
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
        teams = team_scope(agent, None)
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
            recent = one(conn.execute(
                f"""
                SELECT count(*) AS n FROM ticket_events e JOIN tickets t ON t.id = e.ticket_id
                WHERE e.action = 'sla_breached' AND e.at > now() - interval '24 hours' {t_scope}
                """,
                {"teams": teams},
            ).fetchone())
            now = one(conn.execute("SELECT now() AS now").fetchone())["now"]
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
def customer_tickets(conn: psycopg.Connection[DictRow], channel: str, customer_id: str, limit: int = 5) -> list[dict[str, Any]]:
    """A customer's most recent tickets (kind, status, outcome, reason), newest first: the workflows' session
    memory shows them as earlier outcomes."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            """SELECT id::text AS id, kind, status, outcome, reason, created_at FROM tickets
               WHERE channel = %s AND customer_id = %s ORDER BY created_at DESC LIMIT %s""",
            (channel, str(customer_id), int(limit))).fetchall()


def queue_position(conn: psycopg.Connection[DictRow], conversation_id: Any) -> dict[str, Any] | None:
    """Where the conversation's queued ticket stands, for a word to a customer who writes while waiting:
    ``{ticket_id, position, ahead, typical_wait_seconds}``. ``position`` counts the queued tickets of its team
    picked before it (priority, SLA due, age: the order claim-next takes) plus one; ``typical_wait_seconds`` is
    the team's median wait before a claim over the last 24 hours (None without one). None when nothing of the
    conversation is queued."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            """
            WITH me AS (
                SELECT id, team, priority_rank, sla_due_at, created_at FROM tickets
                WHERE conversation_id = %s AND status = 'queued' ORDER BY created_at DESC LIMIT 1)
            SELECT me.id::text AS ticket_id,
                   (SELECT count(*) FROM tickets t WHERE t.status = 'queued' AND t.team = me.team
                      AND (t.priority_rank, t.sla_due_at, t.created_at, t.id)
                          < (me.priority_rank, me.sla_due_at, me.created_at, me.id))::int AS ahead,
                   (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM t.first_claimed_at
                                                                       - t.created_at))
                      FROM tickets t WHERE t.team = me.team AND t.first_claimed_at > now() - interval '24 hours'
                   )::float8 AS typical_wait_seconds
            FROM me
            """,
            (str(conversation_id),)).fetchone()
    return None if row is None else {**row, "position": row["ahead"] + 1}
