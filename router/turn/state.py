"""The conversation state machine, persisted in Postgres with its history.

Every conversation is in exactly one state; every change is checked against the table below
and recorded in ``conversation_transitions`` in the caller's transaction, so the state, the
history and the turn that caused them commit (or roll back) together. An edge that is not in
the table raises :class:`IllegalTransition` instead of silently corrupting the conversation.

States and edges (``TRANSITIONS``)::

    idle             -> classifying                      a message arrives
    classifying      -> l1_resolving | l2_assisting | l3_queuing   the routing decision
    l1_resolving     -> l1_resolved                      the knowledge base answered
                     -> l2_assisting                     no confident answer: a human reviews a draft
                     -> l3_queuing                       the answer step found a reason to hand off
    l2_assisting     -> l2_resolved                      the assist ticket was resolved (draft approved)
                     -> l3_queuing                       an escalation while the draft waits
                     -> idle                             ticket cancelled / handed back to the bot
    l3_queuing       -> l3_connected                     an agent claimed the ticket
                     -> feedback_pending                 resolved straight from the queue
                     -> idle                             cancelled / handed back to the bot
    l3_connected     -> feedback_pending                 the agent resolved the ticket
                     -> l3_queuing                       the agent released it back to the queue
                     -> idle                             handed back to the bot
    l1_resolved      -> classifying | feedback_pending   next question | the customer confirms
    l2_resolved      -> classifying | feedback_pending
    feedback_pending -> closed | classifying             feedback given | a new question instead
    closed           -> idle                             a message after closed starts a new session

While a human holds the conversation (``HUMAN_HOLDS``) the bot sends no answers.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg
from psycopg.rows import DictRow

from handoff.ports import CustomerUnreachable, DeliveryUnavailable, OriginalGone
from router.outbox.store import enqueue_outbound

log = logging.getLogger(__name__)

STATES = (
    "idle", "classifying", "l1_resolving", "l2_assisting", "l3_queuing",
    "l1_resolved", "l2_resolved", "l3_connected", "feedback_pending", "closed",
)

TRANSITIONS: dict[str, frozenset[str]] = {
    "idle": frozenset({"classifying"}),
    "classifying": frozenset({"l1_resolving", "l2_assisting", "l3_queuing"}),
    "l1_resolving": frozenset({"l1_resolved", "l2_assisting", "l3_queuing"}),
    "l2_assisting": frozenset({"l2_resolved", "l3_queuing", "idle"}),
    "l3_queuing": frozenset({"l3_connected", "feedback_pending", "idle"}),
    "l3_connected": frozenset({"feedback_pending", "l3_queuing", "idle"}),
    "l1_resolved": frozenset({"classifying", "feedback_pending"}),
    "l2_resolved": frozenset({"classifying", "feedback_pending"}),
    "feedback_pending": frozenset({"closed", "classifying"}),
    "closed": frozenset({"idle"}),
}
assert set(TRANSITIONS) == set(STATES) and all(t <= set(STATES) for t in TRANSITIONS.values())

HUMAN_HOLDS = frozenset({"l3_queuing", "l3_connected"})   # the bot stays silent, messages go to the ticket
RESOLVED = frozenset({"l1_resolved", "l2_resolved", "feedback_pending"})  # feedback may close the session
ROUTABLE = frozenset({"idle", "l1_resolved", "l2_resolved", "feedback_pending"})  # may enter classifying


class IllegalTransition(ValueError):
    """An edge that is not in :data:`TRANSITIONS`."""

    def __init__(self, from_state: str, to_state: str):
        allowed = ", ".join(sorted(TRANSITIONS.get(from_state, ()))) or "nothing"
        super().__init__(f"illegal transition {from_state!r} -> {to_state!r} (from {from_state!r}: {allowed})")
        self.from_state = from_state
        self.to_state = to_state


def check_transition(from_state: str, to_state: str) -> None:
    if to_state not in TRANSITIONS.get(from_state, frozenset()):
        raise IllegalTransition(from_state, to_state)


def lock_conversation(conn: psycopg.Connection[DictRow], conversation_id: str) -> dict[str, Any] | None:
    """The conversation row, locked for the rest of the transaction (one writer at a time)."""
    return conn.execute(
        "SELECT id, channel, external_id, customer_id, state, session_no, metadata FROM conversations "
        "WHERE id = %s FOR UPDATE",
        (conversation_id,),
    ).fetchone()


def transition(conn: psycopg.Connection[DictRow], conversation: dict[str, Any], to_state: str, *, reason: str,
               actor: str = "router", message_id: int | None = None, ticket_id: str | None = None,
               counted: bool = True) -> dict[str, Any]:
    """Move ``conversation`` (a locked row, updated in place) to ``to_state`` and record the edge.
    ``counted=False``: a turn the bot served (a workflow's), which the loop guard does not count."""
    from_state = conversation["state"]
    moved = move_conversation(conn, conversation["id"], {from_state: to_state}, reason=reason, actor=actor,
                              message_id=message_id, ticket_id=ticket_id, counted=counted)
    if moved is None:
        raise RuntimeError(f"conversation {conversation['id']} is no longer in state {from_state!r}")
    conversation["state"] = to_state
    return moved


def _move_writes(conv: str) -> str:
    """A conversation's move as CTEs reading the CTE ``conv`` (the locked conversations that move, with
    id, session_no, from_state, to_state, reason, actor, message_id, ticket_id): the state, the loop-guard
    counter and the history row (``{conv}_history``: id, session_no, from_state, to_state). One text for
    :func:`move_conversation` and the claim statement (:meth:`ConversationStatePort.claim_sql`)."""
    return f"""{conv}_moved AS (
            UPDATE conversations v SET state = m.to_state, updated_at = now() FROM {conv} m WHERE v.id = m.id
        ), {conv}_counted AS (
            INSERT INTO conversation_counters AS k (conversation_id, session_no, state_entries)
            SELECT id, session_no, jsonb_build_object(to_state, counted) FROM {conv}
            ON CONFLICT (conversation_id) DO UPDATE SET
                state_entries = jsonb_set(k.state_entries, ARRAY[(SELECT to_state FROM {conv})],
                    to_jsonb(COALESCE((k.state_entries ->> (SELECT to_state FROM {conv}))::int, 0)
                             + (SELECT counted FROM {conv}))),
                updated_at = now()
        ), {conv}_history AS (
            INSERT INTO conversation_transitions
                (conversation_id, session_no, from_state, to_state, reason, actor, message_id, ticket_id)
            SELECT id, session_no, from_state, to_state, reason, actor, message_id, ticket_id FROM {conv}
            RETURNING id, session_no, from_state, to_state
        )"""


_MOVE_SQL = """
    WITH conv AS (
        SELECT id, session_no, state AS from_state,
               (%(tos)s::text[])[array_position(%(froms)s::text[], state)] AS to_state,
               %(reason)s::text AS reason, %(actor)s::text AS actor, %(message)s::bigint AS message_id,
               %(ticket)s::text AS ticket_id, %(counted)s::int AS counted
        FROM conversations WHERE id = %(cid)s AND state = ANY(%(froms)s::text[])
        FOR UPDATE
    ), """ + _move_writes("conv") + """
    SELECT id, session_no, from_state, to_state FROM conv_history
    """


def move_conversation(conn: psycopg.Connection[DictRow], conversation_id, edges: dict[str, str], *, reason: str,
                      actor: str, message_id: int | None = None, ticket_id: str | None = None,
                      counted: bool = True) -> dict[str, Any] | None:
    """Lock the conversation and take the edge that leaves its current state, in one statement.

    ``edges`` maps a from-state to its to-state; a conversation in any other state is left alone
    (None). The state, its history row and the loop-guard counter change together: a transition
    sits on the hot path of every turn and every ticket claim, and each round trip costs both
    processes CPU. Entering ``idle`` does not reset the escalation memory; the caller does.
    """
    for from_state, to_state in edges.items():
        check_transition(from_state, to_state)
    row = conn.execute(
        _MOVE_SQL,
        {"cid": conversation_id, "froms": list(edges), "tos": list(edges.values()), "reason": reason,
         "actor": actor, "message": message_id, "ticket": str(ticket_id) if ticket_id is not None else None,
         "counted": 1 if counted else 0},
    ).fetchone()
    if row is None:
        return None
    return {"from": row["from_state"], "to": row["to_state"], "reason": reason, "actor": actor, "id": row["id"],
            "session_no": row["session_no"]}


_CHAIN_SQL = """
    WITH edge AS (
        SELECT * FROM unnest(%(froms)s::text[], %(tos)s::text[], %(reasons)s::text[], %(tickets)s::text[],
                             %(counted)s::int[]) WITH ORDINALITY AS e(from_state, to_state, reason, ticket_id, counted, ord)
    ), conv AS (
        SELECT id, session_no FROM conversations WHERE id = %(cid)s AND state = %(first)s FOR UPDATE
    ), moved AS (
        UPDATE conversations v SET state = %(last)s, updated_at = now() FROM conv WHERE v.id = conv.id
    ), entries AS (
        SELECT to_state, sum(counted)::int AS n FROM edge GROUP BY to_state
    ), counted AS (
        INSERT INTO conversation_counters AS k (conversation_id, session_no, state_entries)
        SELECT id, session_no, (SELECT jsonb_object_agg(to_state, n) FROM entries) FROM conv
        ON CONFLICT (conversation_id) DO UPDATE SET
            state_entries = k.state_entries || (SELECT jsonb_object_agg(e.to_state,
                                COALESCE((k.state_entries ->> e.to_state)::int, 0) + e.n) FROM entries e),
            updated_at = now()
    ), history AS (
        INSERT INTO conversation_transitions
            (conversation_id, session_no, from_state, to_state, reason, actor, message_id, ticket_id)
        SELECT conv.id, conv.session_no, e.from_state, e.to_state, e.reason, %(actor)s, %(message)s, e.ticket_id
        FROM conv CROSS JOIN edge e ORDER BY e.ord
        RETURNING id
    )
    SELECT id FROM history ORDER BY id
    """


def move_along(conn: psycopg.Connection[DictRow], conversation_id, edges: list[tuple[str, str, str, Any, bool]], *,
               actor: str = "router", message_id: int | None = None) -> list[int] | None:
    """Take a chain of edges (from, to, reason, ticket id, counted) in one statement: the state ends at the last
    edge's, one history row per edge (in order) and every edge counted, as :func:`move_conversation` would one by
    one. A turn's moves (classifying, resolving, resolved) are its own until it commits, so they are written together
    (one round trip instead of three). The history rows' ids in order, or None when the conversation is no longer in
    the first edge's from-state (nothing is written)."""
    if not edges:
        return []
    for i, (from_state, to_state, *_) in enumerate(edges):
        check_transition(from_state, to_state)
        if i and edges[i - 1][1] != from_state:
            raise ValueError(f"a chain of moves must connect: {edges[i - 1][1]!r} then {from_state!r}")
    rows = conn.execute(
        _CHAIN_SQL,
        {"cid": conversation_id, "first": edges[0][0], "last": edges[-1][1],
         "froms": [e[0] for e in edges], "tos": [e[1] for e in edges], "reasons": [e[2] for e in edges],
         "tickets": [str(e[3]) if e[3] is not None else None for e in edges],
         "counted": [1 if e[4] else 0 for e in edges], "actor": actor, "message": message_id},
    ).fetchall()
    if not rows:
        return None
    return [int(r["id"]) for r in rows]


def start_new_session(conn: psycopg.Connection[DictRow], conversation: dict[str, Any], *,
                      message_id: int | None = None) -> dict[str, Any]:
    """closed -> idle with the next session number; the escalation memory starts empty."""
    check_transition(conversation["state"], "idle")
    row = conn.execute(
        "UPDATE conversations SET session_no = session_no + 1 WHERE id = %s RETURNING session_no",
        (conversation["id"],),
    ).fetchone()
    assert row is not None, "the turn holds the conversation's row (locked)"
    conversation["session_no"] = row["session_no"]
    reset_counters(conn, conversation)
    return transition(conn, conversation, "idle", reason="new_session", message_id=message_id)


def history(conn: psycopg.Connection[DictRow], conversation_id) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT session_no, from_state, to_state, reason, actor, message_id, ticket_id, created_at "
        "FROM conversation_transitions WHERE conversation_id = %s ORDER BY id",
        (conversation_id,),
    ).fetchall()


