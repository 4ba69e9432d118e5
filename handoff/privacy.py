"""Retention and erasure of customer data in handoff's own tables (tickets, ticket events).

The router's ``switchboard retention run`` and ``switchboard customers forget`` call these for the
handoff part; what stays is what the queue statistics need (kinds, priorities, times, outcomes).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import DictRow

ERASED = {"erased": True}


def _erasure(conn: psycopg.Connection[DictRow]) -> None:
    # ticket_events is append-only; this transaction may blank payloads (handoff/migrations/0080_erasure.sql)
    conn.execute("SELECT set_config('switchboard.erasure', 'on', true)")


def expire(conn: psycopg.Connection[DictRow], days: int) -> dict[str, int]:
    """Closed tickets older than ``days``: the context package and draft go, and their events' payloads."""
    _erasure(conn)
    tickets = conn.execute(
        """UPDATE tickets SET context = %s::jsonb, draft = NULL
            WHERE status IN ('resolved', 'returned_to_bot', 'cancelled')
              AND coalesce(closed_at, updated_at) < now() - make_interval(days => %s)
              AND context <> %s::jsonb
        RETURNING id""", (_json(ERASED), days, _json(ERASED))).fetchall()
    ids = [r["id"] for r in tickets]
    events = conn.execute(
        "UPDATE ticket_events SET payload = '{}'::jsonb WHERE ticket_id = ANY(%s) AND payload <> '{}'::jsonb",
        (ids,)).rowcount if ids else 0
    return {"tickets.context": len(ids), "ticket_events.payload": events}


def forget(conn: psycopg.Connection[DictRow], *, customer_id: str, conversation_ids: list[str], alias: str) -> dict[str, int]:
    """Erase one customer's data from every ticket of theirs; the ticket rows stay (counts, SLA) under ``alias``."""
    _erasure(conn)
    rows = conn.execute(
        """UPDATE tickets SET context = %s::jsonb, draft = NULL, customer_id = %s
            WHERE customer_id = %s OR conversation_id = ANY(%s) RETURNING id""",
        (_json(ERASED), alias, customer_id, conversation_ids)).fetchall()
    ids = [r["id"] for r in rows]
    events = conn.execute("UPDATE ticket_events SET payload = '{}'::jsonb WHERE ticket_id = ANY(%s)",
                          (ids,)).rowcount if ids else 0
    return {"tickets": len(ids), "ticket_events": events}


def _json(value: Any) -> str:
    import json

    return json.dumps(value)
