"""``POST /v1/handoff/tickets/{id}/reveal``: one masked personal value in clear, for a reason (handoff.reveal)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from handoff.api.deps import CallerDep, ProblemRoute, doc
from handoff.refs import REF
from handoff.reveal import REASON_MAX, REASON_MIN, reveal
from text.content import NOT_SPACE

# REASON_MIN characters once white space is stripped, as the service counts them (two characters that are not
# white space, REASON_MIN - 1 apart), and no NUL
REASON_PATTERN = rf"^[^\x00]*{NOT_SPACE}[^\x00]{{{REASON_MIN - 2},}}{NOT_SPACE}[^\x00]*$"


class RevealIn(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    ref: str = Field(pattern=REF.pattern, max_length=60, description="A `personal[].ref` of the ticket's "
                     "context package or events (`m<message id>:<start>-<end>`).")
    reason: str = Field(min_length=REASON_MIN, max_length=REASON_MAX, pattern=REASON_PATTERN, description="Why the value is needed: "
                        "recorded in the ticket's events and the audit log.")


class RevealOut(BaseModel):
    ticket_id: str
    ref: str
    label: str | None = None
    value: str = Field(description="The value in clear, as the customer wrote it.")
    event_id: int = Field(description="The `pii_revealed` event that records this reveal.")


router = APIRouter(prefix="/v1/handoff", tags=["handoff"], route_class=ProblemRoute, responses=doc(401, 422))


@router.post("/tickets/{ticket_id}/reveal", response_model=RevealOut,
             summary="Reveal one masked personal value, for a reason",
             description="The context package and events show personal data masked; each masked value of a "
                         "message has a `ref`. Needs the reveal permission (supervisors, admins, granted agents; "
                         "an agent must hold the ticket). Recorded as a `pii_revealed` event (who, which ref, "
                         "why; never the value) and in the audit log. Not cached.",
             responses=doc(403, 404, 409, 503))
async def reveal_value(ticket_id: UUID, body: RevealIn, call: CallerDep, response: Response) -> dict[str, Any]:
    response.headers["Cache-Control"] = "no-store"
    return await call.run(lambda agent: reveal(call.svc, agent, ticket_id, ref=body.ref, reason=body.reason))
