"""The outbox dispatcher: claim due rows, deliver them through the channel senders, record the outcome.

Claiming is one statement: due rows (pending and due, or ``sending`` whose lease expired after a
crash), at most the channel's rate-limit budget per channel, only the oldest undelivered row of
each conversation (messages arrive in order), locked with ``FOR UPDATE SKIP LOCKED`` and marked
``sending`` with a lease. Delivery happens outside any transaction; each outcome is recorded in its
own small transaction with an ``outbox_attempts`` row: delivered, retry (exponential backoff with
jitter, or the channel's Retry-After), or dead (with the reason) after ``max_attempts`` or a
failure no retry can fix. Delivery is at-least-once: a crash between the API call and the record
re-sends after the lease.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from router.channels.delivery import Delivery, DeliveryError, Sender, SendResult
from router.channels.registry import build_senders, channel_label
from router.telemetry.logs import redact, redact_obj
from text.personal import mask_clip
from router.outbox.ratelimit import ChannelLimits

log = logging.getLogger(__name__)

_CLAIM = """
WITH candidates AS (
    SELECT c.id FROM (
        SELECT o.id, o.channel, o.next_attempt_at,
               row_number() OVER (PARTITION BY o.channel ORDER BY o.next_attempt_at, o.id) AS rn
          FROM outbox o
         WHERE ((o.status = 'pending' AND o.next_attempt_at <= now())
                OR (o.status = 'sending' AND o.lease_until < now()))
           AND (%(channels)s::text[] IS NULL OR o.channel = ANY(%(channels)s::text[]))
           AND NOT EXISTS (
                SELECT 1 FROM outbox e
                 WHERE e.conversation_id = o.conversation_id AND e.id < o.id
                   AND e.status IN ('pending', 'sending'))
           -- a WeChat turn's reply first waits for the passive-reply window of its webhook
           AND NOT (o.channel = 'wechat' AND o.kind <> 'agent_message' AND o.attempts = 0
                    AND o.created_at > now() - make_interval(secs => %(passive)s))
    ) c
     WHERE c.rn <= COALESCE((%(budgets)s::jsonb ->> c.channel)::int, %(default_budget)s)
     ORDER BY c.next_attempt_at, c.id
     LIMIT %(batch)s
), locked AS (
    SELECT o.id FROM outbox o
     WHERE o.id IN (SELECT id FROM candidates)
       AND ((o.status = 'pending' AND o.next_attempt_at <= now())
            OR (o.status = 'sending' AND o.lease_until < now()))
       FOR UPDATE SKIP LOCKED
)
UPDATE outbox o
   SET status = 'sending', attempts = o.attempts + 1,
       lease_until = now() + make_interval(secs => %(lease)s)
  FROM locked
 WHERE o.id = locked.id
RETURNING o.id, o.conversation_id, o.channel, o.kind, o.payload, o.attempts
"""

_PARTS_SENT = "SELECT outbox_id, part, provider_message_id FROM outbox_parts WHERE outbox_id = ANY(%s)"

_ADDRESSES = """
SELECT c.id, c.external_id, c.customer_id, r.address
  FROM conversations c
  LEFT JOIN channel_routes r ON r.channel = c.channel AND r.conversation_external_id = c.external_id
 WHERE c.id = ANY(%s)
"""


@dataclass
class DispatchConfig:
    max_attempts: int = 8
    backoff_base: float = 2.0
    backoff_max: float = 900.0
    lease_seconds: float = 60.0
    batch: int = 50
    concurrency: int = 8
    passive_window: float = 4.0

    @classmethod
    def from_settings(cls, settings) -> DispatchConfig:
        return cls(max_attempts=settings.outbox_max_attempts, backoff_base=settings.outbox_backoff_base_seconds,
                   backoff_max=settings.outbox_backoff_max_seconds, lease_seconds=settings.outbox_lease_seconds,
                   batch=settings.outbox_batch, concurrency=settings.outbox_concurrency,
                   passive_window=settings.wechat_passive_reply_seconds + 1.0)


def backoff_seconds(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with "equal jitter": half the delay fixed, half random."""
    delay = min(cap, base * (2 ** max(0, attempt - 1)))
    r = (rng or random).random()
    return delay / 2 + r * delay / 2


