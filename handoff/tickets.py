"""Ticket rows and their audit trail, at the SQL level (functions take a connection).

Every change to a ticket appends one ``ticket_events`` row and a notification on
``handoff_events`` carrying the event id and the ticket's routing fields (never its context:
notifications are small and free of customer data). Live screens never see a change that was
rolled back: a NOTIFY issued inside a transaction is delivered at its commit, and the
service's own actions publish theirs right after their commit (see :func:`publish`).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from collections.abc import Callable
from typing import Any, overload

import psycopg
from psycopg.rows import DictRow

from handoff.errors import NotFound
from handoff.models import Agent, one
from handoff.reasons import reason_text
from handoff.refs import annotate_transcript   # each masked value's reference, for a recorded reveal
from text.personal import partial_obj

# Values agents work with, never masked: what the classifier extracted, delivery receipts, the reply draft;
# and the references to masked values (handoff.reveal), already in the agent view.
AGENT_VIEW_KEEP = frozenset({"order_numbers", "amounts", "entities", "delivery", "draft", "personal", "ref"})

log = logging.getLogger(__name__)

CHANNEL = "handoff_events"
_UUID_FIELDS = ("id", "claimed_by", "approved_by", "resolved_by")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def customer_language(context: dict[str, Any] | None) -> str | None:
    """The customer's language as agent screens show it: the package's own ``language`` when the router
    set one, else "zh" or "en" from the customer's latest message (CJK script or not); None without text."""
    if not isinstance(context, dict):
        return None
    given = context.get("language") or (context.get("customer") or {}).get("language")
    if isinstance(given, str) and given:
        return given
    for m in reversed(context.get("transcript") or []):
        if isinstance(m, dict) and m.get("sender") == "customer" and m.get("text"):
            return "zh" if _CJK.search(str(m["text"])) else "en"
    return None


def customer_name(context: dict[str, Any] | None) -> str | None:
    """The customer's name where known: the shop's profile in the session memory, or the package's customer."""
    if not isinstance(context, dict):
        return None
    for holder in ((context.get("memory") or {}).get("profile"), context.get("customer")):
        name = holder.get("name") if isinstance(holder, dict) else None
        if isinstance(name, str) and name.strip():
            return name.strip()
    return None


