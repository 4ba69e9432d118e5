"""Flow instances in Postgres (migration 0110): the durable state of every running SOP.

The engine works on the caller's connection (the turn's transaction) and locks an instance
row ``FOR UPDATE`` before it changes it, so a customer's message and an approver's decision
arriving together are applied one after the other, never both from the same state.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from collections.abc import Iterable
from typing import Any, NotRequired, TypedDict, cast

from psycopg import Connection, Cursor
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

ACTIVE = ("waiting", "running", "waiting_approval")
PAUSED = ("suspended",)      # interrupted by another task; resumed when that one ends
_JSON = ("caller", "slots", "bindings", "attempts", "loops", "pending", "history")
Row = dict[str, Any]


class Instance(TypedDict):
    """A flow instance as stored (migration 0110): the engine's durable state of one running workflow."""

    id: str
    conversation_id: str
    workflow: str
    version: int
    step: str | None                      # the step it is at (None: ended)
    status: str                           # running | waiting | waiting_approval | suspended | completed | ...
    outcome: str | None
    lang: str
    caller: dict[str, Any]                # the verified channel and customer id
    slots: dict[str, Any]
    bindings: dict[str, Any]              # call results by their `bind` name, and `memory`
    attempts: dict[str, int]              # failed answers or calls per step (and `_reasks`)
    loops: dict[str, dict[str, Any]]      # foreach id -> {items, index}
    pending: dict[str, Any]               # action, approval, approval_result, approved_call, error, message...
    generation: int                       # the plan's generation: part of a write's idempotency key
    approval_ticket: str | None
    history: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime
    unsaved: NotRequired[bool]            # made in memory this turn (``create(stored=False)``): save inserts it
_COLUMNS = ("step", "status", "outcome", "lang", "caller", "slots", "bindings", "attempts", "loops", "pending",
            "generation", "approval_ticket", "history")


def _cur(conn: Connection[Any]) -> Cursor[Row]:
    return conn.cursor(row_factory=dict_row)


def create(conn: Connection[Any], *, conversation_id: str, workflow: str, version: int, step: str, lang: str,
           caller: dict[str, Any], slots: dict[str, Any], id: uuid.UUID | None = None, status: str = "running",
           pending: dict[str, Any] | None = None, history: list[dict[str, Any]] | None = None,
           stored: bool = True) -> Instance:
    """A new instance, ``running`` (the conversation's one active flow) or ``suspended`` (kept for later).

    ``stored=False``: made in memory only, and inserted by the first :func:`save` of the same transaction (a
    flow started and run in one turn costs one statement, not an insert then an update); the caller saves it
    before anything reads it back."""
    if not stored:
        inst = draft(conversation_id=conversation_id, workflow=workflow, version=version, step=step, lang=lang,
                     caller=caller, slots=slots)
        inst["id"], inst["status"], inst["unsaved"] = str(id or uuid.uuid4()), status, True
        inst["pending"], inst["history"] = pending or {}, history or []
        return inst
    row = _cur(conn).execute(
        """INSERT INTO flow_instances (id, conversation_id, workflow, version, step, status, lang, caller, slots,
                                       pending, history)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING *""",
        (id or uuid.uuid4(), conversation_id, workflow, version, step, status, lang, Jsonb(caller), Jsonb(slots),
         Jsonb(pending or {}), Jsonb(history or [])),
    ).fetchone()
    assert row is not None, "INSERT ... RETURNING gives the row"
    return _instance(row)


def draft(*, conversation_id: str, workflow: str, version: int, step: str, lang: str, caller: dict[str, Any],
          slots: dict[str, Any]) -> Instance:
    """An instance as :func:`create` would make it, in memory only (a look ahead at a flow's start: never saved)."""
    now = datetime.now(timezone.utc)
    return Instance(id=str(uuid.uuid4()), conversation_id=conversation_id, workflow=workflow, version=version,
                    step=step, status="running", outcome=None, lang=lang, caller=caller, slots=slots, bindings={},
                    attempts={}, loops={}, pending={}, generation=0, approval_ticket=None, history=[],
                    created_at=now, updated_at=now)


