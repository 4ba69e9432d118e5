"""Read functions over handoff's tables for the gateway's operations views (metrics, trace).

Each package reads and writes only its own tables: what the router's ops code needs to know
about tickets it asks here, so the ticket schema can change without touching the router.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row


def queue_depth(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Queued tickets by kind and priority: rows ``{kind, priority, n}``."""
    return conn.execute(
        "SELECT kind, priority, count(*) AS n FROM tickets WHERE status = 'queued' GROUP BY kind, priority"
    ).fetchall()


def conversation_ticket_events(conn: psycopg.Connection, conversation_id: Any) -> list[dict[str, Any]]:
    """The audit trail of every ticket of a conversation, oldest first (with each ticket's kind)."""
    return conn.execute(
        """
        SELECT e.id, e.ticket_id, t.kind, e.action, e.actor, e.payload, e.at
        FROM ticket_events e JOIN tickets t ON t.id = e.ticket_id
        WHERE t.conversation_id = %s ORDER BY e.at, e.id
        """,
        (str(conversation_id),),
    ).fetchall()


def customer_tickets(conn: psycopg.Connection, channel: str, customer_id: str, limit: int = 5) -> list[dict[str, Any]]:
    """A customer's most recent tickets (kind, status, outcome, reason), newest first: the workflows' session
    memory shows them as earlier outcomes."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            """SELECT id::text AS id, kind, status, outcome, reason, created_at FROM tickets
               WHERE channel = %s AND customer_id = %s ORDER BY created_at DESC LIMIT %s""",
            (channel, str(customer_id), int(limit))).fetchall()