# -- escalation memory ------------------------------------------------------------------------

def load_counters(conn: psycopg.Connection[DictRow], conversation: dict[str, Any]) -> dict[str, Any]:
    """This session's counters (a fresh row when the session changed)."""
    row = conn.execute(   # create-or-read in one statement (the caller holds the conversation's lock)
        """
        WITH created AS (
            INSERT INTO conversation_counters (conversation_id, session_no) VALUES (%(cid)s, %(session)s)
            ON CONFLICT (conversation_id) DO NOTHING RETURNING *
        )
        SELECT * FROM created
        UNION ALL
        SELECT * FROM conversation_counters WHERE conversation_id = %(cid)s AND NOT EXISTS (SELECT 1 FROM created)
        """,
        {"cid": conversation["id"], "session": conversation["session_no"]},
    ).fetchone()
    assert row is not None, "the counters' row is created or read in the one statement"
    if row["session_no"] != conversation["session_no"]:
        reset_counters(conn, conversation)
        row = conn.execute("SELECT * FROM conversation_counters WHERE conversation_id = %s",
                           (conversation["id"],)).fetchone()
        assert row is not None, "reset_counters keeps the row"
    return row


_COUNTER_FIELDS = {"dissatisfied_streak", "low_confidence_streak", "repeat_count", "last_question",
                   "state_entries", "feedback"}


