"""``POST /v1/messages``: the generic message webhook."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from router.app.api.deps import ServicesDep
from router.problems import Problem
from router.schemas import InboundMessage, MessageIn, TurnOut

router = APIRouter(prefix="/v1", tags=["messages"])


@router.post(
    "/messages",
    response_model=TurnOut,
    summary="Route one customer message",
    description="Idempotent on (channel, message_id): a retry returns the first answer and stores nothing new "
    "(the response then carries `Idempotent-Replayed: true`).",
    responses={413: {"description": "Body or text too large"}, 422: {"description": "Malformed"}},
)
async def post_message(body: MessageIn, services: ServicesDep, response: Response):
    limit = services.settings.max_text_chars
    if len(body.text) > limit:
        raise Problem(413, f"The message text has {len(body.text)} characters; the limit is {limit}.",
                      title="Content Too Large")
    result, replayed = await run_in_threadpool(services.pipeline.handle, InboundMessage.from_api(body))
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return result
