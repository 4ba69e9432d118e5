"""Retention and erasure of customer data in the outbox's own tables (outbox, outbox_attempts, outbox_receipts).

``switchboard retention run`` and ``switchboard customers forget`` (:mod:`router.ops.privacy`) call these for
the outbox part. Rows, statuses, attempts and times stay, so delivery figures over old periods keep their
numbers; what a customer wrote, and channel errors that may quote it, go.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.rows import DictRow

ERASED_PAYLOAD = json.dumps({"text": "", "erased": True})


def expire(conn: psycopg.Connection[DictRow], days: int) -> dict[str, int]:
    """Finished rows older than ``days`` lose their text and error; returns rows touched per column."""
    cutoff = "now() - make_interval(days => %(days)s)"
    p = {"days": days, "erased": ERASED_PAYLOAD}
    return {
        "outbox.payload": conn.execute(
            f"""UPDATE outbox SET payload = (payload - 'text') || %(erased)s::jsonb, last_error = NULL
                 WHERE created_at < {cutoff} AND status IN ('delivered', 'dead')
                   AND NOT coalesce((payload ->> 'erased')::boolean, false)""", p).rowcount,
        "outbox_attempts.error": conn.execute(
            f"UPDATE outbox_attempts SET error = NULL WHERE created_at < {cutoff} AND error IS NOT NULL", p).rowcount,
    }


def forget(conn: psycopg.Connection[DictRow], conversation_ids: list[Any]) -> dict[str, int]:
    """Erase what the outbox holds of these conversations; rows still due are stopped (dead), never sent.

    Returns rows touched per table."""
    p = {"ids": conversation_ids, "erased": ERASED_PAYLOAD}
    return {
        "outbox": conn.execute(
            """UPDATE outbox SET payload = %(erased)s::jsonb, last_error = 'erased on request',
                      status = CASE WHEN status IN ('pending', 'sending') THEN 'dead' ELSE status END,
                      dead_at = CASE WHEN status IN ('pending', 'sending') THEN now() ELSE dead_at END,
                      lease_until = NULL
                WHERE conversation_id = ANY(%(ids)s)""", p).rowcount,
        "outbox_attempts": conn.execute(
            """UPDATE outbox_attempts SET error = NULL
                WHERE outbox_id IN (SELECT id FROM outbox WHERE conversation_id = ANY(%(ids)s))""", p).rowcount,
        "outbox_receipts": conn.execute(
            """UPDATE outbox_receipts SET error_title = NULL, error_detail = NULL
                WHERE outbox_id IN (SELECT id FROM outbox WHERE conversation_id = ANY(%(ids)s))""", p).rowcount,
    }