@overload
def ticket_row(row: dict[str, Any]) -> dict[str, Any]: ...
@overload
def ticket_row(row: None) -> None: ...
def ticket_row(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A ticket as handed to callers: ids as strings, generated helper columns dropped."""
    if row is None:
        return None
    out = dict(row)
    for key in _UUID_FIELDS:
        if out.get(key) is not None:
            out[key] = str(out[key])
    out.pop("priority_rank", None)
    if "context" in out:
        out["language"] = customer_language(out["context"])
        out["customer_name"] = customer_name(out["context"])
    if "reason" in out:
        out["reason_text"] = reason_text(out["reason"])
    out.pop("_notified", None)
    out.pop("_note", None)
    return out


def parse_id(ticket_id: Any) -> uuid.UUID:
    if isinstance(ticket_id, uuid.UUID):
        return ticket_id
    try:
        return uuid.UUID(str(ticket_id))
    except ValueError:
        raise NotFound(f"no ticket {ticket_id!r}") from None


def lock_ticket(conn: psycopg.Connection[DictRow], ticket_id: Any) -> dict[str, Any]:
    """The ticket row, locked until the transaction ends; 404 if it does not exist."""
    tid = parse_id(ticket_id)
    # NO KEY UPDATE: changes never touch the key, and event inserts (their foreign-key checks
    # take KEY SHARE) need not wait behind an agent's action
    row = conn.execute("SELECT * FROM tickets WHERE id = %s FOR NO KEY UPDATE", (tid,)).fetchone()
    if row is None:
        raise NotFound(f"no ticket {ticket_id}")
    return ticket_row(row)


def fetch_ticket(conn: psycopg.Connection[DictRow], ticket_id: Any) -> dict[str, Any]:
    tid = parse_id(ticket_id)
    row = conn.execute("SELECT * FROM tickets WHERE id = %s", (tid,)).fetchone()
    if row is None:
        raise NotFound(f"no ticket {ticket_id}")
    return ticket_row(row)


_EVENT_SQL = """
WITH e AS (
    INSERT INTO ticket_events (ticket_id, actor, actor_agent_id, action, payload, idempotency_key)
    VALUES (%(ticket_id)s, %(actor)s, %(agent_id)s, %(action)s, %(payload)s, %(key)s)
    RETURNING id, ticket_id, actor, action, at
)
SELECT e.id, e.at, n.note, CASE WHEN %(now)s THEN pg_notify('handoff_events', n.note) END AS notified
FROM e, LATERAL (SELECT json_build_object(
    'id', e.id, 'ticket_id', e.ticket_id, 'action', e.action, 'actor', e.actor, 'at', e.at,
    'kind', %(kind)s::text, 'team', %(team)s::text, 'priority', %(priority)s::text,
    'status', %(status)s::text, 'claimed_by', %(claimed_by)s::text, 'from_team', %(from_team)s::text)::text AS note) n
"""


def record_event(conn: psycopg.Connection[DictRow], ticket: dict[str, Any], actor: Agent | str, action: str,
                 payload: dict[str, Any] | None = None, *, idempotency_key: str | None = None,
                 notes: list[str] | None = None, from_team: str | None = None) -> dict[str, Any]:
    """Append an audit event for ``ticket`` (its state after the change) and notify listeners.

    Without ``notes`` the NOTIFY is part of the caller's transaction; with ``notes`` the
    notification is appended there for :func:`publish` after the commit. ``from_team`` names
    the team a ticket left, so that team's screens hear about it too.
    """
    if isinstance(actor, Agent):
        actor_name, agent_id = actor.actor, actor.id
    else:
        actor_name, agent_id = str(actor), None
    row = one(conn.execute(_EVENT_SQL, {
        "ticket_id": parse_id(ticket["id"]), "actor": actor_name, "agent_id": agent_id, "action": action,
        "payload": json.dumps(partial_obj(payload or {}, keep=AGENT_VIEW_KEEP), ensure_ascii=False, default=str), "key": idempotency_key,
        "kind": ticket["kind"], "team": ticket["team"], "priority": ticket["priority"],
        "status": ticket["status"], "claimed_by": ticket.get("claimed_by"), "now": notes is None,
        "from_team": from_team,
    }).fetchone())
    if notes is not None:
        notes.append(row["note"])
    return {"id": row["id"], "at": row["at"]}


def publish(conn: psycopg.Connection[DictRow], notes: list[str]) -> bool:
    """Send notifications for changes that have just committed, in one round trip.

    A NOTIFY inside a transaction serialises every notifying commit behind one global lock
    held through the WAL flush (measured: ~500 commits/s instead of ~3,000 with 16 writers),
    so actions publish after their commit instead, in a tiny transaction of their own with
    ``synchronous_commit`` off (nothing durable is written; the audit log is the record).
    Returns False when the NOTIFY failed (logged): the :class:`Publisher`'s ``on_failure`` then
    republishes or makes the screens resynchronise.
    """
    if not notes:
        return True
    previous = conn.autocommit
    try:
        conn.autocommit = True
        if len(notes) == 1:
            conn.execute("SELECT set_config('synchronous_commit', 'off', true), pg_notify(%s, %s)",
                         (CHANNEL, notes[0]))
        else:   # one JSON text rather than a text[]: psycopg escapes arrays element by element in Python
            conn.execute(
                "SELECT set_config('synchronous_commit', 'off', true), pg_notify(%s, n) "
                "FROM json_array_elements_text(%s::json) AS n",
                (CHANNEL, json.dumps(notes)),
            )
    except psycopg.Error:
        log.warning("could not publish %d handoff notification(s)", len(notes), exc_info=True)
        return False
    finally:
        try:
            conn.autocommit = previous
        except psycopg.Error:  # pragma: no cover - a broken connection is discarded by the pool
            pass
    return True


_REQUEUE_HELD_SQL = """
WITH held AS (
    SELECT id, claimed_by AS previous_agent FROM tickets
    WHERE status = 'claimed' AND claimed_by = %(agent_id)s
    FOR NO KEY UPDATE
), upd AS (
    UPDATE tickets t SET status = 'queued', claimed_by = NULL, claimed_at = NULL, lease_expires_at = NULL,
                         requeues = requeues + 1, updated_at = now()
    FROM held WHERE t.id = held.id
    RETURNING t.*, held.previous_agent
), ev AS (
    INSERT INTO ticket_events (ticket_id, actor, action, payload)
    SELECT id, %(actor)s, %(action)s, json_build_object('previous_agent', previous_agent) FROM upd
    RETURNING id, ticket_id, at
)
SELECT upd.*, pg_notify('handoff_events', json_build_object(
    'id', ev.id, 'ticket_id', upd.id, 'action', %(action)s::text, 'actor', %(actor)s::text, 'at', ev.at,
    'kind', upd.kind, 'team', upd.team, 'priority', upd.priority, 'status', upd.status,
    'claimed_by', NULL)::text) AS _notified
FROM upd JOIN ev ON ev.ticket_id = upd.id
"""


def requeue_held_by(conn: psycopg.Connection[DictRow], agent_id: str, *, actor: str, action: str) -> list[dict[str, Any]]:
    """Put every ticket an agent holds back in the queue (the agent was disabled): nothing is lost."""
    rows = conn.execute(_REQUEUE_HELD_SQL, {"agent_id": parse_id(agent_id), "actor": actor,
                                            "action": action}).fetchall()
    out = []
    for r in rows:
        r = dict(r)
        r.pop("previous_agent", None)
        out.append(ticket_row(r))
    return out


def normalise_context(context: dict[str, Any] | None, draft: dict[str, Any] | None) -> dict[str, Any]:
    """The context package every ticket carries; missing parts are empty, never invented."""
    pkg: dict[str, Any] = {"transcript": [], "decisions": [], "evidence": [], "customer_facts": {}}
    pkg.update(context or {})
    if draft is not None and "draft" not in pkg:
        pkg["draft"] = draft
    # fails early (in the caller's transaction) on anything that is not JSON
    json.dumps(pkg, ensure_ascii=False, default=str)
    # every agent of the team reads the package: personal data in the agent view (138****0000)
    customer: dict[str, Any] = pkg["customer"] if isinstance(pkg.get("customer"), dict) else {}
    allow = [str(o) for o in customer.get("order_numbers") or []]
    annotate_transcript(pkg, allow)
    shown: dict[str, Any] = partial_obj(pkg, allow=allow, keep=AGENT_VIEW_KEEP)   # a dict stays a dict
    return shown


#: how far a ticket's session memory got (its context package's ``memory_status``): ``pending`` until an agent
#: first reads or claims the ticket (the router's loader then fills it), then ``loaded``, ``partial`` (some of the shop's reads failed: the
#: memory's ``failed`` says which) or ``unavailable`` (none of them answered, or the load itself failed)
MEMORY_STATUSES = ("pending", "unavailable", "partial", "loaded")

_FILL_MEMORY_SQL = """
UPDATE tickets
SET context = jsonb_set(jsonb_set(context, '{memory}', %(memory)s::jsonb), '{memory_status}', to_jsonb(%(status)s::text))
WHERE id = %(id)s AND context->>'memory_status' = ANY(%(over)s)
RETURNING id
"""


def fill_context_memory(conn: psycopg.Connection[DictRow], ticket_id: Any, memory: dict[str, Any] | None,
                        status: str) -> bool:
    """Write a ticket's session memory into its context package (only the ``memory`` and ``memory_status``
    keys), masked as the rest of the package; whether it was written.

    Guarded by the status there: a package still ``pending`` takes any outcome, and a better outcome replaces
    a worse one (a second load for the same conversation, after the ticket was joined), never the reverse; a
    package without the status (an approval's, an older ticket's) is left as it is.
    """
    if status not in MEMORY_STATUSES or status == "pending":
        raise ValueError(f"unknown memory status {status!r}")
    row = conn.execute("SELECT context->'customer'->'order_numbers' AS orders FROM tickets WHERE id = %s",
                       (parse_id(ticket_id),)).fetchone()
    if row is None:
        return False
    allow = [str(o) for o in (row["orders"] if isinstance(row["orders"], list) else [])]
    shown = partial_obj(memory, allow=allow, keep=AGENT_VIEW_KEEP) if memory is not None else None
    over = list(MEMORY_STATUSES[:MEMORY_STATUSES.index(status) + 1])
    if status == "unavailable":
        over = ["pending"]     # a failed load never replaces one that came, even in part
    done = conn.execute(_FILL_MEMORY_SQL, {"memory": json.dumps(shown, ensure_ascii=False, default=str),
                                           "status": status, "id": parse_id(ticket_id), "over": over}).fetchone()
    return done is not None


class Publisher:
    """Coalesces the notifications of concurrent actions into shared NOTIFY round trips.

    Each NOTIFY takes Postgres's notification-queue lock; with many agents acting at once that
    round trip was a quarter of a claim's cost (1,457 claims/s with one per claim, 1,959 with none).
    An action hands its notes here after its commit: if another action is already publishing, the
    notes join the batch that one sends next and the caller returns at once; otherwise the caller
    publishes, and keeps going until nothing is pending (so no note waits for a later action).
    Order is kept. A batch whose NOTIFY failed goes to ``on_failure`` (the service republishes it on a
    fresh connection or makes the screens resynchronise).
    """

    def __init__(self, on_failure: Callable[[list[str]], None] | None = None):
        self.on_failure = on_failure
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._busy = False

    def __call__(self, conn: psycopg.Connection[Any], notes: list[str]) -> None:
        if not notes:
            return
        with self._lock:
            self._pending.extend(notes)
            if self._busy:
                return
            self._busy = True
        batch: list[str] = []
        try:
            while True:
                with self._lock:
                    batch, self._pending = self._pending, []
                    if not batch:
                        self._busy = False
                        return
                if not publish(conn, batch) and self.on_failure is not None:
                    self.on_failure(batch)
        except BaseException:
            with self._lock:
                self._pending[:0] = batch
                self._busy = False
            raise


# -- writing ticket rows (the commands' SQL) -------------------------------------------------------------------


class Sql:
    """A SQL expression for :func:`update_ticket` (our own fragments, never user input)."""

    __slots__ = ("sql", "params")

    def __init__(self, sql: str, *params: Any):
        self.sql = sql
        self.params = params


def update_ticket(conn: psycopg.Connection[DictRow], ticket_id: Any, **fields: Any) -> dict[str, Any]:
    """Set columns (names are ours, never user input) and return the new row."""
    sets: list[str] = []
    params: list[Any] = []
    for col, value in fields.items():
        if isinstance(value, Sql):
            sets.append(f"{col} = {value.sql}")
            params.extend(value.params)
        else:
            sets.append(f"{col} = %s")
            params.append(value)
    sets.append("updated_at = now()")
    row = conn.execute(f"UPDATE tickets SET {', '.join(sets)} WHERE id = %s RETURNING *",
                       (*params, parse_id(ticket_id))).fetchone()
    return ticket_row(one(row))


def conversation_of(conn: psycopg.Connection[DictRow], ticket_id: Any) -> Any:
    """The conversation a ticket belongs to (read without a lock); 404 if there is no such ticket."""
    row = conn.execute("SELECT conversation_id FROM tickets WHERE id = %s", (parse_id(ticket_id),)).fetchone()
    if row is None:
        raise NotFound(f"no ticket {ticket_id}")
    return row["conversation_id"]


_INSERT_SQL = """
INSERT INTO tickets (kind, conversation_id, channel, customer_id, reason, priority, team, skills,
                     context, draft, draft_status, amount, currency, approval_level, sla_due_at)
