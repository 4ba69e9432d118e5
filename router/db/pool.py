"""The connection pool: one per process, created by the composition root and passed in.

:class:`Pool` is psycopg_pool's ``ConnectionPool`` with these changes for database outages:

- a connection is checked when it is handed out, and a dead one is discarded and the next taken at
  once, so after a restart no request gets a connection that the server already closed. The check
  looks first at the socket (:func:`_quiet`, no round trip): a server that ends a session says so (its
  FATAL goodbye, then the socket's end) and an idle connection has nothing else to read, so only a
  connection with something waiting is checked by an empty round trip
  (``ConnectionPool.check_connection``). A turn takes several connections (the look ahead's, the
  turn's, the audit's): a round trip each cost as much as a statement;
- reconnection attempts back off exponentially but never wait more than ``reconnect_max_delay``
  between tries (the library's delay doubles without a ceiling: after a 40 s outage it had reached
  16 s, and serving resumed 17 s after the database did);
- connection-level driver errors raised while a connection is held or acquired leave the pool as
  :class:`~router.db.errors.DatabaseUnavailable`, so nothing above this layer handles driver shapes;
- a *clean* restart is recognised (sessions ended with ``admin_shutdown``, or the server answering
  "the database system is shutting down / starting up"): for ``restart_window`` seconds reconnection
  polls every ``restart_poll`` seconds instead of backing off, because such a server is back within a
  second or so and every request waiting for a connection should get one the moment it is; and no
  connection made before the sign is handed out again (the server is ending all of them: a turn retried
  on one would lose it a second time).

``timeout`` (how long ``connection()`` waits for a free connection) is the fail-fast bound: the
gateway sets it to ``SWITCHBOARD_DB_ACQUIRE_TIMEOUT`` so ingress answers 503 within it; once connecting
has failed for over a second (and it is no clean restart) the wait is ``known_down_wait`` (0.5 s).

A unit of work whose connection dies under it is repeated on a fresh connection (:meth:`Pool.run`, and
the turn's own loop through :meth:`Pool.retry_wait`): once in any case, and again within the acquire
bound while the server itself is away. ``admin_shutdown`` (57P01) alone does not say which: a clean
stop and ``pg_terminate_backend`` send the same; the evidence is whether a fresh connection can be made
(refused or "shutting down / starting up": the server is restarting; made: only that session was ended,
and a second loss is answered 503).
"""

from __future__ import annotations

import select
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import monotonic
from typing import TypeVar

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

from router.db.errors import DatabaseUnavailable, classify

T = TypeVar("T")


def _configure(conn: psycopg.Connection) -> None:
    # The vector type exists only after the first migration; a pool opened earlier
    # (e.g. by the migrator's caller) must still work.
    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        pass
    conn.commit()


def _quiet(conn: psycopg.Connection) -> bool:
    """Nothing has arrived on an idle connection's socket since its last statement: the server has not ended
    the session (it would have sent its goodbye and closed). A poll of the socket, no round trip; anything
    waiting (a goodbye, the socket's end, a notice) is left for the full check to read."""
    if conn.closed or conn.broken:
        return False
    try:
        if not hasattr(select, "poll"):   # Windows: select() on the socket says the same
            readable, _, broken = select.select([conn.fileno()], [], [conn.fileno()], 0)
            return not (readable or broken)
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    except (OSError, ValueError, psycopg.Error):
        return False


#: what a server says while it shuts down or starts up on purpose (a connection attempt's FATAL message)
_RESTART_MESSAGES = ("the database system is shutting down", "the database system is starting up",
                     "the database system is not yet accepting connections")


def restart_sign(exc: BaseException) -> bool:
    """Whether ``exc`` says the server is going down or coming up on purpose (not a crash or a network fault)."""
    if getattr(exc, "sqlstate", None) in ("57P01", "57P03"):   # admin_shutdown, cannot_connect_now
        return True
    text = str(exc)
    return any(m in text for m in _RESTART_MESSAGES)


