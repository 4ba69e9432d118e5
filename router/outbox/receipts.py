"""Delivery receipts: a channel's later word on a message the dispatcher sent (WhatsApp statuses).

A receipt names the channel's message id; it is matched to the outbox row that got that id (or to
the part of a long reply that did), stored once per id and status (channels retry webhooks), and
moves the row's ``receipt_status`` forward only: receipts arrive out of order, and a late
``delivered`` must not turn a ``read`` message back. A receipt for an id we never sent (another
system on the same number, a row already purged) is acknowledged and ignored.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import DictRow

from router.channels.base import Receipt
from text import personal

_TARGET = """
SELECT o.id AS outbox_id, p.part, 0 AS pref
  FROM outbox_parts p JOIN outbox o ON o.id = p.outbox_id
 WHERE p.provider_message_id = %(pid)s AND o.channel = %(channel)s
UNION ALL
SELECT o.id, NULL, 1 FROM outbox o WHERE o.channel = %(channel)s AND o.provider_message_id = %(pid)s
ORDER BY pref, outbox_id DESC
LIMIT 1
"""

_INSERT = """
INSERT INTO outbox_receipts (outbox_id, part, provider_message_id, status, status_at, error_code, error_title,
                             error_detail)
VALUES (%(outbox_id)s, %(part)s, %(pid)s, %(status)s, %(at)s, %(code)s, %(title)s, %(detail)s)
ON CONFLICT (outbox_id, provider_message_id, status) DO NOTHING
RETURNING id
"""

# forward only: the row lock makes concurrent receipts for one message apply one after the other
_ADVANCE = """
UPDATE outbox
   SET receipt_status = CASE WHEN receipt_rank(%(status)s) > receipt_rank(receipt_status)
                             THEN %(status)s ELSE receipt_status END,
       receipt_at = CASE WHEN receipt_rank(%(status)s) > receipt_rank(receipt_status)
                         THEN COALESCE(%(at)s, now()) ELSE receipt_at END,
       receipt_error = COALESCE(%(error)s, receipt_error)
 WHERE id = %(outbox_id)s
"""


def error_text(receipt: Receipt) -> str | None:
    if receipt.status != "failed":
        return None
    text = " ".join(x for x in (receipt.error_code, receipt.error_title) if x) or "failed"
    if receipt.error_detail:
        text += f": {receipt.error_detail}"
    return personal.mask_clip(text, 1000)   # the channel's error text may echo the message: mask, then cut


def record_receipts(conn: psycopg.Connection[DictRow], channel: str, receipts: list[Receipt]) -> list[Receipt]:
    """Store the receipts in the caller's transaction; returns the ones that matched no sent message."""
    unknown = []
    for r in receipts:
        params: dict[str, Any] = {"pid": r.provider_message_id, "channel": channel}
        target = conn.execute(_TARGET, params).fetchone()
        if target is None:
            unknown.append(r)
            continue
        params.update(outbox_id=target["outbox_id"], part=target["part"], status=r.status, at=r.at,
                      code=r.error_code, title=personal.mask_clip(r.error_title, 300),
                      detail=personal.mask_clip(r.error_detail, 500), error=error_text(r))
        if conn.execute(_INSERT, params).fetchone() is None:
            continue        # the channel retried this receipt: already applied
        conn.execute(_ADVANCE, params)
    return unknown
