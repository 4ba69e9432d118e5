"""``POST /v1/messages``: the direct message API, for integration-key holders."""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends, Request, Response
from typing import Literal

from pydantic import Field

from router.app.api.auth import KeyDep, feedback_secret_of
from router.app.api.deps import ServicesDep
from router.app.keys import feedback_token
from router.app.turn_threads import run_turn
from router.problems import PROBLEM_JSON, Problem
from router.channels.registry import CHANNELS
from router.schemas import InboundMessage, MessageBody, TurnOut

router = APIRouter(prefix="/v1", tags=["messages"])


class MessageIn(MessageBody):
    """The direct API's message: its channel is one of the channel registry's (the schema's enum), else 422."""

    channel: Literal[CHANNELS] = Field(examples=["web"], description="A known channel; the integration key "  # type: ignore[valid-type]
                                       "must list it.")


class MessageOut(TurnOut):
    feedback_token: str = Field(description="Lets this client rate the conversation: send it as "
                                "X-Conversation-Token to POST /v1/conversations/{conversation_id}/feedback.")

_PROBLEM = {"content": {PROBLEM_JSON: {}}}


def turn_json(response: dict) -> str:
    """The one serialisation of a turn's answer: the first answer and every replay are the same bytes."""
    return json.dumps(response, ensure_ascii=False, separators=(",", ":"))




@router.post(
    "/messages",
    response_model=MessageOut,
    summary="Route one customer message",
    description="Needs an integration key that lists the message's channel. Idempotent on (channel, message_id): "
    "a retry with the same conversation, customer and text returns the first answer byte for byte and stores "
    "nothing new (header `Idempotent-Replayed: true`); the same message id with anything else is 409.",
    responses={
        200: {"description": "The turn (links: router.app.api.openapi)"},
        401: {"description": "No, unknown or revoked integration key", "headers": {
            "WWW-Authenticate": {"schema": {"type": "string"}}}, **_PROBLEM},
        403: {"description": "The key may not post this channel", **_PROBLEM},
        409: {"description": "The message id is taken by another message", **_PROBLEM},
        413: {"description": "Body or text too large", **_PROBLEM},
        422: {"description": "Malformed", **_PROBLEM},
        429: {"description": "Too many messages from this customer; retry after Retry-After", **_PROBLEM},
    },
)
async def post_message(body: MessageIn, services: ServicesDep, key: KeyDep, request: Request,
                       secret: bytes = Depends(feedback_secret_of)) -> Response:
    if not key.may_post(body.channel):
        raise Problem(403, f"This integration key may post to {', '.join(key.channels)}, not {body.channel}.")
    limit = services.settings.max_text_chars
    if len(body.text) > limit:
        raise Problem(413, f"The message text has {len(body.text)} characters; the limit is {limit}.",
                      title="Content Too Large")
    inbound = InboundMessage.from_api(body, integration_key_id=key.id)
    # on a turn thread (router.app.turn_threads): a turn waiting on a slow shop takes none of the app's others
    result, replayed = await run_turn(request.app.state, services.metrics, services.pipeline.handle, inbound)
    answer = {**result, "feedback_token": feedback_token(secret, str(result["conversation_id"]))}
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return Response(turn_json(answer), media_type="application/json", headers=headers)
