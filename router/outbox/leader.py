"""The dispatcher as a leader-elected background loop: any pod may run it, one at a time does.

Leadership is a session-level Postgres advisory lock held on a dedicated connection: when the
pod dies or its connection drops, Postgres releases the lock and another pod's loop takes it on
its next try. One leader means the per-channel rate limits hold for the whole deployment.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import psycopg

from router.db.errors import DatabaseUnavailable

log = logging.getLogger(__name__)

LEADER_LOCK_KEY = 0x5357_4F42  # "SWOB": the outbox dispatcher's leadership


class DispatcherLoop:
    def __init__(self, dsn: str, dispatcher, poll_seconds: float = 0.5, retry_leader_seconds: float = 2.0,
                 lock_key: int = LEADER_LOCK_KEY):
        self.dsn = dsn
        self.dispatcher = dispatcher
        self.poll_seconds = poll_seconds
        self.retry_leader_seconds = retry_leader_seconds
        self.lock_key = lock_key
        self.is_leader = False
        self.totals: Counter = Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="outbox-dispatcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def run(self) -> None:
        """Until stopped: hold (or wait for) leadership and deliver due rows."""
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, application_name="switchboard-dispatcher") as conn:
                    self._lead(conn)
            except (psycopg.Error, DatabaseUnavailable) as exc:
                if self.is_leader:
                    log.warning("dispatcher lost its database connection: %s", exc)
                self.is_leader = False
                self._stop.wait(self.retry_leader_seconds)
            except Exception:  # noqa: BLE001 - the loop must survive anything a batch throws
                log.exception("dispatcher loop error")
                self.is_leader = False
                self._stop.wait(self.retry_leader_seconds)
        self.is_leader = False

    def _lead(self, conn: psycopg.Connection) -> None:
        while not self._stop.is_set():
            if not self.is_leader:
                got = conn.execute("SELECT pg_try_advisory_lock(%s)", (self.lock_key,)).fetchone()
                self.is_leader = bool(got and got[0])
                if not self.is_leader:
                    self._stop.wait(self.retry_leader_seconds)
                    continue
                log.info("this process now runs the outbox dispatcher")
            conn.execute("SELECT 1")  # the lock lives as long as this connection: check it is alive
            counts = self.dispatcher.run_once()
            self.totals.update(counts)
            if not counts:
                self._stop.wait(self.poll_seconds)
        if self.is_leader:
            conn.execute("SELECT pg_advisory_unlock(%s)", (self.lock_key,))
            self.is_leader = False

    def __repr__(self) -> str:
        return f"DispatcherLoop(leader={self.is_leader}, totals={dict(self.totals)})"


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