class _CappedBackoff(AttemptWithBackoff):
    """Reconnection delays: 0.1 s, doubling, at most ``cap()`` seconds (asked at every try)."""

    INITIAL_DELAY = 0.1

    def __init__(self, *, timeout: float, cap: Callable[[], float]):
        super().__init__(timeout=timeout)
        self.cap = cap

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, self.cap())


class Pool(ConnectionPool):
    def __init__(self, *args, reconnect_max_delay: float = 0.5, restart_poll: float = 0.1,
                 restart_window: float = 10.0, known_down_wait: float = 0.5, **kwargs):
        self.reconnect_max_delay = reconnect_max_delay
        self.restart_poll = restart_poll
        self.restart_window = restart_window
        self.restart_seen_at: float | None = None   # monotonic time of the last sign of a clean restart
        self.restarts_seen = 0
        self.known_down_wait = known_down_wait
        self.down_since: float | None = None         # first failed connection attempt since the last success
        self.connect_failed_at: float | None = None  # the last failed connection attempt
        super().__init__(*args, **kwargs)

    def note_restart(self) -> None:
        """A sign of a clean restart: poll for the server's return instead of backing off, for a while."""
        now = monotonic()
        if self.restart_seen_at is None or now - self.restart_seen_at > self.restart_window:
            self.restarts_seen += 1
        self.restart_seen_at = now

    def restarting(self) -> bool:
        return self.restart_seen_at is not None and monotonic() - self.restart_seen_at <= self.restart_window

    def reconnect_delay_cap(self) -> float:
        return min(self.restart_poll, self.reconnect_max_delay) if self.restarting() else self.reconnect_max_delay

    def _note(self, exc: BaseException, conn: psycopg.Connection | None = None) -> None:
        if not restart_sign(exc):
            return
        if conn is not None and self.restart_seen_at is not None and \
                getattr(conn, "_created_at", self.restart_seen_at) < self.restart_seen_at:
            # a session the known restart ended, found only now (e.g. idle in the pool): no news. Moving the
            # sign later would discard the good connections made since the server came back.
            return
        self.note_restart()

    def known_down(self) -> bool:
        """Connecting has failed for over a second, and it is no clean restart: waiting the full bound is futile."""
        since = self.down_since
        return since is not None and not self.restarting() and monotonic() - since > 1.0

    def _connect(self, timeout: float | None = None) -> psycopg.Connection:
        try:
            conn = super()._connect(timeout)
        except Exception as exc:
            self.connect_failed_at = monotonic()
            if self.down_since is None:
                self.down_since = self.connect_failed_at
            self._note(exc)
            raise
        self.down_since = None
        return conn

    def _add_connection(self, attempt, growing: bool = False) -> None:
        # psycopg_pool creates the first attempt here and passes it on to each rescheduled try
        if attempt is None:
            attempt = _CappedBackoff(timeout=self.reconnect_timeout, cap=self.reconnect_delay_cap)
        super()._add_connection(attempt, growing=growing)

    def getconn(self, timeout: float | None = None) -> psycopg.Connection:
        """A live connection within ``timeout``; dead ones found on the way are discarded (and replaced).

        While the server is known to be down (and not restarting cleanly) the wait is cut to
        ``known_down_wait``: the answer is the same 503, sooner. During a clean restart requests wait the
        full bound, which a restart of about a second fits in.
        """
        wait = self.timeout if timeout is None else timeout
        if self.known_down():
            wait = min(wait, self.known_down_wait)
        deadline = monotonic() + wait
        while True:
            left = deadline - monotonic()
            try:
                conn = super().getconn(max(left, 0.001))
            except Exception as exc:
                raise classify(exc) or exc from exc
            if self.restart_seen_at is not None and getattr(conn, "_created_at", self.restart_seen_at) < \
                    self.restart_seen_at:
                # made before a clean shutdown began: the server is ending every such session, and one that
                # still answers the check now would die under the turn a moment later
                conn.close()
                self.putconn(conn)
                continue
            try:
                if not _quiet(conn):
                    ConnectionPool.check_connection(conn)
            except Exception as exc:  # noqa: BLE001 - dead: give it back (the pool discards and replaces it)
                self._note(exc, conn)
                self.putconn(conn)
                if monotonic() >= deadline:
                    raise DatabaseUnavailable("pool_timeout", "no live connection") from None
                continue
            return conn

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection]:
        conn = self.getconn(timeout)
        try:
            with conn:
                yield conn
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            mapped = classify(exc, conn)
            if mapped is None:
                raise
            self._note(exc, conn)
            raise mapped from exc
        finally:
            self.putconn(conn)

    def server_away(self, since: float) -> bool:
        """Whether the server itself is away, not only one session: a connection attempt failed after
        ``since``, or one made now fails (a stop or restart refuses or answers "shutting down"; after
        ``pg_terminate_backend`` the server still accepts)."""
        failed = self.connect_failed_at
        if failed is not None and failed >= since:
            return True
        try:
            self._connect(timeout=1.0).close()
        except Exception:  # noqa: BLE001 - any failure to connect is the evidence asked for
            return True
        return False

    def retry_wait(self, exc: DatabaseUnavailable, *, started: float, losses: int) -> float | None:
        """How long the next attempt of a unit of work may wait for a connection, or None: give up (503).

        ``started``: when the work arrived (the 503 still comes within about one acquire bound of it);
        ``losses``: how many attempts lost their connection so far. The first loss is retried at once (a
        fresh connection may work now); later ones only while time is left and the server has been away
        since the work arrived (a clean restart: requests wait for it within the bound).
        """
        if not exc.retryable:
            return None
        left = started + self.timeout + 0.25 - monotonic()
        if losses <= 1:
            return max(0.3, left)
        if left < 0.05 or not self.server_away(started):
            return None
        return left

    def run(self, work: Callable[[psycopg.Connection], T], timeout: float | None = None, *,
            autocommit: bool = False) -> T:
        """``work(conn)`` in one transaction, repeated on a fresh connection when the connection died under it.

        For idempotent units of work (reads, upserts, inserts that ignore a conflict): a repeat after a
        lost commit finds its own row. ``autocommit``: each statement commits on its own (one statement of
        work needs no BEGIN/COMMIT round trips); the connection goes back to the pool as it came.
        Raises :class:`DatabaseUnavailable` as :meth:`connection` does.
        """
        started = monotonic()
        losses = 0
        wait = timeout
        while True:
            try:
                with self.connection(wait) as conn:
                    if not autocommit:
                        return work(conn)
                    conn.autocommit = True
                    try:
                        return work(conn)
                    finally:
                        if not conn.closed:
                            conn.autocommit = False
            except DatabaseUnavailable as exc:
                losses += 1
                wait = self.retry_wait(exc, started=started, losses=losses)
                if wait is None:
                    raise


