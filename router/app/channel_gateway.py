"""From a verified, parsed webhook delivery to routed turns and queued outbound messages.

Per message: (1) the channel identity is mapped to a customer and the conversation's return
address is remembered (one small transaction; repeating it is harmless), (2) the pipeline routes
the message in its own transaction (idempotent on the channel's message id), (3) the turn's reply
is made sure to be in the outbox and the channel's follow-up actions are queued, both under a
lock on the turn row and with idempotency keys, so a retried delivery (the channel's, after a
crash between 2 and 3) completes what is missing and never queues anything twice.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import psycopg

from router.channels.registry import build_adapters
from router.channels.base import ChannelAdapter, Outcome, OutboundAction, ParsedMessage, Route, scrub
from router.outbox.store import enqueue_outbound
from router.schemas import InboundMessage

log = logging.getLogger(__name__)


_RESOLVE = """
WITH ident AS (
    INSERT INTO channel_identities (channel, channel_user_id, customer_id, profile)
    VALUES (%(channel)s, %(user)s, %(customer)s, %(profile)s)
    ON CONFLICT (channel, channel_user_id) DO UPDATE
        SET last_seen_at = now(), profile = channel_identities.profile || EXCLUDED.profile
        WHERE channel_identities.last_seen_at < now() - interval '10 minutes'
           OR NOT channel_identities.profile @> EXCLUDED.profile
    RETURNING customer_id
), route AS (
    INSERT INTO channel_routes (channel, conversation_external_id, channel_user_id, address)
    VALUES (%(channel)s, %(conversation)s, %(user)s, %(address)s)
    ON CONFLICT (channel, conversation_external_id) DO UPDATE
        SET address = EXCLUDED.address, channel_user_id = EXCLUDED.channel_user_id, updated_at = now()
        WHERE channel_routes.address IS DISTINCT FROM EXCLUDED.address
           OR channel_routes.channel_user_id IS DISTINCT FROM EXCLUDED.channel_user_id
)
SELECT customer_id, set_config('synchronous_commit', 'off', true) AS async_commit FROM ident
UNION ALL
SELECT customer_id, set_config('synchronous_commit', 'off', true) FROM channel_identities
 WHERE channel = %(channel)s AND channel_user_id = %(user)s
