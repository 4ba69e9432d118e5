"""Where a flow's tool calls run: through a port the router points outside the turn's locked transaction.

The router's turn runs in passes (router.turn.pipeline): a pass notes the calls it needs and is rolled
back, the calls run with no lock and no pooled connection held, and the next pass applies their results.
This package never imports the router, so the port is a plain callable; outside a turn (an approver's
decision, the engine's own tests) it is :func:`inline` and the call simply runs.
"""

from __future__ import annotations

import concurrent.futures
import copy
import json
import threading
from collections.abc import Callable, Hashable
from typing import Any

from automation.tools.base import Caller, ToolResult

#: what an :data:`Outside` port returns when the call will run before the turn's next pass
PENDING = object()

#: runs ``compute`` where the turn holds no lock and no connection (the router's turn passes) and returns its
#: result, or :data:`PENDING` (the result comes with the turn's next pass); raises ``TimeoutError`` when the
#: turn's tool deadline passed first and ``LookupError`` when the call cannot run before this pass
Outside = Callable[[Hashable, Callable[[], Any]], Any]


def inline(key: Hashable, compute: Callable[[], Any]) -> Any:
    """The port outside a router turn (tests, an approver's decision): the call runs at once."""
    return compute()


class CallPending(Exception):
    """A step's tool call runs before the turn's next pass: this pass cannot go on (it is discarded)."""


#: the statuses after which the customer hears that the shop is not answering (nothing was done)
SILENT = frozenset({"timeout", "breaker_open", "rate_limited"})


class InFlight:
    """Reads asked again while the same read is running wait for its answer instead of asking the shop twice.

    Two first messages of one customer at once (two tabs, a message and its quick retry) each look up the
    customer's orders; with a slow shop both would hold a call slot and the shop would answer twice. Only
    reads are shared, keyed by everything the answer depends on; the first caller's call is the one audited."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Hashable, concurrent.futures.Future[Any]] = {}
        self.shared = 0          # reads answered by another caller's call (for tests and metrics)

    def do(self, key: Hashable, read: Callable[[], Any]) -> Any:
        with self._lock:
            running = self._running.get(key)
            if running is None:
                mine: concurrent.futures.Future[Any] = concurrent.futures.Future()
                self._running[key] = mine
            else:
                self.shared += 1
        if running is not None:
            return copy.deepcopy(running.result())   # bounded by the first call's timeout; a copy of its own
        try:
            result = read()
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        else:
            mine.set_result(result)
            return result
        finally:
            with self._lock:
                self._running.pop(key, None)


#: the process's reads in flight (the session memory's calls go through it)
READS = InFlight()


def call_outside(outside: Outside, tools: Any, name: str, args: dict[str, Any], who: Caller,
                 key: str | None, *, repeat: bool = False, shared: bool = False) -> Any:
    """One tool call through the turn's outside port: its ToolResult, or PENDING.

    The port's key is everything the call depends on, so a later pass reuses the result only for the very
    same call (a changed argument asks anew). ``shared``: a read of the customer's own data (the session
    memory), answered once for every turn asking it at the same time (:class:`InFlight`). A call the turn's deadline overtook reads as a timeout (it may
    still complete in the shop, a write under its idempotency key, and is audited when it does).
    """
    k = ("tool", name, json.dumps(args, sort_keys=True, default=str), who.channel, who.customer_id,
         who.conversation_id, who.purpose, key, repeat)
    extra = {"repeat": True} if repeat else {}    # only when asked: a gateway without repeats still serves

    def call() -> Any:
        return tools.call(name, args, who, idempotency_key=key, **extra)

    if shared:   # a read whose answer depends on the customer only: one call for every turn asking at once
        read_key = (id(tools), name, k[2], who.channel, who.customer_id)

        def compute() -> Any:
            return READS.do(read_key, call)
    else:
        compute = call
    try:
        return outside(k, compute)
    except TimeoutError:
        return ToolResult(tool=name, status="timeout", output=None, attempts=0,
                          error=f"{name}: no answer within the turn's deadline")
    except LookupError:
        return ToolResult(tool=name, status="rate_limited", output=None, attempts=0,
                          error=f"{name}: not called in this turn")
