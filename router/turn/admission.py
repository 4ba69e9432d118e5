"""Admission: whether a message may start a turn at all, decided before anything of it is stored.

Two bounds beside the per-customer quota of the harness (router.turn.guards), both configured with it in
the policy's ``harness.quota``:

- **concurrent turns** per customer, per integration key and per channel, in this process: a turn holds a
  pooled connection (and a message into a busy conversation waits for its lock holding one), so one
  customer or one key must not be able to hold them all. One more waits up to ``wait_seconds`` holding
  nothing (a short burst, a retried delivery), then is 429 with ``Retry-After: 1``.
- **quotas per integration key and overall**, in fixed windows counted in Postgres (``admission_counters``)
  so every process and pod shares them. Over either is 429 with Retry-After (the seconds left in the
  window). A message id already stored (a retry, a replay) is not counted again. A message refused by one
  scope may still have used a slot of another it passed (one statement counts both).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from router.problems import Problem
from router.schemas import InboundMessage

_COUNT = """
WITH fresh AS (
    SELECT NOT EXISTS (SELECT 1 FROM messages WHERE channel = %(channel)s AND external_id = %(mid)s) AS yes
), scopes AS (
    SELECT s.scope, s.lim, s.secs,
           to_timestamp(floor(extract(epoch FROM now()) / s.secs) * s.secs) AS window_start
      FROM unnest(%(scopes)s::text[], %(limits)s::int[], %(secs)s::int[]) AS s(scope, lim, secs)
), swept AS (
    DELETE FROM admission_counters
     WHERE ctid = ANY (ARRAY(SELECT ctid FROM admission_counters WHERE expires_at < now() LIMIT 10))
), counted AS (
    INSERT INTO admission_counters (scope, window_start, hits, max_hits, expires_at)
    SELECT s.scope, s.window_start, 1, s.lim, s.window_start + make_interval(secs => s.secs)
      FROM scopes s, fresh WHERE fresh.yes
    ON CONFLICT (scope, window_start) DO UPDATE SET hits = admission_counters.hits + 1
        WHERE admission_counters.hits < EXCLUDED.max_hits
    RETURNING scope
)
SELECT s.scope, (c.scope IS NOT NULL OR NOT f.yes) AS admitted,
       extract(epoch FROM s.window_start + make_interval(secs => s.secs) - now()) AS seconds_left,
       set_config('synchronous_commit', 'off', true) AS async_commit
  FROM scopes s CROSS JOIN fresh f LEFT JOIN counted c ON c.scope = s.scope
"""


def too_many(detail: str, retry_after: int) -> Problem:
    return Problem(429, f"{detail} Nothing was stored; retry after {retry_after} s.", title="Too Many Requests",
                   headers={"Retry-After": str(retry_after)}, retry_after=retry_after)


class Admission:
    """The caps and quotas of one gateway process (``quota``: router.turn.guards.QuotaConfig)."""

    def __init__(self, pool, quota, metrics=None):
        self.pool = pool
        self.quota = quota
        self.metrics = metrics
        self._free = threading.Condition()
        self._running: dict[tuple[str, str], int] = {}

    @contextmanager
    def admit(self, msg: InboundMessage) -> Iterator[None]:
        """Hold the message's slots for its turn; raise a 429 :class:`Problem` when it may not run now."""
        held = self._enter(msg)
        try:
            self._count(msg)
            yield
        finally:
            self._leave(held)

    # -- concurrent turns (this process) --

    def _slots(self, msg: InboundMessage) -> list[tuple[tuple[str, str], int, str]]:
        caps = self.quota.concurrent_turns
        slots = [(("customer", f"{msg.channel}\x1f{msg.customer_id}"), caps.per_customer, "this customer"),
                 (("channel", msg.channel), caps.per_channel, f"the {msg.channel} channel")]
        if msg.integration_key_id:
            slots.append((("key", str(msg.integration_key_id)), caps.per_key, "this integration key"))
        return [s for s in slots if s[1] is not None]

    def _enter(self, msg: InboundMessage) -> list[tuple[str, str]]:
        """Take a slot of each cap, waiting up to ``wait_seconds`` (holding no connection) for a full one."""
        slots = self._slots(msg)
        deadline = time.monotonic() + self.quota.concurrent_turns.wait_seconds
        with self._free:
            while True:
                full = next(((cap, who) for slot, cap, who in slots if self._running.get(slot, 0) >= cap), None)
                if full is None:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    self._refused("concurrent")
                    raise too_many(f"Too many messages at once: {full[1]} has {full[0]} being answered.", 1)
                self._free.wait(left)
            for slot, _, _ in slots:
                self._running[slot] = self._running.get(slot, 0) + 1
        return [slot for slot, _, _ in slots]

    def _leave(self, held: list[tuple[str, str]]) -> None:
        with self._free:
            for slot in held:
                n = self._running.get(slot, 0) - 1
                if n > 0:
                    self._running[slot] = n
                else:
                    self._running.pop(slot, None)
            self._free.notify_all()

    def running(self) -> int:
        """Turns holding a slot now (tests, diagnostics)."""
        with self._free:
            return sum(n for (kind, _), n in self._running.items() if kind == "channel")

    # -- quotas per key and overall (every process) --

    def _count(self, msg: InboundMessage) -> None:
        scopes: list[tuple[str, int, int, str]] = []
        total, per_key = self.quota.total, self.quota.per_key
        if total.max_messages is not None:
            scopes.append(("total", total.max_messages, total.window_seconds, "the gateway"))
        if per_key.max_messages is not None and msg.integration_key_id:
            scopes.append((f"key:{msg.integration_key_id}", per_key.max_messages, per_key.window_seconds,
                           "this integration key"))
        if not scopes:
            return
        params = {"channel": msg.channel, "mid": msg.message_external_id, "scopes": [s[0] for s in scopes],
                  "limits": [s[1] for s in scopes], "secs": [s[2] for s in scopes]}
        rows = self.pool.run(lambda conn: conn.execute(_COUNT, params).fetchall(), autocommit=True)
        refused = {r["scope"]: r for r in rows if not r["admitted"]}
        for scope, limit, secs, who in scopes:
            if scope in refused:
                self._refused("quota_total" if scope == "total" else "quota_key")
                wait = max(1, math.ceil(float(refused[scope]["seconds_left"])))
                raise too_many(f"Too many messages: {who} allows {limit} per {secs} s.", wait)

    def _refused(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.refused.labels(reason).inc()
