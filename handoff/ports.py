"""What handoff needs from the rest of the gateway, as a small protocol.

handoff knows nothing of routing: it receives a context package as data when a ticket is
opened, and it tells the conversation side about ticket changes through this port. The
composition root (router) passes an implementation in; every call runs inside the
transaction of the ticket change that caused it, so a ticket and its conversation never
disagree. Every method is required (a port with nothing to do returns None), and a port
raises only the errors declared here, which handoff maps to the API's answers.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import psycopg
from psycopg.rows import DictRow

Conn = psycopg.Connection[DictRow]   # the queue's connections hand out rows as dicts


class PortError(Exception):
    """Base of the errors a port may raise."""


class CustomerUnreachable(PortError):
    """This customer cannot be written to: unknown conversation, or do-not-contact (STOP). Answered 409."""


class DeliveryUnavailable(PortError):
    """Nothing can deliver to customers now (e.g. no conversation side configured). Answered 503."""


class OriginalGone(PortError):
    """The original of a masked value is no longer there (the message was erased by retention or a forget
    request) or no longer holds a personal value at that place. Answered 404."""


@runtime_checkable
class ConversationPort(Protocol):
    def before_ticket_change(self, conn: psycopg.Connection[DictRow], conversation_id: Any) -> None:
        """Called before an agent action locks the ticket: lock what the conversation side locks first.

        The router locks a conversation and then its ticket; an action that locked the ticket and
        then (through this port) the conversation could deadlock with it, so every writer takes
        the two in the same order.
        """

    def claim_sql(self) -> str | None:
        """on_ticket_claimed as SQL, or None to have it called instead.

        Data-modifying CTEs (each starting with ", name AS (") that do in SQL what on_ticket_claimed
        does, reading the claimed ticket from the CTE ``claimed`` (the ticket's columns). claim-next
        then runs as one statement in its own transaction (one round trip instead of four) and does
        not call on_ticket_claimed. Must not contain "%" or braces.
        """

    def on_ticket_claimed(self, conn: psycopg.Connection[DictRow], ticket: dict[str, Any]) -> None:
        """An agent took the ticket (L3: the conversation becomes l3_connected)."""

    def on_ticket_resolved(self, conn: psycopg.Connection[DictRow], ticket: dict[str, Any]) -> None:
        """The ticket was resolved (conversation -> feedback_pending; it must not bounce back by itself)."""

    def on_returned_to_bot(self, conn: psycopg.Connection[DictRow], ticket: dict[str, Any]) -> None:
        """An agent handed the conversation back: the bot is in charge again."""

    def on_ticket_cancelled(self, conn: psycopg.Connection[DictRow], ticket: dict[str, Any]) -> None:
        """The ticket was cancelled. For an ``approval`` ticket the waiting process ends too, in this transaction,
        and the customer is told (unless they asked not to be contacted). Raises :class:`DeliveryUnavailable` when
        nothing can end it (the cancel is then refused: an approval must not close while its process waits)."""

    def on_ticket_requeued(self, conn: psycopg.Connection[DictRow], ticket: dict[str, Any]) -> None:
        """A claimed ticket went back to the queue (released, lease expired, transferred, agent disabled)."""

    def on_approval_decided(self, conn: psycopg.Connection[DictRow], ticket: dict[str, Any], *, approved: bool,
                            approver: str, reason: str | None = None) -> dict[str, Any] | None:
        """An approver approved or rejected an ``approval`` ticket: the waiting process resumes in this
        transaction (and tells the customer). Raises :class:`DeliveryUnavailable` when nothing can resume it."""

    def send_to_customer(self, conn: psycopg.Connection[DictRow], ticket: dict[str, Any], *, text: str,
                         sender: str, agent_id: str | None) -> dict[str, Any]:
        """Store ``text`` in the transcript and queue it for delivery on the conversation's channel.

        ``sender`` is "agent" (agent message, approved or edited L2 draft). Returns ids of what was
        stored. Raises :class:`CustomerUnreachable` or :class:`DeliveryUnavailable`.
        """

    def reveal_value(self, conn: psycopg.Connection[DictRow], ticket: dict[str, Any], *, message_id: int,
                     start: int, end: int) -> str:
        """The original of one masked value: characters ``start:end`` of message ``message_id`` of the ticket's
        conversation, only if the detector still finds a personal value exactly there (never any other text).

        handoff stores the agent view masked, so only the conversation side holds the original. Raises
        :class:`OriginalGone` (unknown or erased message, no personal value at that span) or
        :class:`DeliveryUnavailable` (no conversation side).
        """


@runtime_checkable
class FlowPort(Protocol):
    """Optional methods of a conversation port whose side runs workflows: a person finishes an action a flow
    stopped at (e.g. a change of address waiting for the customer's yes). A port without them answers 503."""

    def pending_action(self, conn: psycopg.Connection[DictRow], ticket: dict[str, Any]) -> dict[str, Any] | None:
        """``{instance_id, workflow, step, tool, arguments, summary, editable, lang}`` or None (arguments raw)."""

    def complete_pending(self, conn: psycopg.Connection[DictRow], ticket: dict[str, Any], *, instance_id: str,
                         arguments: dict[str, Any], actor: str) -> dict[str, Any]:
        """Confirm it with the changed ``arguments``, in this transaction, the tools running for ``actor``:
        ``{done, outcome, workflow, reply, tools: [{step, status}]}``; ``done`` False when nothing waits any
        more. Raises ValueError for a value the flow refuses, DeliveryUnavailable when nothing can run it."""


class NullConversationPort:
    """For running handoff on its own (no conversation side): state changes are ignored and
    customer messages are refused, never silently dropped."""

    def before_ticket_change(self, conn: Conn, conversation_id: Any) -> None:
        return None

    def claim_sql(self) -> str | None:
        return None

    def on_ticket_claimed(self, conn: Conn, ticket: dict[str, Any]) -> None:
        return None

    def on_ticket_resolved(self, conn: Conn, ticket: dict[str, Any]) -> None:
        return None

    def on_returned_to_bot(self, conn: Conn, ticket: dict[str, Any]) -> None:
        return None

    def on_ticket_cancelled(self, conn: Conn, ticket: dict[str, Any]) -> None:
        return None

    def on_ticket_requeued(self, conn: Conn, ticket: dict[str, Any]) -> None:
        return None

    def on_approval_decided(self, conn: Conn, ticket: dict[str, Any], *, approved: bool, approver: str,
                            reason: str | None = None) -> dict[str, Any] | None:
        raise DeliveryUnavailable("no conversation port configured: an approval cannot be applied")

    def send_to_customer(self, conn: Conn, ticket: dict[str, Any], *, text: str, sender: str,
                         agent_id: str | None) -> dict[str, Any]:
        raise DeliveryUnavailable("no conversation port configured: cannot deliver a message to the customer")

    def reveal_value(self, conn: Conn, ticket: dict[str, Any], *, message_id: int, start: int, end: int) -> str:
        raise DeliveryUnavailable("no conversation port configured: the original of a masked value cannot be read")
