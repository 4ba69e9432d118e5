"""Tickets: list and read them, claim and keep a lease, talk to the customer, decide drafts, close."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Body, Query, Response
from pydantic import StringConstraints

from handoff.api.deps import CallerDep, IdemKey, ProblemRoute, doc, replayed
from handoff.schemas import (
    ActionOut,
    CancelIn,
    EventPage,
    HeartbeatOut,
    Kind,
    NoteIn,
    Priority,
    RejectIn,
    ReleaseIn,
    ResolveIn,
    Status,
    TextIn,
    Ticket,
    TicketPage,
    TransferIn,
    View,
)

Language = Annotated[str, StringConstraints(pattern=r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$")]
Channel = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]
Tag = Annotated[str, StringConstraints(pattern=r"^[\w][\w.-]{0,31}$")]

router = APIRouter(prefix="/v1/handoff/tickets", tags=["handoff"], route_class=ProblemRoute,
                   responses=doc(401, 422))


@router.get("", response_model=TicketPage, summary="List tickets in queue order",
            description="Sorted by priority (urgent first), then SLA due time, then age. Default: open tickets "
                        "(queued and claimed). Agents see only their teams (asking for another team is 403). "
                        "Page with `cursor` = the previous page's `next_cursor`.",
            responses=doc(403))
async def list_tickets(
    call: CallerDep,
    status: Annotated[list[Status] | None, Query(description="Repeatable; default queued+claimed")] = None,
    kind: Annotated[list[Kind] | None, Query()] = None,
    team: Annotated[list[str] | None, Query()] = None,
    priority: Annotated[list[Priority] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=1000, description=(
        "The next_cursor of a previous page, as given; any other value is 422."))] = None,
    view: Annotated[View, Query(description="mine: held by you; unassigned: nobody holds it; all")] = "all",
    q: Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]*$", description=(
        "Search: reason, customer id or name, ticket id, the customer's messages (case-insensitive)"))] = None,
    language: Annotated[list[Language] | None, Query(description="The customer's language; repeatable")] = None,
    channel: Annotated[list[Channel] | None, Query(description="Repeatable")] = None,
    tag: Annotated[list[Tag] | None, Query(description="Tickets with any of these tags; repeatable")] = None,
    hold: Annotated[list[Literal["open", "pending", "on_hold"]] | None, Query(description=(
        "open: not waiting; pending: waiting for the customer; on_hold: waiting on someone else"))] = None,
) -> dict[str, Any]:
    items, next_cursor = await call.run(lambda agent: call.svc.list_tickets(
        agent, status=status, kind=kind, team=team, priority=priority, limit=limit, cursor=cursor, view=view,
        q=q, language=language, channel=channel, tag=tag, hold=hold))
    return {"items": items, "next_cursor": next_cursor}

@router.get("/{ticket_id}", response_model=Ticket, summary="One ticket with its context package",
            responses=doc(403, 404))
async def get_ticket(ticket_id: UUID, call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.get_ticket(agent, ticket_id))

@router.get("/{ticket_id}/events", response_model=EventPage, summary="The ticket's audit trail",
            description="Append-only: who did what, when (customer messages while a human holds the "
                        "conversation appear here too). Oldest first; page with `after`.",
            responses=doc(403, 404))
async def ticket_events(ticket_id: UUID, call: CallerDep,
                  after: Annotated[int | None, Query(ge=0)] = None,
                  limit: Annotated[int, Query(ge=1, le=500)] = 100) -> dict[str, Any]:
    items, next_after = await call.run(lambda agent: call.svc.ticket_events(agent, ticket_id, after=after,
                                                                            limit=limit))
    return {"items": items, "next_after": next_after}

@router.post("/{ticket_id}/claim", response_model=Ticket, summary="Take a given ticket",
             description="Claiming a ticket you already hold renews its lease.", responses=doc(403, 404, 409))
async def claim(ticket_id: UUID, call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.claim(agent, ticket_id))

@router.post("/{ticket_id}/heartbeat", response_model=HeartbeatOut, summary="Extend your lease",
             description="409 when the lease was lost: it expired and the ticket went back to the queue.",
             responses=doc(403, 404, 409))
async def heartbeat(ticket_id: UUID, call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.heartbeat(agent, ticket_id))

@router.post("/{ticket_id}/release", response_model=Ticket, summary="Put a ticket back in the queue",
             responses=doc(403, 404, 409))
async def release(ticket_id: UUID, call: CallerDep,
                  body: Annotated[ReleaseIn | None, Body()] = None) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.release(agent, ticket_id, reason=(body.reason if body else None)))

@router.post("/{ticket_id}/transfer", response_model=Ticket, summary="Transfer to a team or an agent",
             description="To a team: the ticket is queued there; the team must exist (an active agent works in "
                         "it, or it is the default team), else 404 naming it. To an agent: they hold it at once "
                         "(they must be in the ticket's team).", responses=doc(403, 404, 409))
async def transfer(ticket_id: UUID, body: TransferIn, call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.transfer(agent, ticket_id, team=body.team, to_agent=body.agent,
                                                          note=body.note))

@router.post("/{ticket_id}/messages", response_model=ActionOut, summary="Send a message to the customer",
             description="Stored in the conversation's transcript and queued for delivery on its channel, in "
                         "one transaction. Send an `Idempotency-Key` to retry safely.",
             responses=doc(403, 404, 409, 413, 503))
async def post_message(ticket_id: UUID, body: TextIn, call: CallerDep, response: Response,
                       idempotency_key: IdemKey = None) -> dict[str, Any]:
    return replayed(response, await call.run(lambda agent: call.svc.post_message(
        agent, ticket_id, body.text, idempotency_key=idempotency_key)))

@router.post("/{ticket_id}/approve", response_model=ActionOut, summary="L2: approve the bot's draft",
             description="The draft is sent as it is and you are recorded as the approver. Amounts need an "
                         "approval level (auto <= 50, supervisor <= 500, manager <= 2000, director above, "
                         "configurable): above yours the answer is 403.",
             responses=doc(403, 404, 409, 503))
async def approve(ticket_id: UUID, call: CallerDep, response: Response,
                  idempotency_key: IdemKey = None) -> dict[str, Any]:
    return replayed(response, await call.run(lambda agent: call.svc.approve(
        agent, ticket_id, idempotency_key=idempotency_key)))

@router.post("/{ticket_id}/edit-and-send", response_model=ActionOut,
             summary="L2: approve the draft with your wording", description="Both versions are kept.",
             responses=doc(403, 404, 409, 413, 503))
async def edit_and_send(ticket_id: UUID, body: TextIn, call: CallerDep, response: Response,
                        idempotency_key: IdemKey = None) -> dict[str, Any]:
    return replayed(response, await call.run(lambda agent: call.svc.edit_and_send(
        agent, ticket_id, body.text, idempotency_key=idempotency_key)))

@router.post("/{ticket_id}/reject", response_model=Ticket, summary="L2: reject the draft with a reason",
             description="You keep the ticket: answer yourself, hand back to the bot, or transfer.",
             responses=doc(403, 404, 409))
async def reject(ticket_id: UUID, body: RejectIn, call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.reject(agent, ticket_id, reason=body.reason))

@router.post("/{ticket_id}/resolve", response_model=Ticket, summary="Resolve with an outcome",
             description="The conversation moves to feedback and does not bounce back into handoff by itself. "
                         "An `approval` ticket is 409 for everyone: it closes only by approve or reject (at its "
                         "level) or cancel.", responses=doc(403, 404, 409))
async def resolve(ticket_id: UUID, body: ResolveIn, call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.resolve(agent, ticket_id, outcome=body.outcome, note=body.note))

@router.post("/{ticket_id}/return-to-bot", response_model=Ticket, summary="Hand the conversation back",
             description="409 on an `approval` ticket (approve, reject or cancel it).", responses=doc(403, 404, 409))
async def return_to_bot(ticket_id: UUID, call: CallerDep,
                        body: Annotated[NoteIn | None, Body()] = None) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.return_to_bot(agent, ticket_id,
                                                               note=(body.note if body else None)))

@router.post("/{ticket_id}/cancel", response_model=Ticket, summary="Cancel (supervisors and admins)",
             description="On an `approval` ticket the waiting workflow is cancelled too (nothing runs) and the "
                         "customer is told, unless they asked not to be contacted; 503 when no workflow engine "
                         "is wired to end it.", responses=doc(403, 404, 409, 503))
async def cancel(ticket_id: UUID, body: CancelIn, call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.cancel(agent, ticket_id, reason=body.reason))
