"""The threads the HTTP face runs turns on: sized for turns that mostly wait.

A turn is synchronous (psycopg, the models) and runs on a worker thread from its admission to its answer. Much of
that time the thread only waits, holding nothing: for a slot of the pipeline's bound on turns with a connection
(router.turn.passes.TurnSlots), for its conversation's lock, and above all for the shop while its tool calls run
(seconds on a slow shop, up to the turn's tool deadline on a hanging one). Starlette's ``run_in_threadpool`` takes
its threads from anyio's default limiter (40, shared with every other blocking call of the app): 32 customers
waiting on a 2 s shop left the other customers' greetings and FAQ questions queued for one of the 8 threads left,
and 40 waiting on a hanging shop left them none.

Turns therefore get a limiter of their own, :data:`TURN_THREADS` threads per process. What bounds the work is
elsewhere and unchanged: TurnSlots (passes holding a pooled connection at once), the admission caps (turns per
customer, integration key and channel: router.turn.admission), the tool bulkhead per server and the turn's tool
deadline (automation.tools). A thread blocked on a shop costs a little memory and no CPU. Requests beyond the
limiter wait as coroutines, holding nothing. The default limiter is left to the short blocking calls (a nonce,
receipts, an integration key's lookup), which no longer queue behind turns either.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")

#: turns on a thread at once per process: above what the admission lets run on the busiest channels together
#: (64 per channel by default) plus those waiting for it, and above the tool threads (router.turn.passes.TOOL_CALLS)
TURN_THREADS = 256


def limiter(state: Any) -> anyio.CapacityLimiter:
    """The app's turn limiter (``state``: ``app.state``), made on first use on the app's event loop."""
    got = getattr(state, "turn_threads", None)
    if got is None:
        got = state.turn_threads = anyio.CapacityLimiter(TURN_THREADS)
    return got


async def run_turn(state: Any, metrics: Any, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a turn thread; the wait for the thread is observed as the ``thread_wait`` stage."""
    queued = time.perf_counter()

    def started() -> T:
        if metrics is not None:
            metrics.stage_seconds.labels("thread_wait").observe(time.perf_counter() - queued)
        return fn(*args)

    return await anyio.to_thread.run_sync(started, limiter=limiter(state))