class Dispatcher:
    def __init__(self, pool, senders: dict[str, Sender], limits: ChannelLimits, config: DispatchConfig,
                 metrics=None, channels: list[str] | None = None):
        self.pool = pool
        self.senders = senders
        self.limits = limits
        self.config = config
        self.metrics = metrics
        self.channels = channels          # None: every channel
        self.worker_id = uuid.uuid4().hex[:8]
        self._executor = ThreadPoolExecutor(max_workers=max(1, config.concurrency), thread_name_prefix="outbox")

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    # -- claim -----------------------------------------------------------------------------------

    def claim(self) -> list[Delivery]:
        known = set(self.senders) | self.limits.channels()
        budgets = self.limits.budgets(sorted(known))
        with self.pool.connection() as conn, conn.transaction():
            rows = conn.execute(_CLAIM, {
                "channels": self.channels, "passive": self.config.passive_window,
                "budgets": json.dumps(budgets), "default_budget": self.config.batch,
                "batch": self.config.batch, "lease": self.config.lease_seconds,
            }).fetchall()
            conv_ids = list({r["conversation_id"] for r in rows if r["conversation_id"] is not None})
            convs = {c["id"]: c for c in conn.execute(_ADDRESSES, (conv_ids,)).fetchall()} if conv_ids else {}
            # a retried (or requeued) long reply resumes after the parts an earlier attempt delivered
            sent: dict[int, dict[int, str | None]] = {}
            if rows:
                for p in conn.execute(_PARTS_SENT, ([r["id"] for r in rows],)).fetchall():
                    sent.setdefault(p["outbox_id"], {})[p["part"]] = p["provider_message_id"]
        taken = Counter(r["channel"] for r in rows)
        for channel, n in taken.items():
            if channel in known:
                self.limits.bucket(channel).take(n)
        deliveries = []
        for r in sorted(rows, key=lambda r: r["id"]):
            conv = convs.get(r["conversation_id"]) or {}
            payload = r["payload"] if isinstance(r["payload"], dict) else {}
            address = dict(conv.get("address") or {})
            if isinstance(payload.get("to"), dict):   # an explicit recipient (rows without a conversation)
                address.update(payload["to"])
            deliveries.append(Delivery(
                outbox_id=r["id"], channel=r["channel"], kind=r["kind"], payload=payload, address=address,
                attempt=r["attempts"], conversation_external_id=conv.get("external_id"),
                customer_id=conv.get("customer_id"), parts_sent=sent.get(r["id"], {}), on_part=self._record_part,
            ))
        return deliveries

    # -- deliver ---------------------------------------------------------------------------------

    def _send(self, delivery: Delivery) -> tuple[Delivery, SendResult | None, DeliveryError | None, float]:
        t0 = time.perf_counter()
        sender = self.senders.get(delivery.channel)
        try:
            if sender is None:
                raise DeliveryError(f"no sender for channel {delivery.channel!r}", retryable=False)
            ok, why = sender.configured()
            if not ok:
                raise DeliveryError(f"the {delivery.channel} sender is not configured: {why}", retryable=False)
            result = sender.send(delivery)
            return delivery, result, None, time.perf_counter() - t0
        except DeliveryError as exc:
            return delivery, None, exc, time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - a bug in a sender must not stop the loop
            log.exception("sender %s failed", delivery.channel)
            return delivery, None, DeliveryError(f"{type(exc).__name__}: {exc}", retryable=True), \
                time.perf_counter() - t0

    def run_once(self) -> Counter:
        """Claim one batch, deliver it, record every outcome; returns counts by outcome."""
        deliveries = self.claim()
        counts: Counter = Counter()
        if not deliveries:
            return counts
        for delivery, result, error, seconds in self._executor.map(self._send, deliveries):
            outcome = self._record(delivery, result, error, seconds)
            counts[outcome] += 1
            if self.metrics is not None:
                self.metrics.outbox.labels(channel_label(delivery.channel), outcome).inc()
        return counts

    def drain(self, max_seconds: float | None = None, progress=None) -> Counter:
        """Deliver until nothing is due (retries scheduled later are left for later)."""
        total: Counter = Counter()
        t0 = time.monotonic()
        while True:
            counts = self.run_once()
            total.update(counts)
            if progress is not None and counts:
                progress.update(sum(counts.values()))
            if not counts:
                if not self._rate_limited_backlog():
                    return total
                time.sleep(0.05)
            if max_seconds is not None and time.monotonic() - t0 > max_seconds:
                return total

    def _rate_limited_backlog(self) -> bool:
        """Due rows exist that the rate limits held back this round."""
        with self.pool.connection() as conn:
            row = conn.execute(
                """SELECT count(*) AS n FROM outbox
                    WHERE status = 'pending' AND next_attempt_at <= now()
                      AND (%s::text[] IS NULL OR channel = ANY(%s::text[]))""",
                (self.channels, self.channels),
            ).fetchone()
        return row["n"] > 0 and self.limits.any_exhausted()

    # -- record ----------------------------------------------------------------------------------

    def _record_part(self, outbox_id: int, part: int, parts: int, provider_message_id: str | None) -> None:
        """One delivered part of a long text, committed before the next part is sent."""
        with self.pool.connection() as conn:
            conn.execute(
                """INSERT INTO outbox_parts (outbox_id, part, parts, provider_message_id) VALUES (%s, %s, %s, %s)
                   ON CONFLICT (outbox_id, part) DO NOTHING""",
                (outbox_id, part, parts, provider_message_id))

    def _record(self, d: Delivery, result: SendResult | None, error: DeliveryError | None, seconds: float) -> str:
        ms = round(seconds * 1000, 2)
        with self.pool.connection() as conn, conn.transaction():
            if error is None:
                assert result is not None       # a send without an error returned its result
                outcome = "skipped" if result.skipped else "delivered"
                conn.execute(
                    """UPDATE outbox SET status = 'delivered', delivered_at = now(), lease_until = NULL,
                              provider_message_id = %s, last_error = NULL
                        WHERE id = %s AND status = 'sending'""",
                    (result.provider_message_id, d.outbox_id))
                conn.execute(
                    """INSERT INTO outbox_attempts (outbox_id, attempt, outcome, http_status, error, duration_ms)
                       VALUES (%s, %s, %s, %s, %s, %s)""",
                    (d.outbox_id, d.attempt, outcome, result.http_status, result.note, ms))
                return outcome
            # a third party's error body echoes the message: masked whole, then cut (never half a token)
            reason = mask_clip(error.reason or "", 1000, render=lambda t, allow=(): redact(t)) or ""
            if not error.retryable or d.attempt >= self.config.max_attempts:
                final = reason if not error.retryable else f"gave up after {d.attempt} attempts: {reason}"
                conn.execute(
                    """UPDATE outbox SET status = 'dead', dead_at = now(), lease_until = NULL, last_error = %s
                        WHERE id = %s AND status = 'sending'""", (final, d.outbox_id))
                conn.execute(
                    """INSERT INTO outbox_attempts (outbox_id, attempt, outcome, http_status, error, duration_ms)
                       VALUES (%s, %s, 'dead', %s, %s, %s)""",
                    (d.outbox_id, d.attempt, error.http_status, final, ms))
                log.warning("outbox %s dead-lettered (%s): %s", d.outbox_id, d.channel, final)
                return "dead"
            delay = backoff_seconds(d.attempt, self.config.backoff_base, self.config.backoff_max)
            if error.retry_after is not None:
                delay = min(self.config.backoff_max, max(delay, error.retry_after))
            conn.execute(
                """UPDATE outbox SET status = 'pending', lease_until = NULL, last_error = %s,
                          next_attempt_at = now() + make_interval(secs => %s)
                    WHERE id = %s AND status = 'sending'""", (reason, delay, d.outbox_id))
            conn.execute(
                """INSERT INTO outbox_attempts (outbox_id, attempt, outcome, http_status, error, duration_ms)
                   VALUES (%s, %s, 'retry', %s, %s, %s)""",
                (d.outbox_id, d.attempt, error.http_status, reason, ms))
            return "retry"


