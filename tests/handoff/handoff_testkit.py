"""Helpers for the queue's tests: a small real conversation port and read-backs from the test DB."""

from __future__ import annotations

import json
from typing import Any

from handoff.config import HandoffConfig
from handoff.ports import CustomerUnreachable

PORT_TABLE = """
CREATE TABLE IF NOT EXISTS test_port_calls (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    call text NOT NULL,
    ticket_id text NOT NULL,
    conversation_id text NOT NULL,
    ticket_status text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
)
"""

# the states the conversation side would move to (the router's own state machine is tested there)
_STATE_AFTER = {"on_ticket_claimed": "l3_connected", "on_ticket_resolved": "feedback_pending",
                "on_returned_to_bot": "idle", "on_ticket_cancelled": "idle", "on_ticket_requeued": "l3_queuing"}


class TablePort:
    """A real ConversationPort: every call is a row in ``test_port_calls`` (in the ticket's transaction),
    the conversation's ``state`` column follows the ticket, and messages go to the transcript + outbox."""

    def _log(self, call: str, conn, ticket: dict[str, Any]) -> None:
        conn.execute(
            "INSERT INTO test_port_calls (call, ticket_id, conversation_id, ticket_status) VALUES (%s, %s, %s, %s)",
            (call, str(ticket["id"]), str(ticket["conversation_id"]), ticket["status"]),
        )
        conn.execute("UPDATE conversations SET state = %s WHERE id::text = %s",
                     (_STATE_AFTER[call], str(ticket["conversation_id"])))

    def before_ticket_change(self, conn, conversation_id):
        conn.execute("SELECT 1 FROM conversations WHERE id::text = %s FOR UPDATE", (str(conversation_id),))

    def claim_sql(self):
        return None   # claim-next calls on_ticket_claimed in its transaction

    def on_ticket_claimed(self, conn, ticket):
        self._log("on_ticket_claimed", conn, ticket)

    def on_ticket_resolved(self, conn, ticket):
        self._log("on_ticket_resolved", conn, ticket)

    def on_returned_to_bot(self, conn, ticket):
        self._log("on_returned_to_bot", conn, ticket)

    def on_ticket_cancelled(self, conn, ticket):
        self._log("on_ticket_cancelled", conn, ticket)

    def on_ticket_requeued(self, conn, ticket):
        self._log("on_ticket_requeued", conn, ticket)

    def send_to_customer(self, conn, ticket, *, text, sender, agent_id):
        from router.outbox.store import enqueue_outbound

        conv = conn.execute("SELECT id, channel FROM conversations WHERE id::text = %s",
                            (str(ticket["conversation_id"]),)).fetchone()
        if conv is None:
            raise CustomerUnreachable(f"conversation {ticket['conversation_id']} does not exist")
        return enqueue_outbound(conn, conversation_id=conv["id"], channel=conv["channel"], text=text, sender=sender,
                                kind="agent_message", payload={"ticket_id": str(ticket["id"]), "agent_id": agent_id})


def make_config(**overrides) -> HandoffConfig:
    return HandoffConfig(**{"sweep_interval_seconds": 0, **overrides})


def events_of(pool, ticket_id) -> list[dict[str, Any]]:
    with pool.connection() as conn:
        return conn.execute("SELECT actor, action, payload FROM ticket_events WHERE ticket_id = %s ORDER BY id",
                            (ticket_id,)).fetchall()


def port_calls(pool, ticket_id=None) -> list[str]:
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT call FROM test_port_calls WHERE %(t)s::text IS NULL OR ticket_id = %(t)s ORDER BY id",
            {"t": None if ticket_id is None else str(ticket_id)},
        ).fetchall()
    return [r["call"] for r in rows]


def conversation_state(pool, conversation_id) -> str:
    with pool.connection() as conn:
        return conn.execute("SELECT state FROM conversations WHERE id = %s", (conversation_id,)).fetchone()["state"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)
