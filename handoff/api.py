"""The agent-facing HTTP API under ``/v1/handoff``.

handoff does not import the gateway: the app passes ``get_service(request)`` that returns the
:class:`HandoffService` it built. Errors are RFC 9457 problem documents produced here (a
route class turns :class:`~handoff.errors.HandoffError` into ``application/problem+json``),
so the API behaves the same in any app that mounts it.

Authentication is a Bearer token (``switchboard tokens issue``). Agents see and claim only
their teams' tickets; supervisors and admins see every team.
"""

import asyncio
import hashlib
import re
from collections.abc import AsyncIterable, Callable
from http import HTTPStatus
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Depends, Header, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse, ServerSentEvent

from handoff.errors import Forbidden, HandoffError, Invalid, TooManyRequests, Unauthorized, Unavailable
from handoff.models import Agent
from handoff.schemas import (
    ActionOut,
    AgentOut,
    CancelIn,
    ClaimNextIn,
    EventPage,
    HeartbeatOut,
    Kind,
    NoteIn,
    Priority,
    ProblemOut,
    RejectIn,
    ReleaseIn,
    ResolveIn,
    StatsOut,
    Status,
    TextIn,
    Ticket,
    TicketPage,
    TransferIn,
)
from handoff.service import HandoffService

PROBLEM_JSON = "application/problem+json"
REPLAY_LIMIT = 1000     # events replayed to a reconnecting screen; beyond that it is told to refetch


