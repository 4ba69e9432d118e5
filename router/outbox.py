"""Writing to the transactional outbox. Delivery (retries, dead letters) is the dispatcher's job."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg


def enqueue_outbound(
    conn: psycopg.Connection,
    *,
    conversation_id: str,
    channel: str,
    text: str,
    sender: str = "bot",
    kind: str = "reply",
    payload: dict[str, Any] | None = None,
) -> dict[str, int]:
    """Store an outbound message in the transcript and queue it for delivery, in the caller's transaction.

    Returns the ids of the message and outbox rows.
    """
    message_id = conn.execute(
        """
        INSERT INTO messages (conversation_id, channel, external_id, direction, sender, text)
        VALUES (%s, %s, %s, 'out', %s, %s) RETURNING id
        """,
        (conversation_id, channel, f"out-{uuid.uuid4().hex}", sender, text),
    ).fetchone()
    message_id = message_id["id"] if isinstance(message_id, dict) else message_id[0]
    body = {"text": text, **(payload or {})}
    outbox_id = conn.execute(
        """
        INSERT INTO outbox (conversation_id, message_id, channel, kind, payload)
        VALUES (%s, %s, %s, %s, %s) RETURNING id
        """,
        (conversation_id, message_id, channel, kind, json.dumps(body, ensure_ascii=False, default=str)),
    ).fetchone()
    outbox_id = outbox_id["id"] if isinstance(outbox_id, dict) else outbox_id[0]
    return {"message_id": message_id, "outbox_id": outbox_id}
