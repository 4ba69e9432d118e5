"""Writing to the transactional outbox and reading it back. Delivery (retries, dead letters) is the dispatcher's job."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
from psycopg.rows import DictRow


def enqueue_outbound(
    conn: psycopg.Connection[DictRow],
    *,
    conversation_id: str,
    channel: str,
    text: str,
    sender: str = "bot",
    kind: str = "reply",
    payload: dict[str, Any] | None = None,
) -> dict[str, int] | None:
    """The one way a message to a customer is queued (bot replies, a flow's reply after an approval or a staff
    cancel, agent messages): stored in the transcript and queued for delivery, in the caller's transaction.

    Returns the ids of the message and outbox rows, or None, writing nothing, when the conversation's customer
    asked not to be contacted (STOP) or the conversation does not exist. The check is part of the same
    statement (no extra round trip); a caller holding the conversation's lock reads the flag as the STOP
    turn left it.
    """
    body = {"text": text, **(payload or {})}
    row = conn.execute(
        """
        WITH reachable AS (
            SELECT c.id FROM conversations c
             WHERE c.id = %(conversation)s
               AND NOT EXISTS (SELECT 1 FROM customer_flags f WHERE f.channel = c.channel
                                  AND f.customer_id = c.customer_id AND f.do_not_contact)
        ), m AS (
            INSERT INTO messages (conversation_id, channel, external_id, direction, sender, text)
            SELECT r.id, %(channel)s, %(external)s, 'out', %(sender)s, %(text)s FROM reachable r
            RETURNING id, conversation_id
        )
        INSERT INTO outbox (conversation_id, message_id, channel, kind, payload)
        SELECT m.conversation_id, m.id, %(channel)s, %(kind)s, %(payload)s FROM m
        RETURNING message_id, id
        """,
        {"conversation": conversation_id, "channel": channel, "external": f"out-{uuid.uuid4().hex}",
         "sender": sender, "text": text, "kind": kind,
         "payload": json.dumps(body, ensure_ascii=False, default=str)},
    ).fetchone()
    if row is None:
        return None
    message_id, outbox_id = (row["message_id"], row["id"]) if isinstance(row, dict) else (row[0], row[1])
    return {"message_id": message_id, "outbox_id": outbox_id}


def deliveries_since(conn: psycopg.Connection[DictRow], conversation_id: Any, since: Any, *, limit: int = 200) -> list[dict[str, Any]]:
    """The conversation's outbox rows created since ``since`` (the latest ``limit``), oldest first, with their
    delivery status: what the agent console shows under the transcript."""
    return conn.execute(
        """
        SELECT id, message_id, channel, kind, payload->>'text' AS text, status, attempts, last_error,
               created_at, delivered_at FROM (
            SELECT * FROM outbox WHERE conversation_id = %(c)s AND created_at >= %(since)s
            ORDER BY id DESC LIMIT %(n)s) o
        ORDER BY id
        """,
        {"c": conversation_id, "since": since, "n": limit},
    ).fetchall()


def deliveries_by_message(conn: psycopg.Connection[DictRow], conversation_id: Any) -> dict[int, list[dict[str, Any]]]:
    """The conversation's outbox rows that carry a transcript message, keyed by message id (in row order): status,
    attempts, last error, provider id, delivery receipt and the number of parts when a text went out in several;
    what a conversation's trace shows under each outbound message."""
    rows = conn.execute(
        """
        SELECT o.message_id, o.id AS outbox_id, o.kind, o.status, o.attempts, o.last_error, o.delivered_at,
               o.dead_at, o.provider_message_id, o.receipt_status, o.receipt_at, o.receipt_error,
               (SELECT max(p.parts) FROM outbox_parts p WHERE p.outbox_id = o.id) AS parts
        FROM outbox o
        WHERE o.conversation_id = %s AND o.message_id IS NOT NULL ORDER BY o.id
        """,
        (conversation_id,),
    ).fetchall()
    out: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["message_id"], []).append(r)
    return out


def due_count(conn: psycopg.Connection[DictRow]) -> int:
    """Rows still to deliver (pending, or being sent)."""
    row = conn.execute("SELECT count(*) AS n FROM outbox WHERE status IN ('pending', 'sending')").fetchone()
    return int(row["n"]) if row else 0


def stored_channels(conn: psycopg.Connection[DictRow]) -> list[str]:
    """Every channel that has rows in the outbox (a channel removed since keeps its rows)."""
    return [r["channel"] for r in conn.execute("SELECT DISTINCT channel FROM outbox")]
