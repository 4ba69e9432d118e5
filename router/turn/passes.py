"""A turn's passes: slow work a decision wants runs between them, with no lock and no connection held.

The pipeline (router.turn.pipeline) runs a turn as one or more passes of the same transaction's work; code
inside a pass asks for slow work through :func:`outside_transaction` (the pass is then rolled back, the work
runs, and the next pass gets its result), for values computed once per message through :func:`per_turn`, and
for counts that must see a committed turn through :func:`when_committed`. Kept apart from the pipeline so
deciders and ports depend on this small surface, not on the pipeline that runs them.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any, TypeVar

#: what :func:`outside_transaction` returns during a first pass: the value comes with the next pass
PENDING = object()


class OutsideDeadline(TimeoutError):
    """The outside work did not finish within its deadline; it may still finish (and record itself) later."""


class Work:
    """What one message's turn keeps across its passes and its repeats after a lost connection."""

    def __init__(self) -> None:
        self.ready: dict[Hashable, tuple[bool, Any]] = {}   # key -> (ok, value or exception)
        self.memo: dict[Hashable, Any] = {}                 # per_turn values
        self.mark: dict[str, Any] | None = None             # the conversation as the first pass saw it
        self.outside_runs = 0                               # passes that ran outside work
        self.outside_seconds = 0.0                          # the turn's time waiting for it (nothing held)
        self.slot_back_seconds = 0.0                        # and for a slot of its caller's TurnSlots after it
        self.looked_ahead = False                           # the work asked for before the first pass is done
        self.ahead_seconds: float | None = None             # the wait for it (None: nothing was asked ahead)


class Pass:
    """The outside-the-transaction work asked for in one pass (results so far live in the turn's Work)."""

    def __init__(self, work: Work, may_defer: bool):
        self.work = work
        self.ready = work.ready
        self.may_defer = may_defer
        # key -> (compute, until, the executor it runs on: None = OUTSIDE)
        self.wanted: dict[Hashable, tuple[Callable[[], Any], float | None,
                                          concurrent.futures.Executor | None]] = {}
        self.committed: list[Callable[[], None]] = []    # when_committed: run after this pass's commit


class RollBack(Exception):
    """Raised inside the transaction to discard a pass whose decision waits for outside work."""


CURRENT_PASS: ContextVar[Pass | None] = ContextVar("switchboard_turn_pass", default=None)


class NotComputed(LookupError):
    """The work was not done before this pass (the decision asked for other work under the lock)."""


def outside_transaction(key: Hashable, compute: Callable[[], Any], *,
                        available: Callable[[], bool] | None = None, until: float | None = None,
                        executor: concurrent.futures.Executor | None = None) -> Any:
    """The result of ``compute()``, run where no conversation lock or pooled connection is held.

    Outside a turn it is simply called. In a turn's pass it is only noted and :data:`PENDING` is
    returned (the pass is then rolled back and ``compute`` runs with nothing held); in the next pass the
    result for the same ``key`` is returned (or its exception raised). A key asked for when no further pass
    is allowed is never computed inside the transaction: :class:`NotComputed` (the caller decides without it).
    ``available`` is asked before deferring: when it says no (e.g. every slot of a rate-limited service
    is busy) nothing is deferred and :class:`NotComputed` is raised at once, sparing the turn a second pass.
    ``until`` (``time.monotonic()`` seconds): the next pass gets :class:`OutsideDeadline` if ``compute``
    has not returned by then (it keeps running on its own thread, holding nothing of the turn's).
    ``executor``: where ``compute`` runs (default :data:`OUTSIDE`); tool calls have their own
    (:data:`TOOL_CALLS`), so calls held by a hanging shop never take the threads other work needs.
    """
    scope = CURRENT_PASS.get()
    if scope is None:
        return compute()
    if key in scope.ready:
        ok, value = scope.ready[key]
        if ok:
            return value
        raise value
    if until is not None and time.monotonic() >= until:
        raise OutsideDeadline("the turn's deadline for this work has passed")
    if scope.may_defer and (available is None or available()):
        scope.wanted.setdefault(key, (compute, until, executor))
        return PENDING
    raise NotComputed("not computed before the turn's transaction")


