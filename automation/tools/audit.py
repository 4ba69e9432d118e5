"""The tool gateway's audit (``tool_calls``): writing a row per call, and reading them for a turn's trace and a
ticket's context package.

Rows are redacted when written; the readers return them as plain dicts, oldest first.
"""

from __future__ import annotations

import functools
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

log = logging.getLogger(__name__)

_COLUMNS = ("id, conversation_id, turn_id, purpose, tool, risk, caller_channel, caller_customer, input, output,"
            " status, error, latency_ms, attempts, idempotency_key, created_at, args_digest")

_INSERT = ("INSERT INTO tool_calls (id, conversation_id, turn_id, purpose, tool, risk, caller_channel,"
           " caller_customer, input, output, status, error, latency_ms, attempts, idempotency_key, created_at,"
           " args_digest) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")

_BATCH = 200            # rows per statement of the writer thread at most
_QUEUE_MAX = 20_000     # rows waiting at most; past that a read's row is dropped (and counted), never a write's
_CONNECT_TIMEOUT_S = 5


class AuditWriter:
    """Writes ``tool_calls`` rows on connections of its own, in one of two ways by what the row records.

    - **Durable** (``write``/``money`` tools whose call left the gateway): the row is inserted, redacted, with
      a synchronous commit, before ``Gateway.call`` returns, so no result of a business write is used before
      its audit is on disk. One dedicated connection (a prepared statement, autocommit: one round trip),
      behind a lock; when it breaks, the pool's connection is used for that row and a new one opened later.
    - **Batched** (reads, and every call refused before it left: denied, invalid input, rate limit, breaker
      open): the caller only snapshots the row (JSON text, so later changes to the result cannot alter it) and
      queues it; a writer thread redacts and inserts whatever has queued, at once (no timer: a lone row is
      written within a few milliseconds, rows arriving meanwhile share the next transaction), with
      ``synchronous_commit`` off (committed, on disk within the WAL writer's delay). A crash can lose the last
      few milliseconds of these rows; nothing they record changed the business system. ``flush()`` waits
      until every row queued before it is committed (the ticket's context package and tests read them),
      ``close()`` flushes and stops the thread.

    The row id and the call's time are made here, so ``call_id`` is known at once and rows sort by when the
    call happened, whichever way they were written.
    """

    def __init__(self, pool, redact_value: Callable[[Any], Any]):
        self._pool = pool
        self._conninfo = getattr(pool, "conninfo", None)
        self._redact_value = redact_value
        self._durable: psycopg.Connection | None = None
        self._durable_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue(maxsize=_QUEUE_MAX)
        self._done = threading.Condition()
        self._queued = 0        # rows handed to the thread
        self._handled = 0       # rows the thread has committed or given up on
        self._waiting: dict[str, int] = {}   # rows queued and not yet handled, per conversation
        self.dropped = 0        # rows lost (queue full, or the database refused a batch twice)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="tool-audit", daemon=True)
        self._thread.start()

    # --- the two ways in ------------------------------------------------------------------------------------

    @staticmethod
    def new_row(**fields) -> dict:
        return {"id": uuid.uuid4(), "created_at": datetime.now(UTC), "args_digest": None, **fields}

    def write_now(self, row: dict) -> str | None:
        """Insert ``row`` (raw input/output; redacted here) with a synchronous commit; its id, or None."""
        params = self._params(row, row["input"], row["output"])
        try:
            with self._durable_lock:
                try:
                    conn = self._durable_conn()
                    if conn is not None:
                        conn.execute(_INSERT, params, prepare=True)
                        return str(row["id"])
                except psycopg.Error:
                    self._close_durable()   # reopened on the next write; this row goes through the pool
            with self._pool.connection() as conn:
                conn.execute(_INSERT, params)
            return str(row["id"])
        except Exception as exc:  # noqa: BLE001 - the audit must never turn a real result into a crash
            log.warning("tool %s: audit row not written: %s", row.get("tool"), type(exc).__name__)
            return None

    def write_later(self, row: dict) -> str | None:
        """Queue ``row`` for the writer thread; its id (the row is committed within milliseconds)."""
        row = {**row, "input": _snapshot(row["input"]), "output": _snapshot(row["output"])}
        with self._done:
            if self._closed:
                return self.write_now({**row, "input": json.loads(row["input"]),
                                       "output": json.loads(row["output"]) if row["output"] else None})
            self._queued += 1
            self._wait_for(row, +1)
        try:
            self._queue.put_nowait(row)
        except queue.Full:
            self._handled_batch([row], dropped=True)
            log.warning("tool %s: audit queue full, row dropped", row.get("tool"))
            return None
        return str(row["id"])

    def flush(self, timeout: float = 5.0, conversation_id: Any = None) -> bool:
        """Wait until every row queued so far is committed (or given up on); False on timeout. With
        ``conversation_id``: only the rows of that conversation (none queued: at once, whatever others wait)."""
        deadline = time.monotonic() + timeout
        with self._done:
            target = self._queued
            conv = None if conversation_id is None else str(conversation_id)
            while (self._handled < target) if conv is None else self._waiting.get(conv, 0) > 0:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._done.wait(left)
        return True

    def close(self, timeout: float = 10.0) -> None:
        with self._done:
            if self._closed:
                return
            self._closed = True
        self._queue.put(None)
        self._thread.join(timeout)
        with self._durable_lock:
            self._close_durable()

    # --- internals --------------------------------------------------------------------------------------------

    def _params(self, row: dict, raw_input: Any, raw_output: Any) -> tuple:
        return (row["id"], row["conversation_id"], row["turn_id"], row["purpose"], row["tool"], row["risk"],
                row["caller_channel"], row["caller_customer"], Jsonb(self._redact_value(raw_input)),
                Jsonb(self._redact_value(raw_output)) if raw_output is not None else None, row["status"],
                row["error"], row["latency_ms"], row["attempts"], row["idempotency_key"], row["created_at"],
                row.get("args_digest"))

    def _durable_conn(self) -> psycopg.Connection | None:
        if self._conninfo is None:
            return None
        if self._durable is None or self._durable.closed:
            self._durable = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
        return self._durable

    def _close_durable(self) -> None:
        if self._durable is not None:
            try:
                self._durable.close()
            except Exception:  # noqa: BLE001
                pass
            self._durable = None

    def _run(self) -> None:
        conn: psycopg.Connection | None = None
        stop = False
        while not stop:
            first = self._queue.get()
            batch = []
            if first is None:
                stop = True
            else:
                batch.append(first)
            while len(batch) < _BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    continue
                batch.append(item)
            if not batch:
                continue
            try:
                params = [self._params(r, json.loads(r["input"]), json.loads(r["output"]) if r["output"] else None)
                          for r in batch]
            except Exception as exc:  # noqa: BLE001 - a redactor bug must not stop the thread
                log.warning("tool audit: %d rows not written: %s", len(batch), type(exc).__name__)
                self._handled_batch(batch, dropped=True)
                continue
            written = False
            for _ in range(2):   # a connection broken since the last batch gets one fresh try
                try:
                    if conn is None or conn.closed:
                        conn = self._relaxed_conn()
                    if conn is None:
                        with self._pool.connection() as pooled:
                            pooled.execute("SET LOCAL synchronous_commit TO OFF")
                            pooled.cursor().executemany(_INSERT, params)
                    else:
                        # the batch is one statement on the autocommit connection (atomic as it is): one round trip,
                        # no BEGIN and COMMIT around it
                        conn.execute(_insert_rows(len(params)), [v for p in params for v in p])
                    written = True
                    break
                except Exception as exc:  # noqa: BLE001 - logged; the gateway's calls go on
                    last = exc
                    if conn is not None:
                        try:
                            conn.close()
                        except Exception:  # noqa: BLE001
                            pass
                    conn = None
            if not written:
                log.warning("tool audit: %d rows not written: %s", len(batch), type(last).__name__)
            self._handled_batch(batch, dropped=not written)
        if conn is not None:
            conn.close()

    def _relaxed_conn(self) -> psycopg.Connection | None:
        if self._conninfo is None:
            return None
        conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
        conn.execute("SET synchronous_commit TO OFF")
        return conn

    def _wait_for(self, row: dict, n: int) -> None:
        """Count ``row`` in (+1) or out (-1) of its conversation's waiting rows; the caller holds ``_done``."""
        conv = row.get("conversation_id")
        if conv is None:
            return
        key = str(conv)
        left = self._waiting.get(key, 0) + n
        if left > 0:
            self._waiting[key] = left
        else:
            self._waiting.pop(key, None)

    def _handled_batch(self, batch: list[dict], *, dropped: bool) -> None:
        with self._done:
            self._handled += len(batch)
            for row in batch:
                self._wait_for(row, -1)
            if dropped:
                self.dropped += len(batch)
            self._done.notify_all()