def save_counters(conn: psycopg.Connection[DictRow], conversation_id, **fields) -> None:
    unknown = set(fields) - _COUNTER_FIELDS
    if unknown:
        raise ValueError(f"unknown counters: {sorted(unknown)}")
    if not fields:
        return
    values = [json.dumps(v) if k == "state_entries" else v for k, v in fields.items()]
    sets = ", ".join(f"{k} = %s" for k in fields)
    conn.execute(f"UPDATE conversation_counters SET {sets}, updated_at = now() WHERE conversation_id = %s",
                 (*values, conversation_id))


def reset_counters(conn: psycopg.Connection[DictRow], conversation: dict[str, Any]) -> None:
    conn.execute(
        """
        INSERT INTO conversation_counters (conversation_id, session_no) VALUES (%s, %s)
        ON CONFLICT (conversation_id) DO UPDATE SET
            session_no = EXCLUDED.session_no, dissatisfied_streak = 0, low_confidence_streak = 0,
            repeat_count = 0, last_question = NULL, state_entries = '{}'::jsonb,
            feedback = NULL, updated_at = now()
        """,
        (conversation["id"], conversation["session_no"]),
    )


# -- the handoff side's view of conversations ---------------------------------------------------

_CLAIM_MOVE_SQL = """, port_conv AS (
        SELECT v.id, v.session_no, v.state AS from_state, 'l3_connected'::text AS to_state,
               'ticket_claimed'::text AS reason, 'handoff'::text AS actor, NULL::bigint AS message_id,
               claimed.id::text AS ticket_id, 1 AS counted
        FROM conversations v JOIN claimed ON v.id = claimed.conversation_id::uuid
        WHERE claimed.kind = 'handoff' AND v.state = 'l3_queuing'
        FOR UPDATE OF v
    ), """ + _move_writes("port_conv")