def when_committed(fn: Callable[[], None]) -> None:
    """Run ``fn`` once the turn's transaction has committed (a counter of what the turn did); at once outside a
    turn. A pass rolled back for outside work, a refused or retried attempt never runs it: counted once."""
    scope = CURRENT_PASS.get()
    if scope is None:
        fn()
        return
    scope.committed.append(fn)


def per_turn(key: Hashable, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per message's turn, reused by its later passes (outside a turn: simply called).

    For what depends on the message alone (its classification): a pass repeated for outside work or after
    a lost connection does not pay for it again.
    """
    scope = CURRENT_PASS.get()
    if scope is None:
        return compute()
    memo = scope.work.memo
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def run_wanted(scope: Pass) -> None:
    """The work ``scope`` asked for, in parallel, each item until its deadline (a late one: OutsideDeadline);
    the results (or exceptions) go to the next pass. Called with no lock and no connection held."""
    futures = {key: ((executor or OUTSIDE).submit(compute), until)
               for key, (compute, until, executor) in scope.wanted.items()}
    for key, (future, until) in futures.items():
        wait = None if until is None else max(0.0, until - time.monotonic())
        try:
            scope.ready[key] = (True, future.result(wait))
        except concurrent.futures.TimeoutError:
            scope.ready[key] = (False, OutsideDeadline("no answer within the turn's deadline"))
        except Exception as exc:  # noqa: BLE001 - handed to the next pass, whose caller decides without it
            scope.ready[key] = (False, exc)


T = TypeVar("T")


def in_passes(step: Callable[[], T], *, passes: int = 3) -> T:
    """``step()`` run as a turn runs, outside any turn (work done after a turn's commit): each call is a pass
    that opens, and commits or rolls back, a transaction of its own; outside work it asks for
    (:func:`outside_transaction`, the workflow engine's tool calls) runs between the passes with nothing held,
    and the next pass gets the results. A pass that asked for work ends by raising (its transaction rolls
    back); at most ``passes`` passes, the last of which may not ask for more."""
    work = Work()
    for n in range(1, passes + 1):
        scope = Pass(work, may_defer=n < passes)
        token = CURRENT_PASS.set(scope)
        try:
            return step()
        except Exception:
            if not scope.wanted:
                raise
        finally:
            CURRENT_PASS.reset(token)
        run_wanted(scope)
        work.outside_runs += 1
    raise AssertionError("unreachable: the last pass may not defer")


def tool_port(deadline: Callable[[], float]) -> Callable[[Hashable, Callable[[], Any]], Any]:
    """The workflow engine's outside port (automation.workflows.outside): its tool calls and memory loads run
    between the turn's passes, all of one turn within ``deadline()`` seconds of its first call."""
    from automation.workflows.outside import PENDING as CALL_PENDING

    def port(key: Hashable, compute: Callable[[], Any]) -> Any:
        budget = per_turn(("tools", "budget"), lambda: {"started": time.monotonic(), "seconds": 0.0})
        # the largest allowance seen in the turn holds (one that included opening a session stays)
        budget["seconds"] = max(budget["seconds"], deadline())
        got = outside_transaction(key, compute, until=budget["started"] + budget["seconds"], executor=TOOL_CALLS)
        return CALL_PENDING if got is PENDING else got

    return port


def pass_slots(pool_max: int) -> int:
    """Turn passes a process runs at once for a pool of ``pool_max`` connections (8 of the default 10).

    A pass holds one pooled connection and never a second (retrieval has a pool of its own:
    tests/router/turn/test_one_connection_a_turn.py); the rest of the pool is kept for what runs beside the
    passes (the steps around a channel turn, the outbox, the audit writer, the console). Half the pool, the
    bound while a pass was thought to take two, left the cores idle: at 16 concurrent customers 4 slots a
    process ran 74 msg/s where 8 ran 106 on the same machine.
    """
    return max(1, pool_max - max(1, pool_max // 4))


class TurnSlots:
    """A bound on turns running a pass at once (each holds a pooled connection).

    A semaphore whose holder gives its slot back while its turn's outside work runs (:func:`released`,
    called by the pipeline): a turn waiting seconds on a slow shop holds nothing, so turns that need no tool
    (greetings, FAQ) never queue behind it. A turn coming back from its outside work takes the next free slot
    before turns that have not started (it has waited already, and its result is at hand).
    """

    _held = threading.local()   # the slots the current thread holds (a turn runs on one thread)

    def __init__(self, n: int):
        self.size = max(1, int(n))
        self._free = self.size
        self._lock = threading.Lock()
        # waiting turns in arrival order, those back from outside work first; a freed slot is handed to the
        # first of them directly (first come, first served: no turn waits while later ones pass it)
        self._returning: collections.deque[threading.Event] = collections.deque()
        self._new: collections.deque[threading.Event] = collections.deque()

    def acquire(self, blocking: bool = True, timeout: float | None = None, *, returning: bool = False) -> bool:
        """As ``threading.Semaphore.acquire``; ``returning``: a turn back from its outside work (served first)."""
        with self._lock:
            if self._free and not self._returning and (returning or not self._new):
                self._free -= 1
                return self._took()
            if not blocking:
                return False
            turn = threading.Event()
            queue = self._returning if returning else self._new
            queue.append(turn)
        if turn.wait(timeout):
            return self._took()
        with self._lock:
            if turn.is_set():       # handed over just as the wait ended
                return self._took()
            queue.remove(turn)
            return False

    def _took(self) -> bool:
        held = getattr(self._held, "slots", None)
        if held is None:
            held = self._held.slots = []
        held.append(self)
        return True

    def release(self) -> None:
        held = getattr(self._held, "slots", None) or []
        if self in held:
            held.remove(self)
        with self._lock:
            if self._returning:
                self._returning.popleft().set()
            elif self._new:
                self._new.popleft().set()
            elif self._free >= self.size:
                raise ValueError("TurnSlots released too many times")
            else:
                self._free += 1

    def __enter__(self) -> TurnSlots:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def in_use(self) -> int:
        with self._lock:
            return self.size - self._free

    @classmethod
    def released(cls) -> _Released:
        """Around a turn's outside work: the slots this thread holds are free meanwhile, retaken after."""
        return _Released(list(getattr(cls._held, "slots", None) or []))


class _Released:
    def __init__(self, slots: list[TurnSlots]):
        self.slots = slots

    def __enter__(self) -> None:
        for slot in self.slots:
            slot.release()

    def __exit__(self, *exc: object) -> None:
        for slot in self.slots:
            slot.acquire(returning=True)


#: threads that run turns' outside work (a call that outlives its deadline finishes here on its own)
OUTSIDE = concurrent.futures.ThreadPoolExecutor(max_workers=128, thread_name_prefix="turn-outside")
#: threads that run turns' tool calls and memory loads: apart from OUTSIDE (the answer generator), so a hanging
#: shop, whose calls wait here for their server's bulkhead and then their timeout, takes none of its threads
TOOL_CALLS = concurrent.futures.ThreadPoolExecutor(max_workers=128, thread_name_prefix="turn-tools")
#: threads that load a ticket's session memory when an agent first reads it (router.turn.tiers.tickets.MemoryOnDemand);
#: few, so they never take more than a few of the pool's connections from the turns (each takes one at a time,
#: only for its short transactions); their tool calls wait on TOOL_CALLS
AFTER_COMMIT = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="turn-after-commit")
