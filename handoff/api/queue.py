"""The queue as a whole: who am I, take the best ticket, statistics."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Response

from handoff.api.deps import CallerDep, ProblemRoute, doc
from handoff.schemas import AgentOut, ClaimNextIn, StatsOut, Ticket

router = APIRouter(prefix="/v1/handoff", tags=["handoff"], route_class=ProblemRoute, responses=doc(401, 422))


@router.get("/me", response_model=AgentOut, summary="The agent the token belongs to")
async def me(call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: agent.public())


@router.post("/claim-next", response_model=Ticket, summary="Atomically take the best ticket you may work on",
             description="The most pressing visible ticket (priority, SLA due, age) that has no holder and "
                         "whose skills you have. Concurrent callers never get the same ticket. 204 when the "
                         "queue is empty. Heartbeat before `lease_expires_at` to keep it.",
             responses=doc(204, 403))
async def claim_next(call: CallerDep,
                     body: Annotated[ClaimNextIn | None, Body()] = None) -> Response | dict[str, Any]:
    body = body or ClaimNextIn()
    ticket = await call.run(lambda agent: call.svc.claim_next(agent, kind=body.kind, team=body.team))
    if ticket is None:
        return Response(status_code=204)
    return ticket


@router.get("/stats", response_model=StatsOut, summary="Queue statistics",
            description="Depth by kind, team and priority, the oldest wait, SLA breaches; over your teams "
                        "(supervisors and admins: all).")
async def stats(call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.stats(agent))