@functools.lru_cache(maxsize=_BATCH)
def _insert_rows(n: int) -> str:
    """``_INSERT`` for ``n`` rows in one statement."""
    head, _, row = _INSERT.partition(" VALUES ")
    return f"{head} VALUES {', '.join([row] * n)}"


def _snapshot(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, default=str)


# --- reading --------------------------------------------------------------------------------------------------


def _rows(source, where: str, params: tuple) -> list[dict[str, Any]]:
    """``source``: a pool, or an open connection (e.g. the turn's own transaction, which sees committed rows)."""
    if isinstance(source, psycopg.Connection):
        return _fetch(source, where, params)
    with source.connection() as conn:
        return _fetch(conn, where, params)


def _fetch(conn, where: str, params: tuple) -> list[dict[str, Any]]:
    cur = conn.execute(f"SELECT {_COLUMNS} FROM tool_calls WHERE {where}", params)
    names = [d.name for d in cur.description]
    out = []
    for row in cur.fetchall():
        item = dict(row) if isinstance(row, Mapping) else dict(zip(names, row))
        item["id"] = str(item["id"])
        item["created_at"] = item["created_at"].isoformat()
        out.append(item)
    return out


def calls_for_turn(source, turn_id: str) -> list[dict[str, Any]]:
    return _rows(source, "turn_id = %s ORDER BY created_at, id", (str(turn_id),))


