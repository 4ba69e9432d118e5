"""One typed error for "the database cannot be reached right now".

Everything above the db layer sees :class:`DatabaseUnavailable` instead of the driver's many
shapes of a lost connection (``OperationalError`` without a SQLSTATE, ``AdminShutdown`` during a
restart, ``PoolTimeout`` while the server is down, refused sockets). Ingress answers it with 503 and
``Retry-After``; the turn retries once on a fresh connection when a connection died under it.
Errors that are about the statement, not the connection (a deadlock, a cancelled query, a
constraint) pass through unchanged.
"""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolTimeout, TooManyRequests

#: SQLSTATEs that mean the session is gone or could not start (class 08, and the server going away)
_CONNECTION_STATES = {"57P01", "57P02", "57P03", "53300"}

#: the bounded set of causes (a metric label)
CAUSES = ("pool_timeout", "connection_lost", "server_shutdown", "connect_failed", "deadline")


class DatabaseUnavailable(Exception):
    """The database is unreachable or the pool could not hand out a connection in time.

    ``cause`` is one of :data:`CAUSES` (``deadline``: the server ended a transaction that waited too long between
    statements, router.turn.pipeline's turn deadline); ``retryable`` says whether repeating the whole unit of work
    on a fresh connection may succeed at once (a connection died under it) rather than only later
    (nothing could be acquired within the wait bound).
    """

    def __init__(self, cause: str, detail: str = ""):
        super().__init__(f"database unavailable ({cause})" + (f": {detail}" if detail else ""))
        self.cause = cause
        self.retryable = cause in ("connection_lost", "server_shutdown", "deadline")


def classify(exc: BaseException, conn: psycopg.Connection | None = None) -> DatabaseUnavailable | None:
    """The :class:`DatabaseUnavailable` an exception stands for, or None when it is not connection-level."""
    if isinstance(exc, DatabaseUnavailable):
        return exc
    if isinstance(exc, PoolTimeout | TooManyRequests):
        return DatabaseUnavailable("pool_timeout", type(exc).__name__)
    if isinstance(exc, psycopg.Error) and getattr(exc, "sqlstate", None) == "25P03":
        # the server ended a transaction that waited past its deadline (a stuck turn); the session is gone
        return DatabaseUnavailable("deadline", "25P03")
    if isinstance(exc, psycopg.OperationalError):
        state = getattr(exc, "sqlstate", None)
        if state in ("57P01", "57P02"):
            return DatabaseUnavailable("server_shutdown", state)
        if state == "57P03" or state == "53300" or (state or "").startswith("08"):
            return DatabaseUnavailable("connect_failed" if conn is None else "connection_lost", state or "")
        if state is None:   # raised by the client: the socket closed, refused, or timed out
            return DatabaseUnavailable("connect_failed" if conn is None else "connection_lost", type(exc).__name__)
        return None
    if isinstance(exc, psycopg.InterfaceError) and conn is not None and conn.closed:
        return DatabaseUnavailable("connection_lost", type(exc).__name__)
    return None
