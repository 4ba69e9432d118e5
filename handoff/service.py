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

:class:`HandoffService` is the one object callers hold; its commands (every change to a ticket) are
in :mod:`handoff.commands`, its queries (lists, stats, audit trails) in :mod:`handoff.queries`, their
SQL next to the ticket model in :mod:`handoff.tickets`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import DictRow

from handoff import tickets as T
from handoff.commands import SWEEP_LOCK_KEY, TicketCommands
from handoff.config import HandoffConfig
from handoff.desk import DeskCommands
from handoff.events import EventHub
from handoff.models import Agent
from handoff.ports import ConversationPort, NullConversationPort
from handoff.queries import TicketQueries

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["SWEEP_LOCK_KEY", "HandoffService", "MetricsHook"]

log = logging.getLogger(__name__)

MetricsHook = Callable[[str, dict[str, str], float], None]


class HandoffService(TicketCommands, TicketQueries, DeskCommands):
    """The queue: commands and queries over one pool, one port to the conversations, one config."""

    def __init__(self, pool: ConnectionPool[Any], port: ConversationPort | None = None,
                 config: HandoffConfig | None = None, metrics_hook: MetricsHook | None = None):
        self.pool = pool
        self.port = port or NullConversationPort()
        self.config = config or HandoffConfig()
        self.metrics_hook = metrics_hook
        self._publish = T.Publisher(on_failure=self._publish_failed)
        self.hub = EventHub(pool.conninfo)

    #: called with each ticket an agent reads or claims (``get_ticket``, ``claim``, ``claim_next``): the router
    #: wires its loader of a package's session memory still ``pending`` here (router.turn.tiers.tickets
    #: MemoryOnDemand), so the memory is loaded for the tickets someone looks at, not for every ticket opened
    memory_wanted: Callable[[dict[str, Any]], Any] | None = None

    def _wants_memory(self, ticket: dict[str, Any] | None) -> None:
        if ticket is None or self.memory_wanted is None:   # the loader decides whether the package waits for it
            return
        try:
            self.memory_wanted(ticket)
        except Exception:  # noqa: BLE001 - the memory is a courtesy to the agent: the read or claim stands
            log.warning("the session memory of ticket %s could not be asked for", ticket.get("id"), exc_info=True)

    def get_ticket(self, agent: Agent, ticket_id: Any) -> dict[str, Any]:
        ticket = super().get_ticket(agent, ticket_id)
        self._wants_memory(ticket)
        return ticket

    def claim(self, agent: Agent, ticket_id: Any) -> dict[str, Any]:
        ticket = super().claim(agent, ticket_id)
        self._wants_memory(ticket)
        return ticket

    def claim_next(self, agent: Agent, *, kind: str | None = None, team: str | None = None) -> dict[str, Any] | None:
        ticket = super().claim_next(agent, kind=kind, team=team)
        self._wants_memory(ticket)
        return ticket

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

    @contextmanager
    def _read(self) -> Iterator[psycopg.Connection[DictRow]]:
        """A connection in autocommit for single statements: one round trip instead of BEGIN/query/COMMIT."""
        with self.pool.connection() as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                if not conn.closed:
                    conn.autocommit = False

    @contextmanager
    def _action(self) -> Iterator[tuple[psycopg.Connection[DictRow], list[str]]]:
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