VALUES (%(kind)s, %(conversation_id)s, %(channel)s, %(customer_id)s, %(reason)s, %(priority)s,
        %(team)s, %(skills)s, %(context)s, %(draft)s, %(draft_status)s, %(amount)s, %(currency)s,
        %(approval_level)s, now() + make_interval(secs => %(sla)s))
ON CONFLICT (conversation_id) WHERE status IN ('queued', 'claimed') DO NOTHING
RETURNING *
"""


def insert_open_ticket(conn: psycopg.Connection[DictRow], params: dict[str, Any]) -> dict[str, Any] | None:
    """Insert a queued ticket; None when the conversation already has an open one (at most one each)."""
    return ticket_row(conn.execute(_INSERT_SQL, params).fetchone())


def open_ticket_of(conn: psycopg.Connection[DictRow], conversation_id: Any, *, lock: bool = False) -> dict[str, Any] | None:
    """The conversation's open (queued or claimed) ticket, if any; with ``lock``, locked for a change."""
    sql = "SELECT * FROM tickets WHERE conversation_id = %s AND status IN ('queued', 'claimed')"
    if lock:
        sql += " FOR NO KEY UPDATE"
    return ticket_row(conn.execute(sql, (str(conversation_id),)).fetchone())


def event_by_key(conn: psycopg.Connection[DictRow], ticket_id: Any, key: str) -> dict[str, Any] | None:
    """The ticket's event recorded with this Idempotency-Key, if any."""
    return conn.execute(
        "SELECT id, actor, action, payload FROM ticket_events WHERE ticket_id = %s AND idempotency_key = %s",
        (parse_id(ticket_id), key),
    ).fetchone()


