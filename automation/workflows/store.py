"""Flow instances in Postgres (migration 0110): the durable state of every running SOP.

The engine works on the caller's connection (the turn's transaction) and locks an instance
row ``FOR UPDATE`` before it changes it, so a customer's message and an approver's decision
arriving together are applied one after the other, never both from the same state.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

ACTIVE = ("waiting", "running", "waiting_approval")
_JSON = ("caller", "slots", "bindings", "attempts", "loops", "pending", "history")
_COLUMNS = ("step", "status", "outcome", "lang", "caller", "slots", "bindings", "attempts", "loops", "pending",
            "generation", "approval_ticket", "history")


def _cur(conn):
    return conn.cursor(row_factory=dict_row)


def create(conn, *, conversation_id: str, workflow: str, version: int, step: str, lang: str,
           caller: dict, slots: dict) -> dict:
    row = _cur(conn).execute(
        """INSERT INTO flow_instances (id, conversation_id, workflow, version, step, status, lang, caller, slots)
           VALUES (%s, %s, %s, %s, %s, 'running', %s, %s, %s) RETURNING *""",
        (uuid.uuid4(), conversation_id, workflow, version, step, lang, Jsonb(caller), Jsonb(slots)),
    ).fetchone()
    return _plain(row)


def active(conn, conversation_id: str, *, lock: bool = False) -> dict | None:
    sql = "SELECT * FROM flow_instances WHERE conversation_id = %s AND status = ANY(%s)"
    row = _cur(conn).execute(sql + (" FOR UPDATE" if lock else ""), (conversation_id, list(ACTIVE))).fetchone()
    return _plain(row) if row else None


def get(conn, instance_id: str, *, lock: bool = False) -> dict | None:
    sql = "SELECT * FROM flow_instances WHERE id = %s"
    row = _cur(conn).execute(sql + (" FOR UPDATE" if lock else ""), (str(instance_id),)).fetchone()
    return _plain(row) if row else None


def by_ticket(conn, ticket_id: str, *, lock: bool = False) -> dict | None:
    sql = "SELECT * FROM flow_instances WHERE approval_ticket = %s"
    row = _cur(conn).execute(sql + (" FOR UPDATE" if lock else ""), (str(ticket_id),)).fetchone()
    return _plain(row) if row else None


def save(conn, inst: dict) -> None:
    sets = ", ".join(f"{c} = %s" for c in _COLUMNS)
    values = [Jsonb(inst[c]) if c in _JSON else inst[c] for c in _COLUMNS]
    conn.execute(f"UPDATE flow_instances SET {sets}, updated_at = now() WHERE id = %s", (*values, str(inst["id"])))


def outcomes(conn, conversation_id: str | None = None, *, limit: int = 20) -> list[dict]:
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


def customer_outcomes(conn, channel: str, customer_id: str, *, limit: int = 5,
                      exclude_conversation: str | None = None) -> list[dict]:
    """A customer's finished flows in other conversations, newest first (session memory's outcomes)."""
    rows = _cur(conn).execute(
        """SELECT id, conversation_id, workflow, status, outcome, slots, updated_at FROM flow_instances
           WHERE caller->>'channel' = %s AND caller->>'customer_id' = %s AND status <> ALL(%s)
             AND conversation_id IS DISTINCT FROM %s
           ORDER BY created_at DESC LIMIT %s""",
        (channel, customer_id, list(ACTIVE), exclude_conversation, limit)).fetchall()
    return [_plain(r) for r in rows]


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    row["id"] = str(row["id"])
    return row
