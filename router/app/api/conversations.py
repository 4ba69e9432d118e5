"""``/v1/conversations/{id}``: the turn-by-turn trace (supervisors) and CSAT feedback (customers)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from handoff.api import ProblemRoute, require_roles
from router.turn import state as sm
from router.app.api.auth import ConversationTokenDep, OptionalKeyDep, feedback_secret_of, unauthorized
from router.app.api.deps import ServicesDep
from router.app.keys import feedback_token_ok
from router.problems import Problem
from router.ops.trace import AmbiguousConversation, find_conversation, load_trace
from text import personal

router = APIRouter(prefix="/v1/conversations", tags=["conversations"], route_class=ProblemRoute)

_PROBLEM = {"content": {"application/problem+json": {}}}


# Agent tokens and roles live in the handoff service; without it nobody can be authorised.
TraceReader = Annotated[Any, Depends(require_roles(
    "admin", "supervisor", missing="Traces need agent tokens, and the handoff service is not configured."))]


@router.get(
    "/{conversation_id}/trace",
    summary="Replay a conversation turn by turn",
    description="Each turn with its stages and timings, the classification and escalation verdicts, the "
    "decision explanation, the retrieval candidates with scores, the state transitions, the reply and what was "
    "delivered, and ticket events in between. Personal data is masked. Needs an admin or supervisor token. "
    "The conversation is named by its internal id or by the client's conversation_id (with ?channel= when "
    "several channels use it).",
    responses={401: {"description": "No or invalid token", **_PROBLEM},
               403: {"description": "Not an admin or supervisor", **_PROBLEM},
               404: {"description": "No such conversation", **_PROBLEM},
               409: {"description": "The client's id is used on several channels: pass ?channel=", **_PROBLEM}},
)
async def get_trace(services: ServicesDep, who: TraceReader,
                    conversation_id: str = PathParam(min_length=1, max_length=200,
                                                     description="The internal id, or the client's conversation id"),
                    channel: str | None = Query(None, max_length=32, description="The channel of a client's "
                                                "conversation id (needed when several channels use it)")
                    ) -> dict[str, Any]:
    def load():
        flush = getattr(services.tools, "flush_audit", None)
        if flush is not None:
            flush(2.0)   # the tool calls of a turn just answered are written by the audit thread
        with services.pool.connection() as conn:
            found = find_conversation(conn, conversation_id, channel)
            return None if found is None else load_trace(conn, found)

    try:
        replay = await run_in_threadpool(load)
    except AmbiguousConversation as exc:
        raise Problem(409, f"{exc} with ?channel=.") from None
    if replay is None:
        raise Problem(404, f"There is no conversation {conversation_id}.")
    return replay


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    csat: int = Field(ge=1, le=5, description="Customer satisfaction, 1 (very unhappy) to 5 (very happy).")
    comment: str | None = Field(default=None, max_length=2000)
    turn_id: uuid.UUID | None = Field(default=None, description="The answer being rated; its session is rated.")
    source: str = Field(default="api", pattern=r"^[a-z][a-z0-9_-]{0,31}$",
                        description="Where the rating came from (widget, survey, channel name).")


class FeedbackOut(BaseModel):
    conversation_id: str
    session_no: int
    csat: int
    comment: str | None
    turn_id: str | None
    state: str = Field(description="The conversation's state after the rating (a resolved session is closed).")
    created_at: str


def record_feedback(conn, conversation_id: str, body: FeedbackIn) -> tuple[dict[str, Any], bool]:
    """Store one session's rating in one transaction; returns (row, created).

    The session is the one of ``turn_id`` when given, else the conversation's current one. A resolved
    session (answer given, ticket resolved) is closed by the rating, as the state machine prescribes. The
    comment is stored (and echoed) masked, as every other sink keeps a customer's words.
    """
    comment = personal.mask(body.comment)
    with conn.transaction():
        conv = sm.lock_conversation(conn, conversation_id)
        if conv is None:
            raise Problem(404, f"There is no conversation {conversation_id}.")
        session_no = conv["session_no"]
        if body.turn_id is not None:
            turn = conn.execute("SELECT session_no FROM turns WHERE id = %s AND conversation_id = %s",
                                (str(body.turn_id), conversation_id)).fetchone()
            if turn is None:
                raise Problem(422, f"Turn {body.turn_id} is not a turn of conversation {conversation_id}.")
            session_no = turn["session_no"]
        row = conn.execute(
            """
            INSERT INTO feedback (conversation_id, session_no, turn_id, csat, comment, source)
            VALUES (%s, %s, %s, %s, %s, %s)
            ON CONFLICT (conversation_id, session_no) DO NOTHING
            RETURNING conversation_id, session_no, turn_id, csat, comment, created_at
            """,
            (conversation_id, session_no, str(body.turn_id) if body.turn_id else None, body.csat, comment,
             body.source),
        ).fetchone()
        created = row is not None
        if not created:
            row = conn.execute(
                "SELECT conversation_id, session_no, turn_id, csat, comment, created_at FROM feedback "
                "WHERE conversation_id = %s AND session_no = %s",
                (conversation_id, session_no),
            ).fetchone()
            same = (row["csat"], row["comment"], str(row["turn_id"]) if row["turn_id"] else None) == \
                (body.csat, comment, str(body.turn_id) if body.turn_id else None)
            if not same:
                raise Problem(409, f"Session {session_no} of this conversation was already rated {row['csat']}.",
                              title="Conflict", existing={"csat": row["csat"], "comment": row["comment"]})
        elif session_no == conv["session_no"] and conv["state"] in sm.RESOLVED:
            if conv["state"] != "feedback_pending":
                sm.transition(conn, conv, "feedback_pending", reason="csat_feedback")
            sm.transition(conn, conv, "closed", reason="csat_feedback")
    out = {"conversation_id": str(row["conversation_id"]), "session_no": row["session_no"], "csat": row["csat"],
           "comment": row["comment"], "turn_id": str(row["turn_id"]) if row["turn_id"] else None,
           "state": conv["state"], "created_at": row["created_at"].isoformat()}
    return out, created


@router.post(
    "/{conversation_id}/feedback",
    response_model=FeedbackOut,
    status_code=201,
    summary="Rate a conversation session (CSAT 1-5)",
    description="Needs an integration key that lists the conversation's channel, or the conversation's "
    "`X-Conversation-Token` (the `feedback_token` of a message answer). One rating per session. Repeating the same rating answers 200 with `Idempotent-Replayed: true`; "
    "a different rating for an already rated session is 409. Rating a resolved session closes it.",
    responses={200: {"description": "The same rating was already stored"},
               401: {"description": "No key or token, or a wrong one", **_PROBLEM},
               403: {"description": "The key may not rate this conversation's channel", **_PROBLEM},
               404: {"description": "No such conversation", **_PROBLEM},
               409: {"description": "The session was already rated differently", **_PROBLEM},
               422: {"description": "Malformed, or the turn is not in this conversation", **_PROBLEM}},
)
async def post_feedback(conversation_id: uuid.UUID, body: FeedbackIn, services: ServicesDep,
                        response: Response, key: OptionalKeyDep,
                        conversation_token: ConversationTokenDep,
                        secret: bytes = Depends(feedback_secret_of)) -> dict[str, Any]:
    if key is None and conversation_token is None:
        raise unauthorized("Rating needs an integration key or the conversation's X-Conversation-Token.")
    if key is None and not feedback_token_ok(secret, str(conversation_id), conversation_token):
        raise unauthorized("The X-Conversation-Token is not this conversation's.")

    def store():
        with services.pool.connection() as conn:
            if key is not None:
                row = conn.execute("SELECT channel FROM conversations WHERE id = %s",
                                   (str(conversation_id),)).fetchone()
                if row is None:
                    raise Problem(404, f"There is no conversation {conversation_id}.")
                if not key.may_post(row["channel"]):
                    raise Problem(403, f"This integration key may not rate conversations of {row['channel']}.")
            return record_feedback(conn, str(conversation_id), body)

    out, created = await run_in_threadpool(store)
    if created:
        services.metrics.csat.labels(str(out["csat"])).inc()
    else:
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"
    return out