_CLAIM_NEXT_SQL = """
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


def claim_next_sql(filters: list[str], port_sql: str | None) -> str:
    """The one statement that picks, claims and audits the best queued ticket (``_note``: its notification);
    ``filters`` are our own ``AND ...`` fragments, ``port_sql`` the port's CTE moving the conversation."""
    return _CLAIM_NEXT_SQL.format(filters=" ".join(filters), port=port_sql or "")


def extend_lease(conn: psycopg.Connection[DictRow], ticket_id: Any, agent_id: str, lease: float) -> dict[str, Any] | None:
    """Extend the lease of a ticket the agent holds; None when it does not hold it (any more)."""
    return conn.execute(
        """
        UPDATE tickets SET lease_expires_at = now() + make_interval(secs => %s)
        WHERE id = %s AND status = 'claimed' AND claimed_by = %s
        RETURNING id, status, claimed_by, lease_expires_at
        """,
        (lease, parse_id(ticket_id), agent_id),
    ).fetchone()


SWEEP_LOCK_KEY = 0x5357_4831  # "SWH1": one sweeper at a time across all pods


def take_sweep_lock(conn: psycopg.Connection[DictRow]) -> bool:
    """The transaction-scoped sweep lock, if no other pod holds it."""
    return bool(one(conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS got", (SWEEP_LOCK_KEY,)).fetchone())["got"])


_SWEEP_LEASES_SQL = """
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

_SWEEP_SLA_SQL = """
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


def sweep_expired_leases(conn: psycopg.Connection[DictRow], notes: list[str], batch: int) -> list[dict[str, Any]]:
    """Expired leases go back to the queue, each with a ``lease_expired`` event (its note into ``notes``)."""
    rows = conn.execute(_SWEEP_LEASES_SQL, {"batch": batch}).fetchall()
    notes.extend(r["_note"] for r in rows)
    return [ticket_row({k: v for k, v in r.items() if k not in ("previous_agent", "lapsed_at")}) for r in rows]


def sweep_missed_sla(conn: psycopg.Connection[DictRow], notes: list[str], batch: int,
                     sla: dict[str, int]) -> list[dict[str, Any]]:
    """Queued tickets past their SLA: priority up one step, a new deadline at that priority, breach counted."""
    rows = conn.execute(_SWEEP_SLA_SQL, {
        "batch": batch, "sla_normal": float(sla["normal"]), "sla_high": float(sla["high"]),
        "sla_urgent": float(sla["urgent"]),
    }).fetchall()
    notes.extend(r["_note"] for r in rows)
    return [ticket_row({k: v for k, v in r.items() if k not in ("previous_priority", "missed_due")})
            for r in rows]
