"""A channel turn's reply in the outbox: queued exactly once, or taken out because the webhook answers it.

Channels that answer in the webhook's HTTP response (passive replies) and channels delivered by the
dispatcher share one rule: the turn's reply is in the outbox once, either written in the turn's own
transaction or here with the key ``reply:<turn id>``.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.rows import DictRow

from router.channels.base import OutboundAction
from router.outbox.store import enqueue_outbound


def reply_already_queued(conn: psycopg.Connection[DictRow], turn_id: str) -> bool:
    """Read-only check (no lock, no commit cost) that the turn's reply is in the outbox."""
    row = conn.execute(
        """
        SELECT EXISTS (SELECT 1 FROM messages m
                        WHERE m.conversation_id = t.conversation_id AND m.direction = 'out'
                          AND m.received_at = t.created_at)
            OR EXISTS (SELECT 1 FROM outbox WHERE dedupe_key = 'reply:' || t.id::text) AS queued
          FROM turns t WHERE t.id = %s
        """,
        (turn_id,),
    ).fetchone()
    return row is None or bool(row["queued"])


def ensure_reply_queued(conn: psycopg.Connection[DictRow], turn: dict[str, Any], channel: str, text: str,
                        payload: dict[str, Any] | None = None) -> int | None:
    """Queue the turn's reply unless the turn's own transaction already did; returns a new outbox id.

    An outbound message written in the turn's transaction has the turn's timestamp (``now()`` is
    the transaction's start); a row written here carries the key ``reply:<turn id>``.
    """
    found = conn.execute(
        """
        SELECT 1 FROM messages
         WHERE conversation_id = %s AND direction = 'out' AND received_at = %s
        UNION ALL
        SELECT 1 FROM outbox WHERE dedupe_key = %s
        LIMIT 1
        """,
        (turn["conversation_id"], turn["created_at"], f"reply:{turn['id']}"),
    ).fetchone()
    if found:
        return None
    ids = enqueue_outbound(conn, conversation_id=turn["conversation_id"], channel=channel, text=text,
                           payload=payload)
    if ids is None:          # the customer asked not to be contacted: nothing is queued
        return None
    conn.execute("UPDATE outbox SET dedupe_key = %s WHERE id = %s", (f"reply:{turn['id']}", ids["outbox_id"]))
    return ids["outbox_id"]


def queue_action(conn: psycopg.Connection[DictRow], conversation_id: str, channel: str, action: OutboundAction) -> None:
    conn.execute(
        """
        INSERT INTO outbox (conversation_id, channel, kind, payload, dedupe_key)
        VALUES (%s, %s, %s, %s, %s) ON CONFLICT (dedupe_key) DO NOTHING
        """,
        (conversation_id, channel, action.kind, json.dumps(action.payload, ensure_ascii=False), action.dedupe_key),
    )


def claim_passive_reply(conn: psycopg.Connection[DictRow], turn_id: str, *, retried: bool = False) -> str | None:
    """Take the turn's pending reply out of the queue because it is answered in the HTTP response.

    Returns its text, or None when there is none or the dispatcher is already sending it. On a
    retried delivery a reply already given passively is given again: the channel retries only
    when our first answer did not reach it.
    """
    row = conn.execute(
        """
        UPDATE outbox o
           SET status = 'delivered', delivered_at = now(), attempts = o.attempts + 1,
               provider_message_id = 'passive-reply'
         WHERE o.id = (
             SELECT o2.id FROM outbox o2 JOIN turns t ON t.id = %s
              WHERE o2.conversation_id = t.conversation_id AND o2.status = 'pending'
                AND o2.kind <> 'agent_message' AND o2.payload ? 'text'
                AND (o2.created_at = t.created_at OR o2.dedupe_key = 'reply:' || t.id::text)
              ORDER BY o2.id LIMIT 1
              FOR UPDATE SKIP LOCKED)
        RETURNING o.id, o.payload, o.attempts
        """,
        (turn_id,),
    ).fetchone()
    if row is None:
        if not retried:
            return None
        row = conn.execute(
            """
            SELECT o.payload FROM outbox o JOIN turns t ON t.id = %s
             WHERE o.conversation_id = t.conversation_id AND o.provider_message_id = 'passive-reply'
               AND (o.created_at = t.created_at OR o.dedupe_key = 'reply:' || t.id::text)
             ORDER BY o.id LIMIT 1
            """,
            (turn_id,),
        ).fetchone()
        text = row["payload"].get("text") if row else None
        return text if isinstance(text, str) else None
    conn.execute(
        "INSERT INTO outbox_attempts (outbox_id, attempt, outcome, error) VALUES (%s, %s, 'delivered', %s)",
        (row["id"], row["attempts"], "passive reply in the webhook response"),
    )
    text = row["payload"].get("text")
    return text if isinstance(text, str) else None
