"""The inbound queue: messages a channel was told "received" before their turn committed.

WeChat waits 5 s for an answer and never retries one that said ``success``. When a turn outlasts
the passive-reply budget the webhook must answer anyway, so it first writes the message here (one
small insert) and only then says ``success``; if the insert fails the channel gets a 503 and
retries. The turn goes on in the background; whether it commits or fails, the :class:`InboundWorker`
later runs the held message through the gateway again. Routing is idempotent on the channel's
message id, so for a turn that did commit this is a cheap replay that makes sure its reply is in the
outbox; for one that failed it is the turn itself, and the reply goes out through the outbox (the
customer-service API). Rows are kept (status ``done``) as the record of what was held.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from router.channels.base import ParsedMessage, Route
from router.schemas import InboundMessage

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 50   # then the row stays, status 'failed', for an operator (never deleted)


def hold(pool, channel: str, pm: ParsedMessage, *, retry_after: float) -> None:
    """Store the message durably (committed on return); the worker picks it up after ``retry_after`` s.

    Repeated on a fresh connection if the session dies (``Pool.run``): the conflict clause makes it harmless.
    """
    params = (channel, pm.message.message_external_id, pm.message.model_dump_json(),
              json.dumps(dataclasses.asdict(pm.route), ensure_ascii=False, default=str), retry_after)
    pool.run(lambda conn: conn.execute(
        """
        INSERT INTO inbound_queue (channel, external_id, message, route, next_attempt_at)
        VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s))
        ON CONFLICT (channel, external_id) DO NOTHING
        """,
        params,
    ))


def _parsed(row: dict[str, Any]) -> ParsedMessage:
    return ParsedMessage(InboundMessage.model_validate(row["message"]), Route(**row["route"]))


class InboundWorker:
    """Background loop finishing held messages; ``process(channel, parsed)`` routes one (the gateway).

    Rows are claimed with ``FOR UPDATE SKIP LOCKED`` and leased by pushing ``next_attempt_at``
    forward, so several processes may run the loop; a failure backs off (doubling, capped).
    """

    def __init__(self, pool, process: Callable[[str, ParsedMessage], Any], *, poll_seconds: float = 1.0,
                 lease_seconds: float = 30.0, backoff_max_seconds: float = 60.0, batch: int = 20):
        self.pool = pool
        self.process = process
        self.poll_seconds = poll_seconds
        self.lease_seconds = lease_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.batch = batch
        self.finished = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> InboundWorker:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="inbound-queue", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                done = self.run_once()
            except Exception as exc:  # noqa: BLE001 - the database may be away: try again next tick
                log.warning("inbound queue: %s", exc)
                done = 0
            if not done:
                self._stop.wait(self.poll_seconds)

    def _claim(self) -> list[dict[str, Any]]:
        with self.pool.connection() as conn:
            return conn.execute(
                """
                UPDATE inbound_queue q SET attempts = q.attempts + 1,
                       next_attempt_at = now() + make_interval(secs => %s)
                 WHERE q.id IN (SELECT id FROM inbound_queue
                                 WHERE status = 'pending' AND next_attempt_at <= now()
                                 ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
                RETURNING q.id, q.channel, q.message, q.route, q.attempts
                """,
                (self.lease_seconds, self.batch),
            ).fetchall()

    def run_once(self) -> int:
        """Route the due held messages; returns how many finished."""
        finished = 0
        for row in self._claim():
            try:
                self.process(row["channel"], _parsed(row))
            except Exception as exc:  # noqa: BLE001 - kept and retried; the type only (no message text)
                failed = row["attempts"] >= MAX_ATTEMPTS
                delay = min(self.backoff_max_seconds, 0.5 * 2 ** min(row["attempts"], 12))
                (log.error if failed else log.warning)(
                    "inbound queue: held message %s not routed (attempt %s): %s",
                    row["id"], row["attempts"], type(exc).__name__)
                try:
                    with self.pool.connection() as conn:
                        conn.execute(
                            "UPDATE inbound_queue SET last_error = %s, status = %s, "
                            "next_attempt_at = now() + make_interval(secs => %s) WHERE id = %s",
                            (type(exc).__name__, "failed" if failed else "pending", delay, row["id"]))
                except Exception:  # noqa: BLE001 - the lease expires and the row is retried anyway
                    pass
                continue
            with self.pool.connection() as conn:
                conn.execute("UPDATE inbound_queue SET status = 'done', finished_at = now(), last_error = NULL "
                             "WHERE id = %s", (row["id"],))
            finished += 1
        self.finished += finished
        return finished
