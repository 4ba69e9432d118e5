"""Kept session memory dropped in every gateway process when a customer's write succeeds in any of them.

A write that succeeds (a cancellation, a refund, a new address) makes what a process keeps of the customer's
shop data stale. The process that ran it drops its own copy at once; the flow's save tells the others through
Postgres (``NOTIFY`` on ``automation.workflows.store.MEMORY_STALE``, delivered at commit), and this loop, one
per process, drops theirs, so ``switchboard serve --workers N`` never offers a cancelled order as still paid
from another worker's copy. Notices missed while the connection was down are unknown: after a reconnect the
process drops everything it kept (the shop is asked again on the next flow).
"""

from __future__ import annotations

import logging
import threading

import psycopg

from automation.workflows import memory
from automation.workflows.store import MEMORY_STALE

log = logging.getLogger(__name__)


class StaleMemoryListener:
    """A daemon thread on its own connection: LISTEN, and drop the kept memory each notice names."""

    def __init__(self, dsn: str, retry_seconds: float = 2.0, wait_seconds: float = 1.0):
        self.dsn, self.retry_seconds, self.wait_seconds = dsn, retry_seconds, wait_seconds
        self.listening = threading.Event()          # set while LISTEN is active (tests wait on it)
        self.heard = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> StaleMemoryListener:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self.run, name="memory-stale-listener", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            if self.listening.is_set():
                self._wake()
            self._thread.join(timeout)
            self._thread = None

    def _wake(self) -> None:
        """An empty notice, so the loop sees it should stop now rather than at its next wait's end (a gateway's
        shutdown, and every test's, waited up to ``wait_seconds`` for it). Every process's listener hears it and
        drops nothing: an empty payload names no customer. On any error the loop still stops after its wait."""
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2,
                                 application_name="switchboard-memory") as conn:
                conn.execute("SELECT pg_notify(%s, '')", (MEMORY_STALE,))
        except psycopg.Error:
            pass

    def run(self) -> None:
        first = True
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, application_name="switchboard-memory") as conn:
                    conn.execute(f"LISTEN {MEMORY_STALE}")
                    if not first:
                        memory.CUSTOMERS.clear()    # what was said while we were away is unknown
                    first = False
                    self.listening.set()
                    while not self._stop.is_set():
                        for notice in conn.notifies(timeout=self.wait_seconds):
                            if self._stop.is_set():
                                break           # woken to stop (_wake): the wait is not waited out
                            self.heard += memory.stale_elsewhere(notice.payload)
            except psycopg.Error as exc:
                log.warning("kept session memory: lost the notice connection (%s); retrying", exc)
            except Exception:  # noqa: BLE001 - the loop must outlive anything one notice throws
                log.exception("kept session memory: notice loop error")
            self.listening.clear()
            self._stop.wait(self.retry_seconds)
