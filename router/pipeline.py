"""One inbound message, end to end, in one transaction.

The conversation row is locked first (messages of one conversation are routed one at a
time, so the state machine never races itself), then the message is inserted with
``ON CONFLICT DO NOTHING`` on (channel, external message id): a retried or concurrent
duplicate delivery finds the first one's turn and gets exactly the same response back,
and nothing new is stored.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from router.observability import redact_obj
from router.schemas import Decision, InboundMessage, TurnOut


@dataclass
class TurnContext:
    """What a decider gets: the open transaction and the rows it may read or update."""

    conn: psycopg.Connection
    conversation: dict[str, Any]
    message: dict[str, Any]
    inbound: InboundMessage
    timings: dict[str, float]


@dataclass
class TurnResult:
    decision: Decision
    state: str
    reply: dict[str, Any] | None = None
    ticket_id: str | None = None
    trace: dict[str, Any] | None = None   # stages, candidates, transitions: stored redacted with the turn


Decider = Callable[[TurnContext], TurnResult]


def record_only(ctx: TurnContext) -> TurnResult:
    """The decider used when no router is wired: the message is stored, nothing is decided."""
    return TurnResult(decision=Decision(channel="none", explanation={"note": "no router configured"}),
                      state=ctx.conversation["state"])


class Pipeline:
    def __init__(self, pool, metrics, decider: Decider = record_only):
        self.pool = pool
        self.metrics = metrics
        self.decider = decider

    def handle(self, msg: InboundMessage) -> tuple[dict[str, Any], bool]:
        """Route one message; return (response, replayed) where replayed marks a duplicate delivery."""
        t0 = time.perf_counter()
        with self.pool.connection() as conn, conn.transaction():
            conversation = conn.execute(
                """
                INSERT INTO conversations (channel, external_id, customer_id)
                VALUES (%s, %s, %s)
                ON CONFLICT (channel, external_id) DO UPDATE SET updated_at = now()
                RETURNING id, channel, external_id, customer_id, state, session_no, metadata
                """,
                (msg.channel, msg.conversation_external_id, msg.customer_id),
            ).fetchone()
            message = conn.execute(
                """
                INSERT INTO messages (conversation_id, channel, external_id, direction, sender, text, sent_at, metadata)
                VALUES (%s, %s, %s, 'in', 'customer', %s, %s, %s)
                ON CONFLICT (channel, external_id) DO NOTHING
                RETURNING id, conversation_id, text, sent_at
                """,
                (conversation["id"], msg.channel, msg.message_external_id, msg.text, msg.sent_at,
                 json.dumps(msg.metadata, ensure_ascii=False, default=str)),
            ).fetchone()
            if message is None:
                stored = conn.execute(
                    """
                    SELECT t.response FROM messages m JOIN turns t ON t.message_id = m.id
                    WHERE m.channel = %s AND m.external_id = %s
                    """,
                    (msg.channel, msg.message_external_id),
                ).fetchone()
                self.metrics.duplicates.labels(msg.channel).inc()
                if stored is None:  # a message stored without a turn (e.g. by an agent tool): answer its id only
                    raise LookupError("message exists but has no turn")
                return stored["response"], True

            self.metrics.messages.labels(msg.channel).inc()
            ctx = TurnContext(conn=conn, conversation=conversation, message=message, inbound=msg, timings={})
            result = self.decider(ctx)
            trace = {"timings_ms": {k: round(v * 1000, 3) for k, v in ctx.timings.items()},
                     "decision": result.decision.model_dump(mode="json"), **(result.trace or {})}
            turn_id = conn.execute(
                """
                INSERT INTO turns (conversation_id, message_id, session_no, state, decision, response, trace)
                VALUES (%s, %s, %s, %s, %s, '{}'::jsonb, %s) RETURNING id
                """,
                (conversation["id"], message["id"], conversation["session_no"], result.state,
                 result.decision.model_dump_json(),
                 json.dumps(redact_obj(trace), ensure_ascii=False, default=str)),
            ).fetchone()["id"]
            out = TurnOut(
                conversation_id=str(conversation["id"]),
                external_conversation_id=conversation["external_id"],
                turn_id=str(turn_id),
                state=result.state,
                decision=result.decision,
                reply=result.reply,
                ticket_id=result.ticket_id,
            )
            response = out.model_dump(mode="json")
            conn.execute("UPDATE turns SET response = %s WHERE id = %s",
                         (json.dumps(response, ensure_ascii=False), turn_id))
        elapsed = time.perf_counter() - t0
        self.metrics.stage_seconds.labels("total").observe(elapsed)
        d = result.decision
        self.metrics.decisions.labels(d.tier or "none", d.intent or "none", d.channel or "none").inc()
        return response, False