def calls_for_turns(source, turn_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Calls of several turns at once (a conversation's replay), by turn id."""
    out: dict[str, list[dict[str, Any]]] = {str(t): [] for t in turn_ids}
    if out:
        for row in _rows(source, "turn_id = ANY(%s) ORDER BY created_at, id", (list(out),)):
            out[row["turn_id"]].append(row)
    return out


def calls_outside(source, conversation_id: str, turn_ids: list[str]) -> list[dict[str, Any]]:
    """The conversation's calls that name none of ``turn_ids`` (e.g. a flow resumed by an approver)."""
    return _rows(source, "conversation_id = %s AND (turn_id IS NULL OR NOT (turn_id = ANY(%s)))"
                 " ORDER BY created_at, id", (str(conversation_id), [str(t) for t in turn_ids]))


def calls_for_conversation(source, conversation_id: str, *, limit: int = 50) -> list[dict[str, Any]]:
    """The conversation's most recent calls (at most ``limit``), oldest first."""
    rows = _rows(source, "conversation_id = %s ORDER BY created_at DESC, id DESC LIMIT %s",
                 (str(conversation_id), int(limit)))
    return rows[::-1]


def earlier_writes(source, tool: str, key: str, conversation_id: str | None, *, limit: int = 50) -> list[dict]:
    """Calls of ``tool`` that reached its server with ``key``, or succeeded in the conversation; newest first."""
    where = "tool = %s AND attempts > 0 AND (idempotency_key = %s"
    params: tuple = (tool, key)
    if conversation_id:
        where += " OR (conversation_id = %s AND status = 'ok')"
        params += (str(conversation_id),)
    return _rows(source, where + ") ORDER BY created_at DESC, id DESC LIMIT %s", params + (int(limit),))


def writes_done(source, conversation_id: str, *, limit: int = 20) -> list[dict[str, Any]]:
    """The conversation's writes that succeeded at their server (masked input and output), oldest first: what
    earlier flows of the conversation already did."""
    rows = _rows(source, "conversation_id = %s AND status = 'ok' AND attempts > 0 AND risk <> 'read'"
                 " ORDER BY created_at DESC, id DESC LIMIT %s", (str(conversation_id), int(limit)))
    return [{"tool": r["tool"], "arguments": r["input"], "result": r["output"], "at": r["created_at"],
             "call_id": r["id"]} for r in rows[::-1]]


SUMMARY_FIELDS = ("id", "turn_id", "tool", "risk", "status", "latency_ms", "attempts", "idempotency_key", "input", "output",
                  "error", "created_at")


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a trace or a ticket shows of each call (already redacted): tool, status, latency, attempts, data."""
    return [{k: (round(r[k], 2) if k == "latency_ms" and r.get(k) is not None else r.get(k))
             for k in SUMMARY_FIELDS} for r in rows]