def active(conn: Connection[Any], conversation_id: str, *, lock: bool = False) -> Instance | None:
    sql = "SELECT * FROM flow_instances WHERE conversation_id = %s AND status = ANY(%s)"
    row = _cur(conn).execute(sql + (" FOR UPDATE" if lock else ""), (conversation_id, list(ACTIVE))).fetchone()
    return _instance(row) if row else None


@dataclass(frozen=True)
class Flows:
    """A conversation's flows as a turn read them before changing any (:func:`overview`): its active flow, its most
    recent one and how many it has had. ``new``: the conversation was made in this transaction, so nothing of it
    is stored yet (no flow, no memory row)."""

    active: Instance | None = None
    last: Instance | None = None
    count: int = 0
    new: bool = False


def overview(conn: Connection[Any], conversation_id: str) -> Flows:
    """:func:`active`, :func:`last` and the number of flows of a conversation, in one read (none locked)."""
    rows = _cur(conn).execute(
        """WITH latest AS (SELECT id FROM flow_instances WHERE conversation_id = %(c)s
                           ORDER BY created_at DESC, id LIMIT 1)
           SELECT f.*, (SELECT count(*) FROM flow_instances WHERE conversation_id = %(c)s) AS flows_so_far,
                  f.id IN (SELECT id FROM latest) AS latest_one
           FROM flow_instances f
           WHERE f.conversation_id = %(c)s AND (f.status = ANY(%(active)s) OR f.id IN (SELECT id FROM latest))""",
        {"c": conversation_id, "active": list(ACTIVE)}).fetchall()
    active = last = None
    count = 0
    for row in rows:
        count, latest = row.pop("flows_so_far"), row.pop("latest_one")
        inst = _instance(row)
        if inst["status"] in ACTIVE:
            active = inst
        if latest:   # its own copy when it is the active one too: each is read as it was
            last = copy.deepcopy(inst) if active is inst else inst
    return Flows(active=active, last=last, count=count)


def suspended(conn: Connection[Any], conversation_id: str, *, lock: bool = False) -> Instance | None:
    """The conversation's most recently interrupted flow, if any."""
    sql = ("SELECT * FROM flow_instances WHERE conversation_id = %s AND status = 'suspended' "
           "ORDER BY updated_at DESC, id LIMIT 1")
    row = _cur(conn).execute(sql + (" FOR UPDATE" if lock else ""), (conversation_id,)).fetchone()
    return _instance(row) if row else None


def last(conn: Connection[Any], conversation_id: str) -> Instance | None:
    """The conversation's most recent flow, whatever its status."""
    row = _cur(conn).execute("SELECT * FROM flow_instances WHERE conversation_id = %s ORDER BY created_at DESC, id "
                             "LIMIT 1", (conversation_id,)).fetchone()
    return _instance(row) if row else None


def done_lately(conn: Connection[Any], conversation_id: str, workflow: str, within_seconds: float) -> list[Row]:
    """The slots of ``workflow``'s runs in the conversation that ended done (completed, or the write found already
    made) within ``within_seconds``, newest first."""
    return _cur(conn).execute(
        """SELECT slots FROM flow_instances WHERE conversation_id = %s AND workflow = %s AND status = 'completed'
             AND coalesce(outcome, 'completed') IN ('completed', 'already_done')
             AND updated_at > now() - make_interval(secs => %s)
           ORDER BY updated_at DESC""", (conversation_id, workflow, within_seconds)).fetchall()


def get(conn: Connection[Any], instance_id: str, *, lock: bool = False) -> Instance | None:
    sql = "SELECT * FROM flow_instances WHERE id = %s"
    row = _cur(conn).execute(sql + (" FOR UPDATE" if lock else ""), (str(instance_id),)).fetchone()
    return _instance(row) if row else None