LIMIT 1
"""


def resolve_customer(conn: psycopg.Connection, channel: str, route: Route, conversation_external_id: str) -> str:
    """The customer id of a channel identity (created on first sight), and the conversation's address.

    One statement; rows are rewritten only when something changed (or last seen > 10 min ago). Run
    on an autocommit connection it is its own transaction, one round trip, committed without
    waiting for the WAL flush (``set_config(..., true)`` in the statement): losing this on a crash
    costs nothing, the channel's retry writes it again, and the turn's own commit flushes it anyway.
    """
    params = {"channel": channel, "user": route.channel_user_id, "conversation": conversation_external_id,
              "customer": route.customer_id or f"{channel}:{route.channel_user_id}",
              "profile": json.dumps(route.profile, ensure_ascii=False),
              "address": json.dumps(route.address, ensure_ascii=False)}
    row = conn.execute(_RESOLVE, params).fetchone()
    if row is None:  # a concurrent first sight committed after this statement's snapshot: read it now
        row = conn.execute("SELECT customer_id FROM channel_identities WHERE channel = %s AND channel_user_id = %s",
                           (channel, route.channel_user_id)).fetchone()
    return row["customer_id"]


def _lock_turn(conn: psycopg.Connection, turn_id: str) -> dict[str, Any] | None:
    return conn.execute(
        "SELECT id, conversation_id, created_at FROM turns WHERE id = %s FOR UPDATE", (turn_id,)
    ).fetchone()


def reply_already_queued(conn: psycopg.Connection, turn_id: str) -> bool:
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


def ensure_reply_queued(conn: psycopg.Connection, turn: dict[str, Any], channel: str, text: str,
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
    conn.execute("UPDATE outbox SET dedupe_key = %s WHERE id = %s", (f"reply:{turn['id']}", ids["outbox_id"]))
    return ids["outbox_id"]


def queue_action(conn: psycopg.Connection, conversation_id: str, channel: str, action: OutboundAction) -> None:
    conn.execute(
        """
        INSERT INTO outbox (conversation_id, channel, kind, payload, dedupe_key)
        VALUES (%s, %s, %s, %s, %s) ON CONFLICT (dedupe_key) DO NOTHING
        """,
        (conversation_id, channel, action.kind, json.dumps(action.payload, ensure_ascii=False), action.dedupe_key),
    )


def claim_passive_reply(conn: psycopg.Connection, turn_id: str, *, retried: bool = False) -> str | None:
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


class ChannelGateway:
    """The adapters and the steps around the pipeline; built once per process."""

    def __init__(self, settings, pool, pipeline, metrics=None):
        self.settings = settings
        self.pool = pool
        self.pipeline = pipeline
        self.metrics = metrics
        self.adapters: dict[str, ChannelAdapter] = build_adapters(settings)
        # A turn holds a pool connection for its transaction and the router may take a second one
        # inside it (retrieval): admitting more turns than half the pool at once can leave every
        # connection held by a turn waiting for another. Turns beyond this wait here, holding nothing.
        pool_max = getattr(pool, "max_size", None) or settings.db_pool_max
        self._turns = threading.BoundedSemaphore(max(1, (pool_max - 1) // 2))

    def adapter(self, name: str) -> ChannelAdapter | None:
        return self.adapters.get(name)

    def process(self, adapter: ChannelAdapter, parsed: ParsedMessage) -> Outcome:
        msg = InboundMessage.model_validate(scrub(parsed.message.model_dump()))
        route = parsed.route
        route.channel_user_id, route.customer_id = scrub(route.channel_user_id), scrub(route.customer_id)
        route.address, route.profile = scrub(route.address), scrub(route.profile)
        msg.metadata.setdefault("channel_user_id", route.channel_user_id)   # who wrote, in a group chat
        with self.pool.connection() as conn:
            conn.autocommit = True
            try:
                msg.customer_id = resolve_customer(conn, adapter.name, parsed.route, msg.conversation_external_id)
            finally:
                if not conn.closed:
                    conn.autocommit = False
        parsed.message = msg
        with self._turns:
            response, replayed = self.pipeline.handle(msg)
        outcome = Outcome(msg, response, replayed)
        actions = adapter.after_turn(outcome)
        reply = outcome.reply_text
        turn_id = response.get("turn_id")
        if reply and turn_id and not replayed and getattr(self.pipeline.decider, "queues_replies", False):
            reply = None      # queued in the turn's own transaction (a replay is checked: it may predate that)
        if reply and turn_id and not actions:
            with self.pool.connection() as conn:
                if reply_already_queued(conn, turn_id):   # the usual case: the router queued it in the turn
                    reply = None
        if (reply or actions) and turn_id:
            with self.pool.connection() as conn, conn.transaction():
                turn = _lock_turn(conn, response["turn_id"])
                if turn is not None:
                    if reply:
                        citations = (response.get("reply") or {}).get("citations") or []
                        extra = {"citations": citations} if citations else None
                        if ensure_reply_queued(conn, turn, adapter.name, reply, extra) is not None:
                            log.info("reply queued after the turn", extra={"fields": {"turn_id": str(turn["id"])}})
                    for action in actions:
                        queue_action(conn, turn["conversation_id"], adapter.name, action)
        return outcome

    def process_all(self, adapter: ChannelAdapter, messages: list[ParsedMessage]) -> list[Outcome]:
        return [self.process(adapter, pm) for pm in messages]

    def take_passive_reply(self, outcome: Outcome) -> str | None:
        turn_id = outcome.response.get("turn_id")
        if not turn_id or not outcome.reply_text:
            return None
        with self.pool.connection() as conn, conn.transaction():
            return claim_passive_reply(conn, turn_id, retried=outcome.replayed)
