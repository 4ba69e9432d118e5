"""The live queue: Server-Sent Events of every ticket change the caller may see, with replay on reconnect."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterable
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.sse import EventSourceResponse, ServerSentEvent

from handoff.api.deps import AgentDep, Credentials, ProblemRoute, ServiceDep, doc
from handoff.errors import Invalid, TooManyRequests

REPLAY_LIMIT = 1000     # events replayed to a reconnecting screen; beyond that it is told to refetch

router = APIRouter(prefix="/v1/handoff", tags=["handoff"], route_class=ProblemRoute, responses=doc(401, 422))


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

    def __init__(self) -> None:
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
        self._slots = slots
        self._key: str | None = key

    def release(self) -> None:
        if self._key is not None:
            self._slots._give_back(self._key)
            self._key = None

    def __del__(self) -> None:
        self.release()


def _slots(request: Request) -> StreamSlots:
    """The app's stream counts (one per app, made on its first stream)."""
    slots = getattr(request.app.state, "handoff_stream_slots", None)
    if slots is None:
        slots = request.app.state.handoff_stream_slots = StreamSlots()
    return slots


async def stream_slot(request: Request, svc: ServiceDep, agent: AgentDep, creds: Credentials) -> _Slot:
    # a dependency with yield would be torn down before the stream runs: the stream releases it
    assert creds is not None        # AgentDep has authenticated this bearer token
    return _slots(request).take(creds.credentials, svc.config.max_streams_per_token)


@router.get("/events", response_class=EventSourceResponse, summary="Live queue changes (Server-Sent Events)",
            description="One `ready` event once listening, then a `ticket` event per change (data: event id, "
                        "ticket_id, action, kind, team, from_team, priority, status, claimed_by, actor, at) for "
                        "your teams (a ticket transferred away is announced to the team it left); `resync` "
                        "means refetch. Reconnect with `Last-Event-ID` (or `?after=`) to replay "
                        "what you missed from the audit log. A revoked token or a disabled agent ends the "
                        "stream within 5 s (an `end` event). One token may hold a few streams at once "
                        "(`SWITCHBOARD_HANDOFF_MAX_STREAMS_PER_TOKEN`); beyond that 429.",
            responses=doc(403, 429, 503))
async def events(
    svc: ServiceDep, agent: AgentDep, creds: Credentials,
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
            for past in missed:
                replayed.add(past["id"])
                yield ServerSentEvent(event="ticket", id=str(past["id"]), data=past)
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