assert "l3_connected" in TRANSITIONS["l3_queuing"]


class ConversationStatePort:
    """handoff.ports.ConversationPort: ticket changes move the conversation, agents reach the customer.

    Called inside the transaction of the ticket change. A notification that does not apply to
    the conversation's current state (an old ticket, a conversation already handed back) changes
    nothing, so a late or repeated event can never drag a conversation backwards.
    """

    def _conversation(self, conn, ticket) -> dict[str, Any] | None:
        conv = lock_conversation(conn, ticket["conversation_id"])
        if conv is None:
            log.warning("ticket %s names an unknown conversation", ticket.get("id"))
        return conv

    def _move(self, conn, ticket, edges: dict[str, str], reason: str) -> None:
        moved = move_conversation(conn, ticket["conversation_id"], edges, reason=reason, actor="handoff",
                                  ticket_id=ticket.get("id"))
        if moved is not None and moved["to"] == "idle":     # the bot is in charge again: fresh memory
            reset_counters(conn, {"id": ticket["conversation_id"], "session_no": moved["session_no"]})

    def before_ticket_change(self, conn, conversation_id) -> None:
        """Lock the conversation before the ticket is locked.

        The router locks a conversation and then its ticket (a customer message added to it);
        an agent action that locks the ticket first and then, through this port, the
        conversation takes the two in the opposite order, and the two can deadlock. Calling
        this first gives every writer the same order.
        """
        lock_conversation(conn, conversation_id)

    def on_ticket_claimed(self, conn, ticket):
        if ticket.get("kind", "handoff") == "handoff":
            self._move(conn, ticket, {"l3_queuing": "l3_connected"}, "ticket_claimed")

    def claim_sql(self) -> str:
        """on_ticket_claimed as CTEs of the claim's own statement (handoff.ports.ConversationPort.claim_sql):
        :func:`move_conversation`'s writes for l3_queuing -> l3_connected; a conversation in another
        state (or an assist ticket) is left alone."""
        return _CLAIM_MOVE_SQL

    def on_ticket_resolved(self, conn, ticket):
        self._move(conn, ticket, {
            "l3_queuing": "feedback_pending",
            "l3_connected": "feedback_pending",
            "l2_assisting": "l2_resolved",
        }, "ticket_resolved")

    def on_returned_to_bot(self, conn, ticket):
        self._move(conn, ticket, {s: "idle" for s in ("l2_assisting", "l3_queuing", "l3_connected")},
                   "returned_to_bot")

    def on_ticket_requeued(self, conn, ticket):
        """Released, transferred to a team, or the agent's lease lapsed: the customer waits in the queue again."""
        if ticket.get("kind", "handoff") == "handoff":
            self._move(conn, ticket, {"l3_connected": "l3_queuing"}, "ticket_requeued")

    def on_ticket_cancelled(self, conn, ticket):
        self._move(conn, ticket, {s: "idle" for s in ("l2_assisting", "l3_queuing", "l3_connected")},
                   "ticket_cancelled")
        instance_id = (ticket.get("draft") or {}).get("instance_id")
        if ticket.get("kind") == "approval" and instance_id:
            # cancelled by staff: the waiting flow ends too and the customer hears it (a flow the customer
            # cancelled is over already: the engine answers without a reply and nothing is sent twice)
            if self.flows is None:
                raise DeliveryUnavailable("no workflow engine is wired: the waiting request cannot be ended")
            try:
                turn = self.flows.cancel(conn, str(instance_id), reason="approval ticket cancelled")
            except KeyError:    # the flow row is gone (erased): nothing waits any more
                log.warning("approval ticket %s names an unknown flow %s", ticket.get("id"), instance_id)
                return
            if turn.outcome == "cancelled":
                self._tell_customer(conn, ticket, turn)

    flows: Any = None    # the workflow engine (set by the composition root when workflows are wired)

    def on_approval_decided(self, conn, ticket, *, approved, approver, reason=None):
        """An approver decided an ``approval`` ticket: the waiting workflow resumes in this transaction
        (the approved call runs now, exactly once) and its reply is queued to the customer."""
        instance_id = (ticket.get("draft") or {}).get("instance_id")
        if self.flows is None or not instance_id:
            raise DeliveryUnavailable("no workflow engine is wired: the approval cannot be applied")
        turn = self.flows.resolve_approval(conn, str(instance_id), approved, approver, reason)
        if turn.outcome != "already_resolved" and turn.status not in ("waiting", "waiting_approval"):
            # the task ended with the decision: the one it interrupted or kept for after it ("... and an invoice
            # for 100240") takes the floor, in the same reply
            following = self.flows.resume(conn, str(ticket["conversation_id"]), None)
            if following is not None:
                turn.reply = "\n\n".join(x for x in (turn.reply, following.reply) if x)
        self._tell_customer(conn, ticket, turn)
        return {"workflow": turn.as_response(), "outcome": turn.outcome}

    def pending_action(self, conn, ticket):
        """The action a flow of the ticket's conversation stopped at (a person may finish it), or None."""
        if self.flows is None:
            return None
        return self.flows.pending(conn, str(ticket["conversation_id"]))

    def complete_pending(self, conn, ticket, *, instance_id, arguments, actor):
        """An agent confirms the stopped action for the customer: the flow goes on in this transaction (its tool
        call audited under the agent) and its reply, true to the tool's real result, is queued to the customer."""
        # no workflow engine: nothing can have stopped for a confirmation (pending_action says None), so the answer
        # is the one for nothing waiting (409), not an outage
        pending = None if self.flows is None else self.flows.pending(conn, str(ticket["conversation_id"]))
        if pending is None or pending["instance_id"] != str(instance_id):
            turn = None
        else:
            turn = self.flows.complete_pending(conn, str(instance_id), arguments, actor=actor)
        if turn is None or turn.outcome == "already_resolved":
            return {"done": False, "outcome": "already_resolved", "workflow": None, "reply": None, "tools": []}
        self._tell_customer(conn, ticket, turn)
        return {"done": True, "outcome": turn.outcome, "workflow": turn.as_response(), "reply": turn.reply,
                "tools": [{"step": t.step, "status": t.tool_status} for t in turn.trace if t.tool_status]}

    def _tell_customer(self, conn, ticket, turn) -> None:
        """Queue a workflow's reply after a ticket decision through :meth:`_send`, as an agent message goes:
        a customer who asked not to be contacted (or an unknown conversation) gets nothing, and the decision
        itself still stands."""
        if not turn.reply:
            return
        try:
            self._send(conn, ticket, text=turn.reply, sender="bot", kind="reply",
                       payload={"ticket_id": str(ticket.get("id")), "workflow": turn.as_response()})
        except CustomerUnreachable as exc:
            log.info("workflow reply for ticket %s not sent: %s", ticket.get("id"), exc)

    def reveal_value(self, conn, ticket, *, message_id, start, end):
        """One masked value's original, from the message of the ticket's conversation, only where the
        detector finds a personal value exactly at ``start:end`` (a reference never reads other text)."""
        from text import personal

        row = conn.execute("SELECT text FROM messages WHERE id = %s AND conversation_id::text = %s",
                           (message_id, str(ticket.get("conversation_id")))).fetchone()
        if row is None or not row["text"]:
            raise OriginalGone(f"message {message_id} of this conversation is not stored (erased or unknown)")
        for span in personal.find(row["text"]):
            if span.start == start and span.end == end:
                return span.value
        raise OriginalGone(f"message {message_id} holds no personal value at {start}-{end}")

    def _send(self, conn, ticket, *, text: str, sender: str, kind: str, payload: dict[str, Any]) -> dict[str, int]:
        """Queue ``text`` to the ticket's customer (conversation locked first) through the outbox's one send
        path, :func:`~router.outbox.store.enqueue_outbound`, which checks do-not-contact; CustomerUnreachable
        when it refuses or the conversation does not exist."""
        conv = self._conversation(conn, ticket)
        if conv is None:
            raise CustomerUnreachable(f"conversation {ticket.get('conversation_id')} does not exist")
        ids = enqueue_outbound(conn, conversation_id=conv["id"], channel=conv["channel"], text=text,
                               sender=sender, kind=kind, payload=payload)
        if ids is None:
            raise CustomerUnreachable("the customer asked not to be contacted (STOP); nothing was sent")
        return ids

    def send_to_customer(self, conn, ticket, *, text, sender, agent_id):
        """Transcript + outbox row in the ticket change's transaction; refused for do-not-contact customers."""
        return self._send(conn, ticket, text=text, sender=sender, kind="agent_message",
                          payload={"ticket_id": str(ticket.get("id")), "agent_id": agent_id})