def by_ticket(conn: Connection[Any], ticket_id: str, *, lock: bool = False) -> Instance | None:
    sql = "SELECT * FROM flow_instances WHERE approval_ticket = %s"
    row = _cur(conn).execute(sql + (" FOR UPDATE" if lock else ""), (str(ticket_id),)).fetchone()
    return _instance(row) if row else None


def save(conn: Connection[Any], inst: Instance, *, forget: Iterable[tuple[str, str]] = ()) -> None:
    """Write the instance back; ``forget``: customers whose remembered shop data a write of this run made
    stale (``memory.forget``): their ``flow_memory`` rows go in the same statement (one round trip a turn)."""
    row: Row = dict(inst)
    values = [Jsonb(row[c]) if c in _JSON else row[c] for c in _COLUMNS]
    if inst.pop("unsaved", False):
        # made by create(stored=False) this turn: inserted now (again on a repeated pass: the same id, updated)
        write, params = _INSERT, (str(inst["id"]), inst["conversation_id"], inst["workflow"], inst["version"],
                                  *values)
    else:
        write, params = _UPDATE, (*values, str(inst["id"]))
    whom = sorted(set(forget))
    if not whom:
        conn.execute(write, params)
        return
    conn.execute("WITH forgotten AS (DELETE FROM flow_memory WHERE (customer_channel, customer_id) IN "
                 "(SELECT * FROM unnest(%s::text[], %s::text[]))) " + write,
                 ([w[0] for w in whom], [w[1] for w in whom], *params))
    tell_stale(conn, whom)


_UPDATE = f"UPDATE flow_instances SET {', '.join(f'{c} = %s' for c in _COLUMNS)}, updated_at = now() WHERE id = %s"
_INSERT = (f"INSERT INTO flow_instances (id, conversation_id, workflow, version, {', '.join(_COLUMNS)}) "
           f"VALUES (%s, %s, %s, %s, {', '.join('%s' for _ in _COLUMNS)}) ON CONFLICT (id) DO UPDATE SET "
           f"{', '.join(f'{c} = EXCLUDED.{c}' for c in _COLUMNS)}, updated_at = now()")


#: the channel on which a write's commit tells every gateway process which customers' kept memory is stale
MEMORY_STALE = "switchboard_memory_stale"


def tell_stale(conn: Connection[Any], whom: Iterable[tuple[str, str]]) -> None:
    """Tell every gateway process (LISTEN ``MEMORY_STALE``) that these customers' kept shop data is stale.

    Delivered when the caller's transaction commits (never for a rolled-back pass); only writes that succeeded
    notify, so the notify lock that serialises notifying commits is taken by few turns."""
    whom = sorted(set(whom))
    if whom:
        conn.execute("SELECT pg_notify(%s, json_build_array(c, i)::text) FROM unnest(%s::text[], %s::text[]) AS w(c, i)",
                     (MEMORY_STALE, [w[0] for w in whom], [w[1] for w in whom]))


def outcomes(conn: Connection[Any], conversation_id: str | None = None, *, limit: int = 20) -> list[Row]:
    """Recent flows (for memory and the context package): workflow, status, outcome, slots."""
    cur = _cur(conn)
    if conversation_id:
        rows = cur.execute("""SELECT id, workflow, status, outcome, slots, updated_at FROM flow_instances
                              WHERE conversation_id = %s ORDER BY created_at DESC LIMIT %s""",
                           (conversation_id, limit)).fetchall()
    else:
        rows = cur.execute("""SELECT id, workflow, status, outcome, slots, updated_at FROM flow_instances
                              ORDER BY created_at DESC LIMIT %s""", (limit,)).fetchall()
    return [_plain(r) for r in rows]


