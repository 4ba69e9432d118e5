"""From a verified, parsed webhook delivery to routed turns and queued outbound messages.

Per message: (1) the channel identity is mapped to a customer (one small transaction; repeating it
is harmless), (2) the pipeline routes the message in its own transaction (idempotent on the channel's
message id), remembering the conversation's return address once the conversation is known to be this
customer's, (3) the turn's reply
is made sure to be in the outbox and the channel's follow-up actions are queued, both under a
lock on the turn row and with idempotency keys, so a retried delivery (the channel's, after a
crash between 2 and 3) completes what is missing and never queues anything twice.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg

from router.channels.registry import build_adapters
from router.channels.base import ChannelAdapter, Outcome, ParsedMessage, Route, scrub
from router.outbox.replies import claim_passive_reply, ensure_reply_queued, queue_action, reply_already_queued
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
)
SELECT customer_id, set_config('synchronous_commit', 'off', true) AS async_commit FROM ident
UNION ALL
SELECT customer_id, set_config('synchronous_commit', 'off', true) FROM channel_identities
 WHERE channel = %(channel)s AND channel_user_id = %(user)s
LIMIT 1
"""


_ROUTE = """
INSERT INTO channel_routes (channel, conversation_external_id, channel_user_id, address)
VALUES (%(channel)s, %(conversation)s, %(user)s, %(address)s)
ON CONFLICT (channel, conversation_external_id) DO UPDATE
    SET address = EXCLUDED.address, channel_user_id = EXCLUDED.channel_user_id, updated_at = now()
    WHERE channel_routes.address IS DISTINCT FROM EXCLUDED.address
       OR channel_routes.channel_user_id IS DISTINCT FROM EXCLUDED.channel_user_id
"""


def remember_route(conn: psycopg.Connection, channel: str, route: Route, conversation: dict[str, Any]) -> None:
    """The conversation's return address, written in the turn's transaction once the pipeline has the
    conversation row locked and known to be this customer's: a message refused as another customer's
    (or moved to their own conversation) never redirects the replies of the conversation it named."""
    conn.execute(_ROUTE, {"channel": channel, "conversation": conversation["external_id"],
                          "user": route.channel_user_id, "address": json.dumps(route.address, ensure_ascii=False)})


def resolve_customer(conn: psycopg.Connection, channel: str, route: Route, conversation_external_id: str) -> str:
    """The customer id of a channel identity (created on first sight).

    One statement; the row is rewritten only when something changed (or last seen > 10 min ago). Run
    on an autocommit connection it is its own transaction, one round trip, committed without
    waiting for the WAL flush (``set_config(..., true)`` in the statement): losing this on a crash
    costs nothing, the channel's retry writes it again, and the turn's own commit flushes it anyway.
    """
    params = {"channel": channel, "user": route.channel_user_id,
              "customer": route.customer_id or f"{channel}:{route.channel_user_id}",
              "profile": json.dumps(route.profile, ensure_ascii=False)}
    row = conn.execute(_RESOLVE, params).fetchone()
    if row is None:  # a concurrent first sight committed after this statement's snapshot: read it now
        row = conn.execute("SELECT customer_id FROM channel_identities WHERE channel = %s AND channel_user_id = %s",
                           (channel, route.channel_user_id)).fetchone()
    return row["customer_id"]


def _lock_turn(conn: psycopg.Connection, turn_id: str) -> dict[str, Any] | None:
    return conn.execute(
        "SELECT id, conversation_id, created_at FROM turns WHERE id = %s FOR UPDATE", (turn_id,)
    ).fetchone()


class ChannelGateway:
    """The adapters and the steps around the pipeline; built once per process."""

    def __init__(self, settings, pool, pipeline, metrics=None):
        self.settings = settings
        self.pool = pool
        self.pipeline = pipeline
        self.metrics = metrics
        self.adapters: dict[str, ChannelAdapter] = build_adapters(settings)

    def adapter(self, name: str) -> ChannelAdapter | None:
        return self.adapters.get(name)

    def process(self, adapter: ChannelAdapter, parsed: ParsedMessage) -> Outcome:
        msg = InboundMessage.model_validate(scrub(parsed.message.model_dump()))
        route = parsed.route
        route.channel_user_id, route.customer_id = scrub(route.channel_user_id), scrub(route.customer_id)
        route.address, route.profile = scrub(route.address), scrub(route.profile)
        msg.metadata.setdefault("channel_user_id", route.channel_user_id)   # who wrote, in a group chat

        # the steps around the turn are idempotent: repeated on a fresh connection if the session dies (Pool.run)
        msg.customer_id = self.pool.run(
            lambda conn: resolve_customer(conn, adapter.name, parsed.route, msg.conversation_external_id),
            autocommit=True)
        parsed.message = msg
        response, replayed = self.pipeline.handle(
            msg, on_conversation=lambda conn, conversation: remember_route(conn, adapter.name, route, conversation))
        outcome = Outcome(msg, response, replayed)
        actions = adapter.after_turn(outcome)
        reply = outcome.reply_text
        turn_id = response.get("turn_id")
        if reply and turn_id and not replayed and getattr(self.pipeline.decider, "queues_replies", False):
            reply = None      # queued in the turn's own transaction (a replay is checked: it may predate that)
        if reply and turn_id and not actions:
            if self.pool.run(lambda conn: reply_already_queued(conn, turn_id)):   # the usual case: queued in the turn
                reply = None
        if (reply or actions) and turn_id:
            self.pool.run(lambda conn: self._queue_after_turn(conn, adapter, response, reply, actions))
        return outcome

    @staticmethod
    def _queue_after_turn(conn, adapter: ChannelAdapter, response: dict, reply: str | None, actions) -> None:
        """The reply and the channel's actions into the outbox (their dedupe keys make a repeat harmless)."""
        with conn.transaction():
            turn = _lock_turn(conn, response["turn_id"])
            if turn is None:
                return
            if reply:
                citations = (response.get("reply") or {}).get("citations") or []
                extra = {"citations": citations} if citations else None
                if ensure_reply_queued(conn, turn, adapter.name, reply, extra) is not None:
                    log.info("reply queued after the turn", extra={"fields": {"turn_id": str(turn["id"])}})
            for action in actions:
                queue_action(conn, turn["conversation_id"], adapter.name, action)

    def process_all(self, adapter: ChannelAdapter, messages: list[ParsedMessage]) -> list[Outcome]:
        return [self.process(adapter, pm) for pm in messages]

    def take_passive_reply(self, outcome: Outcome) -> str | None:
        turn_id = outcome.response.get("turn_id")
        if not turn_id or not outcome.reply_text:
            return None
        with self.pool.connection() as conn, conn.transaction():
            return claim_passive_reply(conn, turn_id, retried=outcome.replayed)
