"""Live queue events: one LISTEN connection per process, fanned out to every open stream.

Each agent screen holds a Server-Sent Events stream; giving each its own Postgres connection
would tie database connections to open browser tabs. Instead a single dedicated connection
LISTENs on ``handoff_events`` and copies each notification to the subscribers' bounded
queues. A subscriber that falls behind, or a listener that had to reconnect, gets a
``resync`` marker so the screen refetches (events are also replayable by id from the
append-only log, see the SSE endpoint's ``Last-Event-ID`` support).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from handoff.tickets import CHANNEL

log = logging.getLogger(__name__)

RESYNC = {"action": "resync"}


class Subscription:
    def __init__(self, hub: EventHub, maxsize: int):
        self.hub = hub
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=maxsize)
        self.lagged = False

    def offer(self, event: dict[str, Any]) -> None:
        if self.lagged:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            # drop the backlog and tell the screen to refetch, rather than block everyone else
            self.lagged = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(RESYNC)

    async def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        try:
            event = await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None
        if event is RESYNC:
            self.lagged = False
        return event

    def close(self) -> None:
        self.hub._subs.discard(self)


class EventHub:
    """The process's listener. Started on first subscription in the running event loop."""

    def __init__(self, conninfo: str | Callable[[], str], *, channel: str = CHANNEL, queue_size: int = 1000,
                 idle_seconds: float = 60.0):
        """``conninfo`` as the pool takes it: a string, or a function giving one for each connection."""
        self.conninfo = conninfo
        self.channel = channel
        self.queue_size = queue_size
        self.idle_seconds = idle_seconds
        self._subs: set[Subscription] = set()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Event | None = None

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    async def subscribe(self, timeout: float = 10.0) -> Subscription:
        """A new subscription; returns once LISTEN is active, so nothing committed afterwards is missed."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._loop is not loop:
            self._loop = loop
            self._ready = asyncio.Event()
            self._task = loop.create_task(self._run(self._ready), name="handoff-event-listener")
        ready = self._ready
        assert ready is not None        # set with the task above
        sub = Subscription(self, self.queue_size)
        self._subs.add(sub)
        try:
            await asyncio.wait_for(ready.wait(), timeout)
        except TimeoutError:
            sub.close()
            raise
        return sub

    def resync(self) -> None:
        """Tell every open stream of this process to refetch (from any thread): a notification was lost."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._broadcast, RESYNC)

    def _broadcast(self, event: dict[str, Any]) -> None:
        for sub in list(self._subs):
            sub.offer(event)

    async def _run(self, ready: asyncio.Event) -> None:
        reconnects = 0
        idle_since = None
        while True:
            try:
                conninfo = self.conninfo() if callable(self.conninfo) else self.conninfo
                async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {self.channel}")
                    if reconnects:
                        self._broadcast(RESYNC)   # notifications may have been missed while away
                    ready.set()
                    while True:
                        async for note in conn.notifies(timeout=5.0):
                            try:
                                event = json.loads(note.payload)
                            except ValueError:
                                log.warning("ignoring a malformed notification on %s", self.channel)
                                continue
                            self._broadcast(event)
                        if self._subs:
                            idle_since = None
                        else:
                            idle_since = idle_since or asyncio.get_running_loop().time()
                            if asyncio.get_running_loop().time() - idle_since > self.idle_seconds:
                                return   # nobody listens: free the connection; the next subscriber restarts it
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a lost connection: retry, screens get a resync
                log.warning("handoff event listener lost its connection; reconnecting", exc_info=True)
                reconnects += 1
                await asyncio.sleep(min(5.0, 0.2 * reconnects))