def problem_response(request: Request, status: int, detail: str, *, title: str | None = None,
                     headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    body: dict[str, Any] = {"type": "about:blank", "title": title or HTTPStatus(status).phrase, "status": status,
                            "detail": detail, "instance": request.url.path}
    rid = getattr(request.state, "request_id", None)
    if rid:
        body["request_id"] = rid
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _problem(request: Request, exc: HandoffError) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="switchboard"'} if exc.status == 401 else None
    return problem_response(request, exc.status, exc.detail, title=exc.title, headers=headers, **exc.extra)


class ProblemRoute(APIRoute):
    """Answers :class:`HandoffError` (raised by the service or a dependency) with a problem document."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except HandoffError as exc:
                return _problem(request, exc)

        return run


def _doc(*codes: int) -> dict[int | str, dict[str, Any]]:
    meaning = {
        204: "Nothing to claim",
        401: "Missing, invalid, expired or revoked token",
        403: "Not your team, missing skills, or above your approval level",
        404: "No such ticket",
        409: "The ticket's state does not allow it (claimed by someone else, already closed, lease lost)",
        413: "Message text too long",
        422: "Malformed request",
        429: "Too many open event streams for this token",
        503: "Handoff not configured, or no delivery path to the customer",
    }
    out: dict[int | str, dict[str, Any]] = {}
    for c in codes:
        if c == 204:
            out[c] = {"description": meaning[c]}
        else:
            out[c] = {"model": ProblemOut, "description": meaning[c], "content": {PROBLEM_JSON: {}}}
    return out


_bearer = HTTPBearer(auto_error=False, scheme_name="AgentToken",
                     description="An agent token from `switchboard tokens issue` (sent as `Bearer sbt_...`).")


def make_auth(get_service: Callable[[Request], HandoffService | None]):
    """(service dependency, agent dependency) for routes of this or another router.

    Outside :func:`build_router` (e.g. the gateway's admin routes) the agent dependency raises
    ``HTTPException`` so the app's own problem handlers answer 401/403.
    """

    async def service(request: Request) -> HandoffService:
        svc = get_service(request)
        if svc is None:
            raise Unavailable("the handoff queue is not configured")
        return svc

    def agent(svc: Annotated[HandoffService, Depends(service)],
              creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Agent:
        if creds is None:
            raise Unauthorized("a Bearer token is required")
        who = svc.authenticate(creds.credentials)
        if who is None:
            raise Unauthorized("the token is invalid, expired or revoked")
        return who

    return service, agent


class Caller:
    """The request's service and Bearer token. :meth:`run` authenticates and acts in one worker-thread
    call, so a request costs one thread hop and no extra connection checkout (measured: the
    separate sync dependency added ~0.3 ms of CPU per request)."""

    __slots__ = ("svc", "token")

    def __init__(self, svc: HandoffService, token: str | None):
        self.svc = svc
        self.token = token

    def agent(self) -> Agent:
        if self.token is None:
            raise Unauthorized("a Bearer token is required")
        who = self.svc.authenticate(self.token)
        if who is None:
            raise Unauthorized("the token is invalid, expired or revoked")
        return who

    async def run(self, fn: Callable[[Agent], Any]) -> Any:
        return await run_in_threadpool(lambda: fn(self.agent()))


def require_roles(get_service: Callable[[Request], HandoffService | None], *roles: str):
    """A dependency for other routers: the calling agent, who must have one of ``roles`` (401/403 otherwise)."""
    service, agent_dep = make_auth(get_service)

    def dep(svc: Annotated[HandoffService, Depends(service)],
            creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Agent:
        try:
            who = agent_dep(svc, creds)
            if roles and who.role not in roles:
                raise Forbidden(f"this needs the role {' or '.join(roles)}; yours is {who.role}")
            return who
        except HandoffError as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            raise HTTPException(exc.status, exc.detail, headers=headers) from None

    return dep


def _resume_from(
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=20)] = None,
    after: Annotated[int | None, Query(ge=0, description="Replay events after this id")] = None,
) -> int | None:
    """Where a reconnecting event stream resumes: ``?after=`` or the browser's ``Last-Event-ID``."""
    if after is None and last_event_id:
        if not _EVENT_ID.match(last_event_id):   # ASCII digits only: "²".isdigit() is True, int("²") fails
            raise Invalid("Last-Event-ID must be an event id")
        after = int(last_event_id)
    return after


_EVENT_ID = re.compile(r"^[0-9]{1,18}$")


class StreamSlots:
    """Open event streams per token in this process; beyond the limit a new one is refused (429)."""

    def __init__(self):
        self._open: dict[str, int] = {}

    def take(self, token: str, limit: int) -> "_Slot":
        key = hashlib.sha256(token.encode()).hexdigest()
        if self._open.get(key, 0) >= limit:
            raise TooManyRequests(f"this token already holds {limit} open event streams; close one first",
                                  limit=limit)
        self._open[key] = self._open.get(key, 0) + 1
        return _Slot(self, key)

    def _give_back(self, key: str) -> None:
        left = self._open.get(key, 0) - 1
        if left > 0:
            self._open[key] = left
        else:
            self._open.pop(key, None)


class _Slot:
    """One stream's place; released by the stream's ``finally`` (or, for a stream that never started,
    when its generator is collected)."""

    __slots__ = ("_slots", "_key")

    def __init__(self, slots: StreamSlots, key: str):
        self._slots, self._key = slots, key

    def release(self) -> None:
        if self._key is not None:
            self._slots._give_back(self._key)
            self._key = None

    def __del__(self):
        self.release()


def _replayed(response: Response, result: dict[str, Any]) -> dict[str, Any]:
    if result.get("replayed"):
        response.headers["Idempotent-Replayed"] = "true"
    return result


def build_router(get_service: Callable[[Request], HandoffService | None]) -> APIRouter:
    """The ``/v1/handoff`` router; ``get_service(request)`` returns the app's HandoffService."""
    router = APIRouter(prefix="/v1/handoff", tags=["handoff"], route_class=ProblemRoute,
                       responses=_doc(401, 422))
    service_dep, agent_dep = make_auth(get_service)
    Svc = Annotated[HandoffService, Depends(service_dep)]
    Me = Annotated[Agent, Depends(agent_dep)]

    async def caller_dep(svc: Svc, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Caller:
        return Caller(svc, creds.credentials if creds else None)

    Call = Annotated[Caller, Depends(caller_dep)]
    IdemKey = Annotated[str | None, Header(alias="Idempotency-Key", min_length=1, max_length=200,
                                           pattern=r"^[\x21-\x7e]+$", description="Repeat the same key to retry safely: nothing is sent twice.")]

    @router.get("/me", response_model=AgentOut, summary="The agent the token belongs to")
    async def me(call: Call) -> dict[str, Any]:
        return await call.run(lambda agent: agent.public())

    @router.get("/tickets", response_model=TicketPage, summary="List tickets in queue order",
                description="Sorted by priority (urgent first), then SLA due time, then age. Default: open tickets "
                            "(queued and claimed). Agents see only their teams (asking for another team is 403). "
                            "Page with `cursor` = the previous page's `next_cursor`.",
                responses=_doc(403))
    async def list_tickets(
        call: Call,
        status: Annotated[list[Status] | None, Query(description="Repeatable; default queued+claimed")] = None,
        kind: Annotated[list[Kind] | None, Query()] = None,
        team: Annotated[list[str] | None, Query()] = None,
        priority: Annotated[list[Priority] | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, Query(max_length=1000)] = None,
    ) -> dict[str, Any]:
        items, next_cursor = await call.run(lambda agent: call.svc.list_tickets(
            agent, status=status, kind=kind, team=team, priority=priority, limit=limit, cursor=cursor))
        return {"items": items, "next_cursor": next_cursor}

    @router.get("/tickets/{ticket_id}", response_model=Ticket, summary="One ticket with its context package",
                responses=_doc(403, 404))
    async def get_ticket(ticket_id: UUID, call: Call) -> dict[str, Any]:
        return await call.run(lambda agent: call.svc.get_ticket(agent, ticket_id))

    @router.get("/tickets/{ticket_id}/events", response_model=EventPage, summary="The ticket's audit trail",
                description="Append-only: who did what, when (customer messages while a human holds the "
                            "conversation appear here too). Oldest first; page with `after`.",
                responses=_doc(403, 404))
    async def ticket_events(ticket_id: UUID, call: Call,
                      after: Annotated[int | None, Query(ge=0)] = None,
                      limit: Annotated[int, Query(ge=1, le=500)] = 100) -> dict[str, Any]:
        items, next_after = await call.run(lambda agent: call.svc.ticket_events(agent, ticket_id, after=after,
                                                                                limit=limit))
        return {"items": items, "next_after": next_after}

    @router.post("/claim-next", response_model=Ticket, summary="Atomically take the best ticket you may work on",
                 description="The most pressing visible ticket (priority, SLA due, age) that has no holder and "
                             "whose skills you have. Concurrent callers never get the same ticket. 204 when the "
                             "queue is empty. Heartbeat before `lease_expires_at` to keep it.",
                 responses=_doc(204, 403))
    async def claim_next(call: Call, body: Annotated[ClaimNextIn | None, Body()] = None):
        body = body or ClaimNextIn()
        ticket = await call.run(lambda agent: call.svc.claim_next(agent, kind=body.kind, team=body.team))
        if ticket is None:
            return Response(status_code=204)
        return ticket

    @router.post("/tickets/{ticket_id}/claim", response_model=Ticket, summary="Take a given ticket",
                 description="Claiming a ticket you already hold renews its lease.", responses=_doc(403, 404, 409))
    async def claim(ticket_id: UUID, call: Call) -> dict[str, Any]:
        return await call.run(lambda agent: call.svc.claim(agent, ticket_id))

    @router.post("/tickets/{ticket_id}/heartbeat", response_model=HeartbeatOut, summary="Extend your lease",
                 description="409 when the lease was lost: it expired and the ticket went back to the queue.",
                 responses=_doc(403, 404, 409))
    async def heartbeat(ticket_id: UUID, call: Call) -> dict[str, Any]:
        return await call.run(lambda agent: call.svc.heartbeat(agent, ticket_id))

    @router.post("/tickets/{ticket_id}/release", response_model=Ticket, summary="Put a ticket back in the queue",
                 responses=_doc(403, 404, 409))
    async def release(ticket_id: UUID, call: Call, body: Annotated[ReleaseIn | None, Body()] = None):
        return await call.run(lambda agent: call.svc.release(agent, ticket_id, reason=(body.reason if body else None)))

    @router.post("/tickets/{ticket_id}/transfer", response_model=Ticket, summary="Transfer to a team or an agent",
                 description="To a team: the ticket is queued there. To an agent: they hold it at once (they must "
                             "be in the ticket's team).", responses=_doc(403, 404, 409))
    async def transfer(ticket_id: UUID, body: TransferIn, call: Call) -> dict[str, Any]:
        return await call.run(lambda agent: call.svc.transfer(agent, ticket_id, team=body.team, to_agent=body.agent,
                                                              note=body.note))

    @router.post("/tickets/{ticket_id}/messages", response_model=ActionOut, summary="Send a message to the customer",
                 description="Stored in the conversation's transcript and queued for delivery on its channel, in "
                             "one transaction. Send an `Idempotency-Key` to retry safely.",
                 responses=_doc(403, 404, 409, 413, 503))
    async def post_message(ticket_id: UUID, body: TextIn, call: Call, response: Response,
                           idempotency_key: IdemKey = None) -> dict[str, Any]:
        return _replayed(response, await call.run(lambda agent: call.svc.post_message(
            agent, ticket_id, body.text, idempotency_key=idempotency_key)))

    @router.post("/tickets/{ticket_id}/approve", response_model=ActionOut, summary="L2: approve the bot's draft",
                 description="The draft is sent as it is and you are recorded as the approver. Amounts need an "
                             "approval level (auto <= 50, supervisor <= 500, manager <= 2000, director above, "
                             "configurable): above yours the answer is 403.",
                 responses=_doc(403, 404, 409, 503))
    async def approve(ticket_id: UUID, call: Call, response: Response,
                      idempotency_key: IdemKey = None) -> dict[str, Any]:
        return _replayed(response, await call.run(lambda agent: call.svc.approve(
            agent, ticket_id, idempotency_key=idempotency_key)))

    @router.post("/tickets/{ticket_id}/edit-and-send", response_model=ActionOut,
                 summary="L2: approve the draft with your wording", description="Both versions are kept.",
                 responses=_doc(403, 404, 409, 413, 503))
    async def edit_and_send(ticket_id: UUID, body: TextIn, call: Call, response: Response,
                            idempotency_key: IdemKey = None) -> dict[str, Any]:
        return _replayed(response, await call.run(lambda agent: call.svc.edit_and_send(
            agent, ticket_id, body.text, idempotency_key=idempotency_key)))

    @router.post("/tickets/{ticket_id}/reject", response_model=Ticket, summary="L2: reject the draft with a reason",
                 description="You keep the ticket: answer yourself, hand back to the bot, or transfer.",
                 responses=_doc(403, 404, 409))
    async def reject(ticket_id: UUID, body: RejectIn, call: Call) -> dict[str, Any]:
        return await call.run(lambda agent: call.svc.reject(agent, ticket_id, reason=body.reason))

    @router.post("/tickets/{ticket_id}/resolve", response_model=Ticket, summary="Resolve with an outcome",
                 description="The conversation moves to feedback and does not bounce back into handoff by itself.",
                 responses=_doc(403, 404, 409))
    async def resolve(ticket_id: UUID, body: ResolveIn, call: Call) -> dict[str, Any]:
        return await call.run(lambda agent: call.svc.resolve(agent, ticket_id, outcome=body.outcome, note=body.note))

    @router.post("/tickets/{ticket_id}/return-to-bot", response_model=Ticket, summary="Hand the conversation back",
                 responses=_doc(403, 404, 409))
    async def return_to_bot(ticket_id: UUID, call: Call, body: Annotated[NoteIn | None, Body()] = None):
        return await call.run(lambda agent: call.svc.return_to_bot(agent, ticket_id,
                                                                   note=(body.note if body else None)))

    @router.post("/tickets/{ticket_id}/cancel", response_model=Ticket, summary="Cancel (supervisors and admins)",
                 responses=_doc(403, 404, 409))
    async def cancel(ticket_id: UUID, body: CancelIn, call: Call) -> dict[str, Any]:
        return await call.run(lambda agent: call.svc.cancel(agent, ticket_id, reason=body.reason))

    @router.get("/stats", response_model=StatsOut, summary="Queue statistics",
                description="Depth by kind, team and priority, the oldest wait, SLA breaches; over your teams "
                            "(supervisors and admins: all).")
    async def stats(call: Call) -> dict[str, Any]:
        return await call.run(lambda agent: call.svc.stats(agent))

    slots = StreamSlots()

    async def stream_slot(svc: Svc, agent: Me,
                          creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> _Slot:
        # a dependency with yield would be torn down before the stream runs: the stream releases it
        return slots.take(creds.credentials, svc.config.max_streams_per_token)

    @router.get("/events", response_class=EventSourceResponse, summary="Live queue changes (Server-Sent Events)",
                description="One `ready` event once listening, then a `ticket` event per change (data: event id, "
                            "ticket_id, action, kind, team, from_team, priority, status, claimed_by, actor, at) for "
                            "your teams (a ticket transferred away is announced to the team it left); `resync` "
                            "means refetch. Reconnect with `Last-Event-ID` (or `?after=`) to replay "
                            "what you missed from the audit log. A revoked token or a disabled agent ends the "
                            "stream within 5 s (an `end` event). One token may hold a few streams at once "
                            "(`SWITCHBOARD_HANDOFF_MAX_STREAMS_PER_TOKEN`); beyond that 429.",
                responses=_doc(403, 429, 503))
    async def events(
        svc: Svc, agent: Me,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        after: Annotated[int | None, Depends(_resume_from)],
        slot: Annotated[_Slot, Depends(stream_slot)],
    ) -> AsyncIterable[ServerSentEvent]:
        try:
            sub = await svc.hub.subscribe()
        except (TimeoutError, OSError):
            slot.release()
            yield ServerSentEvent(event="error", retry=5000, data={"detail": "the event listener is not connected"})
            return
        token = creds.credentials if creds else None
        loop = asyncio.get_running_loop()
        checked = loop.time()
        try:
            yield ServerSentEvent(event="ready", retry=3000,
                                  data={"agent": agent.name, "teams": None if agent.sees_all_teams else
                                        list(agent.teams), "after": after})
            replayed: set[int] = set()
            if after is not None:
                missed = await run_in_threadpool(svc.events_since, agent, after, limit=REPLAY_LIMIT)
                for ev in missed:
                    replayed.add(ev["id"])
                    yield ServerSentEvent(event="ticket", id=str(ev["id"]), data=ev)
                if len(missed) >= REPLAY_LIMIT:
                    yield ServerSentEvent(event="resync", data={"reason": "more missed events than replayed"})
            recheck = svc.config.stream_recheck_seconds
            while True:
                ev = await sub.get(timeout=max(0.05, recheck - (loop.time() - checked)))
                if loop.time() - checked >= recheck:
                    checked = loop.time()
                    if await run_in_threadpool(svc.authenticate, token) is None:
                        yield ServerSentEvent(event="end", data={"reason": "token no longer valid"})
                        return
                if ev is None:
                    continue
                if ev.get("action") == "resync":
                    yield ServerSentEvent(event="resync", data={})
                    continue
                if ev.get("id") in replayed or not (agent.may_see(ev.get("team"))
                                                     or agent.may_see(ev.get("from_team"))):
                    continue
                yield ServerSentEvent(event="ticket", id=str(ev["id"]), data=ev)
        finally:
            sub.close()
            slot.release()

    return router