def open_pool(dsn: str, *, min_size: int = 1, max_size: int = 10, name: str = "switchboard",
              acquire_timeout: float = 30.0, reconnect_max_delay: float = 0.5,
              max_lifetime: float = 30 * 60.0, reconnect_timeout: float = 5 * 60.0) -> Pool:
    """Open a pool of dict-row connections with pgvector types registered.

    ``acquire_timeout``: how long ``connection()`` waits for a connection before raising
    :class:`DatabaseUnavailable`; ``max_lifetime``: connections are replaced after this long (with
    jitter), so a server-side change (failover, config) reaches every connection eventually.
    """
    min_size = min(min_size, max_size)
    pool = Pool(
        dsn,
        min_size=1,           # opened on one connection (fail fast), then filled to min_size in the background
        max_size=max_size,
        kwargs={"row_factory": dict_row},
        configure=_configure,
        name=name,
        open=False,
        timeout=acquire_timeout,
        max_lifetime=max_lifetime,
        reconnect_timeout=reconnect_timeout,
        reconnect_max_delay=reconnect_max_delay,
    )
    try:
        pool.open(wait=True, timeout=30)
    except PoolTimeout as exc:
        pool.close()
        raise DatabaseUnavailable("connect_failed", "the pool could not open") from exc
    if min_size > 1:
        pool.resize(min_size, max_size)   # psycopg_pool opens the rest without blocking the start
    return pool
