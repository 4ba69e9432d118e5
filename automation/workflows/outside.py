"""Where a flow's tool calls run: through a port the router points outside the turn's locked transaction.

The router's turn runs in passes (router.turn.pipeline): a pass notes the calls it needs and is rolled
back, the calls run with no lock and no pooled connection held, and the next pass applies their results.
This package never imports the router, so the port is a plain callable; outside a turn (an approver's
decision, the engine's own tests) it is :func:`inline` and the call simply runs.
"""

from __future__ import annotations

import json
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


def call_outside(outside: Outside, tools: Any, name: str, args: dict[str, Any], who: Caller,
                 key: str | None, *, repeat: bool = False) -> Any:
    """One tool call through the turn's outside port: its ToolResult, or PENDING.

    The port's key is everything the call depends on, so a later pass reuses the result only for the very
    same call (a changed argument asks anew). A call the turn's deadline overtook reads as a timeout (it may
    still complete in the shop, a write under its idempotency key, and is audited when it does).
    """
    k = ("tool", name, json.dumps(args, sort_keys=True, default=str), who.channel, who.customer_id,
         who.conversation_id, who.purpose, key, repeat)
    extra = {"repeat": True} if repeat else {}    # only when asked: a gateway without repeats still serves
    try:
        return outside(k, lambda: tools.call(name, args, who, idempotency_key=key, **extra))
    except TimeoutError:
        return ToolResult(tool=name, status="timeout", output=None, attempts=0,
                          error=f"{name}: no answer within the turn's deadline")
    except LookupError:
        return ToolResult(tool=name, status="rate_limited", output=None, attempts=0,
                          error=f"{name}: not called in this turn")