def customer_outcomes(conn: Connection[Any], channel: str, customer_id: str, *, limit: int = 5,
                      exclude_conversation: str | None = None) -> list[Row]:
    """A customer's finished flows in other conversations, newest first (session memory's outcomes)."""
    rows = _cur(conn).execute(
        """SELECT id, conversation_id, workflow, status, outcome, slots, updated_at FROM flow_instances
           WHERE caller->>'channel' = %s AND caller->>'customer_id' = %s AND status <> ALL(%s)
             AND conversation_id IS DISTINCT FROM %s
           ORDER BY created_at DESC LIMIT %s""",
        (channel, customer_id, list(ACTIVE + PAUSED), exclude_conversation, limit)).fetchall()
    return [_plain(r) for r in rows]


def _instance(row: Row) -> Instance:
    return cast(Instance, _plain(row))


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["id"] = str(row["id"])
    return row


def conversation_flows(conn: Connection[Any], conversation_id: str) -> list[Row]:
    """Every flow of a conversation, oldest first, for its trace and the conversation eval: the outcome,
    the slots, the steps run and the tool calls made (with their recorded results from ``tool_calls``)."""
    cur = _cur(conn)
    rows = cur.execute("""SELECT id, workflow, version, step, status, outcome, lang, slots, history, approval_ticket,
                                 created_at, updated_at
                          FROM flow_instances WHERE conversation_id = %s ORDER BY created_at, id""",
                       (str(conversation_id),)).fetchall()
    call_ids = [h["call_id"] for r in rows for h in r["history"] if h.get("event") == "call" and h.get("call_id")]
    recorded: dict[str, Row] = {}
    if call_ids:
        for c in cur.execute("SELECT id::text AS id, output, error FROM tool_calls WHERE id::text = ANY(%s)",
                             (call_ids,)).fetchall():
            recorded[c["id"]] = c
    out: list[Row] = []
    for r in rows:
        history = r["history"] or []
        calls: list[Row] = []
        for h in history:
            if h.get("event") != "call":
                continue
            rec = recorded.get(str(h.get("call_id")), {})
            calls.append({"step": h.get("step"), "tool": h.get("tool"), "status": h.get("status"),
                          "idempotency_key": h.get("idempotency_key"), "output": rec.get("output"),
                          "error": rec.get("error")})
        steps = [h["step"] for h in history if h.get("step") and "kind" in h]
        out.append({"instance_id": str(r["id"]), "workflow": r["workflow"], "version": r["version"],
                    "status": r["status"], "outcome": r["outcome"], "step": r["step"], "lang": r["lang"],
                    "slots": r["slots"], "steps": steps, "calls": calls,
                    "approval_ticket": r["approval_ticket"],
                    "events": [h["event"] for h in history if h.get("event") and h.get("event") != "call"],
                    "created_at": r["created_at"].isoformat(), "updated_at": r["updated_at"].isoformat()})
    return out


def completion_by_workflow(conn: Connection[Any], since: Any, until: Any) -> dict[str, dict[str, int]]:
    """Flows started in [since, until) per workflow, by how they ended. ``completed`` means the task was
    done (status completed, outcome completed); a refusal by the shop's rules is counted apart."""
    rows = _cur(conn).execute(
        """SELECT workflow,
                  count(*) AS started,
                  count(*) FILTER (WHERE status = 'completed' AND outcome = 'completed') AS completed,
                  count(*) FILTER (WHERE status = 'completed' AND outcome IS DISTINCT FROM 'completed') AS refused,
                  count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
                  count(*) FILTER (WHERE status = 'escalated') AS escalated,
                  count(*) FILTER (WHERE status = ANY(%(active)s)) AS active
           FROM flow_instances WHERE created_at >= %(since)s AND created_at < %(until)s
           GROUP BY workflow ORDER BY workflow""",
        {"since": since, "until": until, "active": list(ACTIVE + PAUSED)}).fetchall()
    return {r["workflow"]: {k: r[k] for k in ("started", "completed", "refused", "cancelled", "escalated", "active")}
            for r in rows}
