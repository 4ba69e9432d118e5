"""Replay of a conversation, turn by turn, from what Postgres recorded.

Every inbound message produced one ``turns`` row whose ``trace`` holds the stage timings, the
classification and escalation verdicts, the retrieval candidates and the state transitions of
that turn (stored redacted by the pipeline). This module joins it with what happened around
it — the transition history, the tool calls the turn made (``tool_calls``, from the gateway's audit), what
was sent back and whether it was delivered, ticket events (an agent claiming, answering, resolving), CSAT — so a bad reply can be located and explained
after the fact. Personal data is masked in everything returned.
"""

from __future__ import annotations

import uuid

from bisect import bisect_right
from datetime import datetime
from typing import Any

import psycopg

from automation.workflows.store import conversation_flows
from handoff.queries import conversation_ticket_events
from router.outbox.store import deliveries_by_message
from router.telemetry.logs import BUSINESS_KEYS, redact, redact_obj

# stage order of a turn as the router runs it; anything else recorded is appended after these
STAGE_ORDER = ("harness", "rules", "classify", "embedding", "retrieval", "rerank", "answer", "handoff", "decide")
# sub-stages of retrieval as the knowledge base reports them
RETRIEVAL_ORDER = ("rewrite", "bm25", "encode", "dense", "fuse", "rerank", "fetch", "answer", "total")


def _ordered(timings: dict[str, float], order: tuple[str, ...]) -> list[tuple[str, float]]:
    known = [(k, timings[k]) for k in order if k in timings]
    return known + [(k, v) for k, v in timings.items() if k not in order]


