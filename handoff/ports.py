"""What handoff needs from the rest of the gateway, as a small protocol.

handoff knows nothing of routing: it receives a context package as data when a ticket is
opened, and it tells the conversation side about ticket changes through this port. The
composition root (router) passes an implementation in; every call runs inside the
transaction of the ticket change that caused it, so a ticket and its conversation never
disagree.
"""

from __future__ import annotations

from typing import Any, Protocol

import psycopg


class ConversationPort(Protocol):
    def on_ticket_claimed(self, conn: psycopg.Connection, ticket: dict[str, Any]) -> None:
        """An agent took the ticket (L3: the conversation becomes l3_connected)."""

    # Optional: ``claim_sql(self) -> str | None``. Data-modifying CTEs (each starting with ", name AS (")
    # that do in SQL what on_ticket_claimed does, reading the claimed ticket from the CTE ``claimed``
    # (the ticket's columns). claim-next then runs as one statement in its own transaction (one
    # round trip instead of four) and does not call on_ticket_claimed. Must not contain "%" or braces.

    def on_ticket_resolved(self, conn: psycopg.Connection, ticket: dict[str, Any]) -> None:
        """The ticket was resolved (conversation -> feedback_pending; it must not bounce back by itself)."""

    def on_returned_to_bot(self, conn: psycopg.Connection, ticket: dict[str, Any]) -> None:
        """An agent handed the conversation back: the bot is in charge again."""

    def on_ticket_cancelled(self, conn: psycopg.Connection, ticket: dict[str, Any]) -> None:
        """The ticket was cancelled."""

    def on_ticket_requeued(self, conn: psycopg.Connection, ticket: dict[str, Any]) -> None:
        """A claimed ticket went back to the queue (released, lease expired, transferred to a team).

        Optional: handoff skips it when the port does not define it.
        """

    def send_to_customer(self, conn: psycopg.Connection, ticket: dict[str, Any], *, text: str,
                         sender: str, agent_id: str | None) -> dict[str, Any]:
        """Store ``text`` in the transcript and queue it for delivery on the conversation's channel.

        ``sender`` is "agent" (agent message, approved or edited L2 draft). Returns ids of what was stored.
        """


class NullConversationPort:
    """For running handoff on its own (no conversation side): state changes are ignored and
    customer messages are refused, never silently dropped."""

    def on_ticket_claimed(self, conn, ticket):
        return None

    def on_ticket_resolved(self, conn, ticket):
        return None

    def on_returned_to_bot(self, conn, ticket):
        return None

    def on_ticket_cancelled(self, conn, ticket):
        return None

    def on_ticket_requeued(self, conn, ticket):
        return None

    def send_to_customer(self, conn, ticket, *, text, sender, agent_id):
        raise RuntimeError("no conversation port configured: cannot deliver a message to the customer")