def build_dispatcher(settings, pool, metrics=None, channels: list[str] | None = None,
                     client: httpx.Client | None = None) -> Dispatcher:
    # httpx logs every request URL at INFO; channel URLs carry credentials (Telegram's bot token in
    # the path, WeChat's access token and app secret in the query): keep them out of the logs
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger("httpx").level))
    client = client or httpx.Client(timeout=settings.outbox_http_timeout_seconds,
                                    headers={"User-Agent": "switchboard-dispatcher"})
    limits = ChannelLimits(settings.outbox_rate_limits)
    return Dispatcher(pool, build_senders(settings, client), limits, DispatchConfig.from_settings(settings),
                      metrics=metrics, channels=channels)


def outbox_status(conn) -> dict[str, Any]:
    """Counts by channel and status, the oldest due row's age, the latest dead letters, and the
    channels' receipts: delivered messages by their furthest receipt, and the latest failures."""
    counts = conn.execute(
        "SELECT channel, status, count(*) AS n FROM outbox GROUP BY channel, status ORDER BY channel, status"
    ).fetchall()
    oldest = conn.execute(
        """SELECT EXTRACT(EPOCH FROM now() - min(next_attempt_at)) AS age FROM outbox
            WHERE status = 'pending' AND next_attempt_at <= now()"""
    ).fetchone()["age"]
    dead = conn.execute(
        """SELECT id, channel, kind, attempts, last_error, dead_at FROM outbox
            WHERE status = 'dead' ORDER BY dead_at DESC NULLS LAST, id DESC LIMIT 10"""
    ).fetchall()
    receipts = conn.execute(
        """SELECT channel, receipt_status, count(*) AS n FROM outbox
            WHERE receipt_status IS NOT NULL GROUP BY channel, receipt_status ORDER BY channel, receipt_status"""
    ).fetchall()
    failed = conn.execute(
        """SELECT r.outbox_id AS id, o.channel, r.part, r.provider_message_id, r.error_code, r.error_title,
                  r.error_detail, r.status_at
             FROM outbox_receipts r JOIN outbox o ON o.id = r.outbox_id
            WHERE r.status = 'failed' ORDER BY r.id DESC LIMIT 10"""
    ).fetchall()
    by_channel: dict[str, dict[str, int]] = {}
    for row in counts:
        by_channel.setdefault(row["channel"], {})[row["status"]] = row["n"]
    by_receipt: dict[str, dict[str, int]] = {}
    for row in receipts:
        by_receipt.setdefault(row["channel"], {})[row["receipt_status"]] = row["n"]
    return {"by_channel": by_channel, "oldest_due_seconds": float(oldest) if oldest is not None else None,
            # rows written before errors were masked on the way in are masked on the way out
            "dead_letters": [redact_obj(dict(r)) for r in dead], "receipts": by_receipt,
            "failed_receipts": [redact_obj(dict(r)) for r in failed]}


def requeue_dead(conn, ids: list[int] | None = None, channel: str | None = None) -> int:
    """Give dead letters a fresh set of attempts (after fixing a token, a blocked number...)."""
    cur = conn.execute(
        """UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = now(), dead_at = NULL
            WHERE status = 'dead' AND (%s::bigint[] IS NULL OR id = ANY(%s::bigint[]))
              AND (%s::text IS NULL OR channel = %s)""",
        (ids, ids, channel, channel))
    return cur.rowcount