def _stages(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The turn's stages in run order with milliseconds; retrieval carries its own breakdown."""
    timings = trace.get("timings_ms") or {}
    rag = trace.get("rag") or {}
    out = []
    for name, ms in _ordered(timings, STAGE_ORDER):
        stage: dict[str, Any] = {"stage": name, "ms": ms}
        if name == "classify" and trace.get("classification"):
            stage["decided_by"] = trace["classification"].get("decided_by")
        if name == "retrieval" and rag.get("timings_ms"):
            stage["breakdown"] = [{"stage": k, "ms": v} for k, v in _ordered(rag["timings_ms"], RETRIEVAL_ORDER)]
        out.append(stage)
    return out


def _retrieval(trace: dict[str, Any], chunks: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    rag = trace.get("rag")
    if not rag:
        return None
    candidates = []
    for rank, p in enumerate(rag.get("passages") or [], 1):
        meta = chunks.get(p.get("chunk_id"), {})
        candidates.append({"rank": rank, "chunk_id": p.get("chunk_id"), "score": p.get("score"),
                           **{k: meta.get(k) for k in ("doc_id", "title", "section", "lang") if meta.get(k)}})
    return {"answered": rag.get("answered"), "confidence": rag.get("confidence"), "reason": rag.get("reason"),
            "candidates": candidates}


def _flow(trace: dict[str, Any]) -> dict[str, Any] | None:
    """The workflow's part of a turn: the flow's state after it and each step run, with its own time."""
    wf = trace.get("workflow")
    if not wf:
        return None
    return {"workflow": wf.get("workflow"), "instance_id": wf.get("instance_id"), "status": wf.get("status"),
            "step": wf.get("step"), "awaiting": wf.get("awaiting"), "outcome": wf.get("outcome"),
            "drift": wf.get("drift"), "failure": wf.get("failure"), "steps": wf.get("steps") or []}


def _tool_calls(conn, conversation_id: str, turns: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int | None]]:
    """Every audited tool call of the conversation (redacted when written) with the index of its turn, or
    None for a call made outside a turn; in the order they happened."""
    from automation.tools.audit import calls_for_turns, calls_outside, summarise

    index = {t["turn_id"]: i for i, t in enumerate(turns)}
    out = []
    for turn_id, rows in calls_for_turns(conn, list(index)).items():
        out.extend((c, index[turn_id]) for c in summarise(rows))
    out.extend((c, None) for c in summarise(calls_outside(conn, conversation_id, list(index))))
    return out


class AmbiguousConversation(LookupError):
    """The client's conversation id is used on more than one channel: the channel must be named."""

    def __init__(self, reference: str, channels: list[str]):
        self.channels = channels
        super().__init__(f"conversation {reference!r} exists on channels {', '.join(channels)}: name the channel")


def find_conversation(conn: psycopg.Connection, reference: str, channel: str | None = None) -> str | None:
    """The internal id of a conversation named by its internal UUID or by the client's id (the
    ``conversation_id`` a channel or the API sent, per ``channel``); None when there is none."""
    try:
        as_uuid = str(uuid.UUID(reference))
    except ValueError:
        as_uuid = None
    if as_uuid is not None and channel is None:
        row = conn.execute("SELECT id FROM conversations WHERE id = %s", (as_uuid,)).fetchone()
        if row is not None:
            return str(_first(row))
    if channel is not None:
        row = conn.execute("SELECT id FROM conversations WHERE channel = %s AND external_id = %s",
                           (channel, reference)).fetchone()
        return None if row is None else str(_first(row))
    rows = conn.execute("SELECT id, channel FROM conversations WHERE external_id = %s ORDER BY channel LIMIT 20",
                        (reference,)).fetchall()
    if len(rows) > 1:
        raise AmbiguousConversation(reference, [r["channel"] if isinstance(r, dict) else r[1] for r in rows])
    return str(_first(rows[0])) if rows else None


def _first(row):
    return row["id"] if isinstance(row, dict) else row[0]


def load_trace(conn: psycopg.Connection, conversation_id: str) -> dict[str, Any] | None:
    """The replay of one conversation (``None`` when there is no such conversation)."""
    conv = conn.execute(
        "SELECT id, channel, external_id, customer_id, state, session_no, created_at, updated_at "
        "FROM conversations WHERE id = %s",
        (conversation_id,),
    ).fetchone()
    if conv is None:
        return None
    turns = conn.execute(
        """
        SELECT t.id, t.message_id, t.session_no, t.state, t.decision, t.response, t.trace, t.created_at,
               m.external_id AS message_external_id, m.text, m.received_at
        FROM turns t JOIN messages m ON m.id = t.message_id
        WHERE t.conversation_id = %s ORDER BY t.message_id
        """,
        (conversation_id,),
    ).fetchall()
    inbound_ids = [r["id"] for r in conn.execute(
        "SELECT id FROM messages WHERE conversation_id = %s AND direction = 'in' ORDER BY id", (conversation_id,))]
    outbound = conn.execute(
        "SELECT id, sender, text, received_at FROM messages WHERE conversation_id = %s AND direction = 'out' "
        "ORDER BY id",
        (conversation_id,),
    ).fetchall()
    deliveries = deliveries_by_message(conn, conversation_id)
    transitions = conn.execute(
        "SELECT id, session_no, from_state, to_state, reason, actor, message_id, ticket_id, created_at "
        "FROM conversation_transitions WHERE conversation_id = %s ORDER BY id",
        (conversation_id,),
    ).fetchall()
    ticket_events = conversation_ticket_events(conn, conversation_id)
    feedback = conn.execute(
        "SELECT session_no, turn_id, csat, comment, created_at FROM feedback WHERE conversation_id = %s "
        "ORDER BY session_no",
        (conversation_id,),
    ).fetchall()

    chunk_ids = {p.get("chunk_id") for t in turns for p in ((t["trace"] or {}).get("rag") or {}).get("passages") or []}
    from rag.generations import chunk_metadata   # here: rag's index code is heavy to import

    chunks = chunk_metadata(conn, {c for c in chunk_ids if c})

    # everything that happened after a turn and before the next inbound message belongs to it
    turn_of_message = {t["message_id"]: i for i, t in enumerate(turns)}
    turn_starts = [t["created_at"] for t in turns]

    def owner_by_message(message_id: int) -> int | None:
        """The turn whose inbound message precedes ``message_id`` (ids grow within a conversation)."""
        pos = bisect_right(inbound_ids, message_id) - 1
        while pos >= 0 and inbound_ids[pos] not in turn_of_message:
            pos -= 1
        return turn_of_message[inbound_ids[pos]] if pos >= 0 else None

    def owner_by_time(at) -> int | None:
        pos = bisect_right(turn_starts, at) - 1
        return pos if pos >= 0 else None

    out_turns: list[dict[str, Any]] = []
    for t in turns:
        trace = t["trace"] or {}
        response = t["response"] or {}
        out_turns.append({
            "turn_id": str(t["id"]),
            "session_no": t["session_no"],
            "at": t["created_at"].isoformat(),
            "inbound": {"message_id": t["message_id"], "external_id": t["message_external_id"], "text": t["text"],
                        "received_at": t["received_at"].isoformat()},
            "stages": _stages(trace),
            "harness": trace.get("harness"),
            "classification": trace.get("classification"),
            "decision": t["decision"],
            "escalation": trace.get("escalation"),
            "retrieval": _retrieval(trace, chunks),
            "tool_calls": [],
            "ticket": trace.get("ticket") or ({"added_to": trace["added_to_ticket"]}
                                              if trace.get("added_to_ticket") else None),
            "flow": _flow(trace),
            "state_after": t["state"],
            "transitions": [],
            "reply": response.get("reply"),
            "outbound": [],
            "events_after": [],
        })
    unowned: list[dict[str, Any]] = []
    for tr in transitions:
        item = {"from": tr["from_state"], "to": tr["to_state"], "reason": tr["reason"], "actor": tr["actor"],
                "ticket_id": tr["ticket_id"], "at": tr["created_at"].isoformat()}
        if tr["message_id"] in turn_of_message:
            out_turns[turn_of_message[tr["message_id"]]]["transitions"].append(item)
        else:
            i = owner_by_time(tr["created_at"])
            (out_turns[i]["events_after"] if i is not None else unowned).append({"type": "transition", **item})
    for ev in ticket_events:
        item = {"type": "ticket_event", "ticket_id": str(ev["ticket_id"]), "kind": ev["kind"], "action": ev["action"],
                "actor": ev["actor"], "payload": ev["payload"], "at": ev["at"].isoformat()}
        i = owner_by_time(ev["at"])
        (out_turns[i]["events_after"] if i is not None else unowned).append(item)
    for m in outbound:
        i = owner_by_message(m["id"])
        for o in deliveries.get(m["id"]) or [None]:    # a message written without an outbox row: no delivery
            item = {"message_id": m["id"], "sender": m["sender"], "text": m["text"],
                    "kind": None if o is None else o["kind"],
                    "at": m["received_at"].isoformat(),
                    "delivery": None if o is None else {
                        "outbox_id": o["outbox_id"], "status": o["status"], "attempts": o["attempts"],
                        "last_error": o["last_error"], "provider_message_id": o["provider_message_id"],
                        "delivered_at": o["delivered_at"].isoformat() if o["delivered_at"] else None,
                        "dead_at": o["dead_at"].isoformat() if o["dead_at"] else None,
                        "parts": o["parts"],    # set when the text went out in several parts
                        "receipt": None if o["receipt_status"] is None else {
                            "status": o["receipt_status"], "error": o["receipt_error"],
                            "at": o["receipt_at"].isoformat() if o["receipt_at"] else None}}}
            (out_turns[i]["outbound"] if i is not None else unowned).append({"type": "outbound", **item})
    for call, owner in _tool_calls(conn, conversation_id, out_turns):
        if owner is not None:
            out_turns[owner]["tool_calls"].append(call)
        else:   # made outside a turn (a flow resumed by an approver's decision): where it happened
            i = owner_by_time(datetime.fromisoformat(call["created_at"]))
            (out_turns[i]["events_after"] if i is not None else unowned).append(
                {"type": "tool_call", "at": call["created_at"], **call})
    for turn in out_turns:
        turn["events_after"].sort(key=lambda e: e["at"])

    sessions: dict[int, dict[str, Any]] = {}
    for turn in out_turns:
        s = sessions.setdefault(turn["session_no"], {"session_no": turn["session_no"], "turns": 0,
                                                     "started_at": turn["at"], "feedback": None})
        s["turns"] += 1
    for f in feedback:
        s = sessions.setdefault(f["session_no"], {"session_no": f["session_no"], "turns": 0, "started_at": None,
                                                  "feedback": None})
        s["feedback"] = {"csat": f["csat"], "comment": redact(f["comment"]),
                         "turn_id": str(f["turn_id"]) if f["turn_id"] else None, "at": f["created_at"].isoformat()}

    replay = {
        "conversation": {
            "id": str(conv["id"]), "channel": conv["channel"], "external_id": conv["external_id"],
            "customer_id": conv["customer_id"], "state": conv["state"], "session_no": conv["session_no"],
            "created_at": conv["created_at"].isoformat(), "updated_at": conv["updated_at"].isoformat(),
        },
        "sessions": [sessions[k] for k in sorted(sessions)],
        "turns": out_turns,
        "flows": conversation_flows(conn, conversation_id),
        "events_before_first_turn": unowned,
    }
    # the stored traces are redacted already; messages, replies, agent texts and ids are not
    return redact_obj(replay, keep=BUSINESS_KEYS)
