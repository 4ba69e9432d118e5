"""One inbound message, end to end, in one transaction.

The conversation row is locked first (messages of one conversation are routed one at a
time, so the state machine never races itself), then the message is inserted with
``ON CONFLICT DO NOTHING`` on (channel, external message id): a retried or concurrent
duplicate delivery finds the first one's turn and gets exactly the same response back,
and nothing new is stored.

A conversation belongs to the customer of its first message (per channel): another customer's message into
it is refused with 409, or, by policy, routed into that customer's own conversation (``<id>~<customer>``), so
the turn and its tools always act for the message's own customer. A message is admitted first
(router.turn.admission: concurrent turns and the per-key and overall quotas, 429); a decider may refuse it
too (the per-customer quota: 429). A refused message is rolled back: nothing is stored, and a retry of the
same message id after the wait is routed as a new message. A deadlock with a concurrent ticket change is
retried from the start (the whole turn is one transaction, so a retry is clean), and so, once, is a turn
whose connection died under it (a database restart, a killed backend): the retry takes a fresh connection
and, if the first attempt did commit, finds its stored turn. ``switchboard_messages_total`` counts committed
messages; every failed attempt counts in ``switchboard_turn_failures_total`` by cause.

Slow work a decision may want (the optional answer generator, an external HTTP call of seconds) never
runs with the conversation locked or a pooled connection held: code inside the turn asks for it through
:func:`router.turn.passes.outside_transaction`. The first pass then decides as usual, is rolled back (nothing is stored, so
nothing can be lost or answered twice), the work runs with nothing held, and the turn runs again with the
result at hand: the decision is re-made under the lock, and uses the result only if it asks for the same
work again (same question, same evidence), otherwise it decides without it. A retry of the same message
id meanwhile finds no stored message and is routed the same way; one that arrives after the commit gets
the stored response, byte for byte. Work a decision asks for only once an earlier result is known (a
workflow's second tool call) takes another pass, at most :attr:`Pipeline.MAX_PASSES` in all; the work of
one pass runs in parallel, each item within its own deadline (``until``), after which the next pass gets
:class:`OutsideDeadline` for it. What a turn computes once and reuses in every pass (its classification)
is kept with :func:`per_turn`.

Between the passes the conversation is not locked, so it may move on: when another message of the
conversation was stored meanwhile (the customer's next message, an agent's reply), or its state, session or
tickets changed (an agent claimed it), the newer event wins: the message is stored without a decision of
its own (``superseded``), and the outside work's results stay only where that work recorded them (the tool
audit). The turn's id is derived from the message (channel and message id), so everything a pass does
elsewhere (an audited tool call, a flow started with a write's idempotency key) names the same turn in every
pass and in a repeat of the message after a crash or a lost connection.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from failures.retry import LOST_RACE, pause
from router.channels.registry import channel_label
from router.db.errors import DatabaseUnavailable
from router.problems import Problem
from router.schemas import Decision, InboundMessage, Reply, TurnOut
from router.turn.passes import CURRENT_PASS, Pass, RollBack, TurnSlots, Work, run_wanted
from router.telemetry.logs import BUSINESS_KEYS, redact_obj
from text import LONG_MESSAGE_CHARS

log = logging.getLogger(__name__)

# what the channel adapters themselves put in a message's metadata (the business's own number or account,
# the message kind): kept as it is; everything else a client sends there is stored masked
CHANNEL_METADATA_KEYS = frozenset({"kind", "to", "account", "encryption", "chat_type", "language_code"})


#: how a job left for after the commit takes a pooled connection (``with connect() as conn``)
Connect = Callable[[], AbstractContextManager[psycopg.Connection]]

#: what a decider reads ahead of a turn's first pass (router.turn.decider.Decider.ahead): it may take a pooled
#: connection for short reads (no lock) and ask for outside work, which then runs before the first pass; True:
#: what it would ask next depends on that work, so it looks again once the work is done (AHEAD_ROUNDS at most)
Ahead = Callable[[InboundMessage, Connect], bool | None]


@dataclass
class TurnContext:
    """What a decider gets: the open transaction and the rows it may read or update."""

    conn: psycopg.Connection
    conversation: dict[str, Any]
    message: dict[str, Any]
    inbound: InboundMessage
    timings: dict[str, float]
    # run with the connection once the turn has committed (e.g. NOTIFY the queue screens: a
    # NOTIFY inside the turn would serialise every turn's commit behind Postgres's notify lock)
    after_commit: list[Callable[[psycopg.Connection], None]] = field(default_factory=list)
    # the turn row's id, known before the decider runs so what the turn does elsewhere (tool calls) names it;
    # the pipeline derives it from the message (turn_id_of), the same in every pass and every repeat
    turn_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    # how many times the turn's outside work ran before this pass (kept in the trace: one read, one run)
    outside_runs: int = 0
    # the conversation row was made by this pass: it has no earlier message, ticket, flow or memory row yet
    new_conversation: bool = False


_TURN_NAMESPACE = uuid.UUID("5b0c7e3e-3f7a-4c55-9d8e-7a1f2f0c9b31")


def _conversation_id(channel: str, external_id: str, attempt: int = 0) -> str:
    extra = f"\x00{attempt}" if attempt else ""
    return str(uuid.uuid5(_TURN_NAMESPACE, f"conversation\x00{channel}\x00{external_id}{extra}"))


def new_conversation_id(channel: str, external_id: str) -> str:
    """The id a conversation made by this message's turn gets (known before the turn: work asked ahead names it)."""
    return _conversation_id(channel, external_id)


#: who holds the conversation's open tickets (part of a turn's mark: an agent's claim moves the conversation on)
_TICKETS_HELD = ("SELECT coalesce(string_agg(id::text || ':' || status || ':' || coalesce(claimed_by::text, ''), ','"
                 " ORDER BY id), '') AS tickets FROM tickets WHERE conversation_id = %s"
                 " AND status IN ('queued', 'claimed')")


def ahead_mark(conn: Any, conversation: dict[str, Any] | None) -> None:
    """Work is asked ahead of a turn in ``conversation`` (its row as read then; None: not made yet): what the
    conversation looks like now is the turn's mark, so its first pass, run once the work is done, is superseded
    when the conversation moved on meanwhile (a newer message, an agent's claim), as a later pass is
    (Pipeline._moved). The first such mark of a turn counts."""
    scope = CURRENT_PASS.get()
    if scope is None or scope.work.mark is not None:
        return
    if conversation is None:   # any message stored in it from now on is newer than this one
        scope.work.mark = {"message": 0, "state": None, "session": None, "tickets": ""}
        return
    row = conn.execute("SELECT (SELECT coalesce(max(id), 0) FROM messages WHERE conversation_id = %s) AS message, ("
                       + _TICKETS_HELD + ") AS tickets", (conversation["id"], str(conversation["id"]))).fetchone()
    scope.work.mark = {"message": row["message"], "state": conversation["state"],
                       "session": conversation["session_no"], "tickets": row["tickets"]}


def turn_id_of(msg: InboundMessage) -> str:
    """The turn's id for a message: the same for every pass and every repeat of the same delivery."""
    return str(uuid.uuid5(_TURN_NAMESPACE, f"{msg.channel}\x00{msg.message_external_id}"))


@dataclass
class TurnResult:
    decision: Decision
    state: str
    reply: dict[str, Any] | None = None
    ticket_id: str | None = None
    trace: dict[str, Any] | None = None   # stages, candidates, transitions: stored redacted with the turn
    reject: Problem | None = None         # refuse the message (e.g. 429): rolled back, nothing stored, raised
    lang: str | None = None               # the reply language the decider chose (router.turn.language)
    flow: dict[str, Any] | None = None    # the workflow's state when one answered (FlowTurn.as_response())


Decider = Callable[[TurnContext], TurnResult]


def record_only(ctx: TurnContext) -> TurnResult:
    """The decider used when no router is wired: the message is stored, nothing is decided."""
    return TurnResult(decision=Decision(channel="none", explanation={"note": "no router configured"}),
                      state=ctx.conversation["state"])


def same_message(stored: dict[str, Any], conversation: dict[str, Any], msg: InboundMessage) -> bool:
    """Whether a message id seen again is the same message (a retry), not another one under a taken id.

    Same conversation, same text, same customer and the same integration key (where they were recorded):
    a caller that reuses someone else's message id learns nothing but that the id is taken.
    """
    return (stored["conversation_id"] == conversation["id"] and stored["text"] == msg.text
            and stored["customer_id"] in (None, msg.customer_id)
            and (stored["integration_key_id"] is None and msg.integration_key_id is None
                 or str(stored["integration_key_id"]) == str(msg.integration_key_id)))


Owner = Callable[[str], str]   # channel -> "refuse" | "separate"
#: what joins a conversation id and its customer id when another customer's message starts its own conversation
SEPARATOR = "~"


def refuse_others(channel: str) -> str:
    return "refuse"


class _Refused(Exception):
    """Raised inside the transaction so a refused message rolls back; carries the problem to raise."""

    def __init__(self, problem: Problem):
        super().__init__(problem.detail)
        self.problem = problem


class Pipeline:
    ATTEMPTS = 5   # a turn that loses a deadlock is retried from scratch (it is one transaction)
    #: passes of one turn at most: the first decides and notes the outside work it wants, each later one
    #: applies the results (and may ask for work that depends on them); the last may not defer any more
    MAX_PASSES = 4
    #: look-ahead rounds before the first pass (the memory, then the flow's first reads, which may depend on it)
    AHEAD_ROUNDS = 2

    def __init__(self, pool, metrics, decider: Decider = record_only, *, owner: Owner = refuse_others,
                 admission=None, prepare: Callable[[InboundMessage], None] | None = None,
                 heavy_slots: int | None = None, deadline: float | None = None, ahead: Ahead | None = None,
                 pass_slots: int | None = None):
        self.pool = pool
        # outside work a decider can tell from the message and a short read that the turn will want (a new
        # flow's session memory): asked before the first pass, so no pass is rolled back only to discover it
        self.ahead = ahead
        # the longest a turn's transaction may wait between two statements (slow work under the lock): the
        # server then ends the session, which frees the conversation's lock and the connection; the turn is
        # repeated on a fresh connection like any lost one, and answers 503 when that fails too
        self.deadline = deadline
        # message-only work done before a connection is taken (e.g. encoding a long message): Decider.prepare
        self.prepare = prepare
        # turns of long messages hold at most this many pooled connections at once (None: no bound), so a
        # crowd of them leaves connections for everyone else's short turns; the rest wait holding nothing
        self.heavy = TurnSlots(heavy_slots) if heavy_slots else None
        # turns whose pass holds a pooled connection at once (router.turn.passes.pass_slots; None: no bound):
        # the others wait holding nothing, after their admission and their heavy slot, so a turn waiting on
        # its customer's cap or a crowd of long messages keeps no short turn waiting; a turn waiting on its
        # outside work (a slow shop) gives its slot back meanwhile
        self.passes = TurnSlots(pass_slots) if pass_slots else None
        self.metrics = metrics
        self.decider = decider
        self.owner = owner            # what another customer's message into a conversation does
        self.admission = admission    # router.turn.admission.Admission (None: admit everything)

    def handle(self, msg: InboundMessage,
               on_conversation: Callable[[psycopg.Connection, dict[str, Any]], None] | None = None
               ) -> tuple[dict[str, Any], bool]:
        """Route one message; return (response, replayed) where replayed marks a duplicate delivery.

        Raises :class:`Problem` when the message is refused (429 over a quota or a concurrency cap, 409 into
        another customer's conversation); nothing of it is stored. ``on_conversation(conn, conversation)``
        runs in the turn's transaction once the conversation row is locked and known to be the message's
        customer's (the channel gateway stores the conversation's return address there).
        """
        if self.admission is None:
            return self._prepared(msg, on_conversation)
        with self.admission.admit(msg):
            return self._prepared(msg, on_conversation)

    #: a message from this length on is a heavy turn (its text costs the detector, the rewriter and the
    #: context package measurably more than a chat message)
    HEAVY_FROM_CHARS = LONG_MESSAGE_CHARS
    #: how long a heavy turn waits for a slot before the message is refused (429, nothing stored)
    HEAVY_WAIT_SECONDS = 10.0

    def _prepared(self, msg: InboundMessage, on_conversation=None) -> tuple[dict[str, Any], bool]:
        if self.prepare is not None:
            t = time.perf_counter()
            self.prepare(msg)
            self.metrics.stage_seconds.labels("prepare").observe(time.perf_counter() - t)
        if self.heavy is None or len(msg.text or "") < self.HEAVY_FROM_CHARS:
            return self._in_slot(msg, on_conversation)
        if not self.heavy.acquire(timeout=self.HEAVY_WAIT_SECONDS):
            self.metrics.refused.labels("heavy_turns").inc()
            raise Problem(429, "Too many long messages are being routed at once. Nothing was stored; retry after "
                               "2 s.", title="Too Many Requests", headers={"Retry-After": "2"}, retry_after=2)
        try:
            return self._in_slot(msg, on_conversation)
        finally:
            self.heavy.release()

    def _in_slot(self, msg: InboundMessage, on_conversation=None) -> tuple[dict[str, Any], bool]:
        """The turn in one of :attr:`passes`; the wait for it is observed as the ``slot_wait`` stage."""
        if self.passes is None:
            return self._handle_admitted(msg, on_conversation)
        t = time.perf_counter()
        with self.passes:
            self.metrics.stage_seconds.labels("slot_wait").observe(time.perf_counter() - t)
            return self._handle_admitted(msg, on_conversation)

    def _handle_admitted(self, msg: InboundMessage, on_conversation=None) -> tuple[dict[str, Any], bool]:
        losses = 0
        # after a lost connection the turn is repeated on a fresh one: once at once, and again while the
        # server is away (a clean restart), within about one acquire bound of the message's arrival
        # (Pool.retry_wait): a 503 still comes within the fail-fast bound
        t0 = time.monotonic()
        acquire: float | None = None
        work = Work()    # outside work done for this message (kept across retries)
        for attempt in range(self.ATTEMPTS):
            try:
                return self._handle(msg, acquire, work, on_conversation)
            except LOST_RACE:
                # an agent action locked the ticket, then the conversation; this turn did the reverse
                self.metrics.turn_failures.labels("deadlock").inc()
                if attempt == self.ATTEMPTS - 1:
                    raise
                pause(attempt + 1, 0.01, 0.05)
            except DatabaseUnavailable as exc:
                self.metrics.turn_failures.labels(exc.cause).inc()
                losses += 1
                acquire = self.pool.retry_wait(exc, started=t0, losses=losses)
                if acquire is None or attempt == self.ATTEMPTS - 1:
                    raise
                log.info("turn lost its database connection (%s, %d); retrying", exc.cause, losses)
            except Problem:
                raise
            except Exception:
                self.metrics.turn_failures.labels("error").inc()
                raise
        raise AssertionError("unreachable")

    def _handle(self, msg: InboundMessage, acquire: float | None = None, work: Work | None = None,
                on_conversation=None) -> tuple[dict[str, Any], bool]:
        t0 = time.perf_counter()
        work = Work() if work is None else work
        if self.ahead is not None and not work.looked_ahead:
            work.looked_ahead = True        # once per message: a repeat after a lost connection has it at hand
            self._look_ahead(msg, acquire, work)
        passes = 1
        scope = Pass(work, may_defer=passes < self.MAX_PASSES)
        while True:
            token = CURRENT_PASS.set(scope)
            try:
                outcome = self._attempt(msg, acquire, scope, t0, on_conversation)
            except RollBack:
                outcome = None
            except (Problem, DatabaseUnavailable, *LOST_RACE):
                raise
            except Exception:
                # a decision that cannot go on without the work it asked for (a workflow waiting for its
                # tool's result) ends its pass by raising: the pass is discarded like any other first pass
                if not scope.wanted:
                    raise
                outcome = None
            finally:
                CURRENT_PASS.reset(token)
            if outcome is not None:
                return outcome
            # the pass asked for slow work: it runs now, with no lock and no connection held
            self._run_outside(scope)
            passes += 1
            scope = Pass(work, may_defer=passes < self.MAX_PASSES)

    def _look_ahead(self, msg: InboundMessage, acquire: float | None, work: Work) -> None:
        """The decider's look ahead, in passes of its own that hold nothing; the work each asks for runs at
        once, with the caller's slot given back, and the next finds it at hand (what a flow reads first may
        depend on the memory read before: the decider asks to look again, at most AHEAD_ROUNDS times). The
        first pass finds the results at hand. An optimisation only: a failure is logged and the turn runs as it
        would without it (a lost database is the turn's)."""
        waited: float | None = None
        for _ in range(self.AHEAD_ROUNDS):
            scope = Pass(work, may_defer=True)
            token = CURRENT_PASS.set(scope)
            again = False
            try:
                assert self.ahead is not None
                again = bool(self.ahead(msg, lambda: self.pool.connection(acquire)))
            except DatabaseUnavailable:
                raise
            except Exception:  # noqa: BLE001 - the turn decides without it
                if not scope.wanted:
                    log.warning("looking ahead of a turn failed", exc_info=True)
            finally:
                CURRENT_PASS.reset(token)
            if not scope.wanted:
                break
            t = time.perf_counter()
            with TurnSlots.released():
                run_wanted(scope)
                waited = (waited or 0.0) + time.perf_counter() - t
            if not again:
                break
        if waited is not None:
            work.ahead_seconds = waited
            self.metrics.stage_seconds.labels("ahead").observe(waited)

    def _run_outside(self, scope: Pass) -> None:
        """The pass's wanted work, in parallel, each item until its deadline (a late one: OutsideDeadline)."""
        t = time.perf_counter()
        with TurnSlots.released():   # the caller's bounds on turns at once count turns holding a connection
            run_wanted(scope)
            waited = time.perf_counter() - t
        back = time.perf_counter() - t - waited     # the slot retaken (turns back from outside work go first)
        scope.work.outside_runs += 1
        scope.work.outside_seconds += waited
        scope.work.slot_back_seconds += back
        self.metrics.stage_seconds.labels("outside").observe(waited)
        self.metrics.stage_seconds.labels("slot_back").observe(back)

    def _attempt(self, msg: InboundMessage, acquire: float | None, scope: Pass, t0: float, on_conversation=None):
        scope.committed.clear()     # what an earlier attempt of this pass noted did not commit
        try:
            with self.pool.connection(acquire) as conn:
                with conn.transaction():
                    if self.deadline:
                        conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
                                     (f"{int(self.deadline * 1000)}ms",))
                    response, ctx, result = self._turn(conn, msg, on_conversation, scope.work)
                    if ctx is None:
                        return response, True
                    if scope.wanted:
                        raise RollBack()
                    if result.reject is not None:   # refused (a quota): rolled back, nothing stored
                        raise _Refused(result.reject)
                self.metrics.messages.labels(channel_label(msg.channel)).inc()   # committed
                for count in scope.committed:
                    try:
                        count()
                    except Exception:  # noqa: BLE001 - the turn is committed; a failed count is only logged
                        log.warning("after-commit count failed", exc_info=True)
                for hook in ctx.after_commit:
                    try:
                        hook(conn)
                    except Exception:  # noqa: BLE001 - the turn is committed; a failed announcement is only logged
                        log.warning("after-commit hook failed", exc_info=True)
        except _Refused as refused:
            self.metrics.refused.labels("quota_customer").inc()
            raise refused.problem from None
        elapsed = time.perf_counter() - t0
        self.metrics.stage_seconds.labels("total").observe(elapsed)
        self._observe_stages(ctx, result)
        d = result.decision
        self.metrics.decisions.labels(d.tier or "none", d.intent or "none", d.channel or "none").inc()
        return response, False

    # a new conversation's id comes from its channel and external id, so every pass of its first turn (and a
    # repeat after a crash) makes the same row: what the pass did outside (an audited tool call) names it.
    # Two unique keys can clash (the id and (channel, external id)), and ON CONFLICT with one target raises on
    # the other when first turns race: the insert yields to any clash, and the row is then taken by its key.
    _NEW_CONVERSATION = """
        INSERT INTO conversations (id, channel, external_id, customer_id)
        VALUES (%s, %s, %s, %s)
        ON CONFLICT DO NOTHING
        RETURNING id, channel, external_id, customer_id, state, session_no, metadata
    """
    _KNOWN_CONVERSATION = """
        UPDATE conversations
        SET updated_at = CASE WHEN customer_id = %s THEN now() ELSE updated_at END
        WHERE channel = %s AND external_id = %s
        RETURNING id, channel, external_id, customer_id, state, session_no, metadata
    """

    def _upsert_conversation(self, conn, channel: str, external_id: str,
                             customer_id: str) -> tuple[dict[str, Any], bool]:
        """The conversation row, made if new, locked either way (the insert or the update holds its lock); True
        when this call made it."""
        for attempt in range(self.ATTEMPTS):
            row = conn.execute(self._KNOWN_CONVERSATION, (customer_id, channel, external_id)).fetchone()
            if row is not None:
                return row, False
            # the id is taken without the key when a forgotten conversation (router.ops.privacy) kept it: the
            # next attempt's id is as deterministic, so a later pass of this turn makes the same row again
            row = conn.execute(self._NEW_CONVERSATION, (_conversation_id(channel, external_id, attempt), channel,
                                                        external_id, customer_id)).fetchone()
            if row is not None:
                return row, True
            # another turn made it meanwhile (its insert committed first): it is taken by its key next time
        raise LookupError(f"conversation {channel}/{external_id} could be neither made nor found")

    def _conversation(self, conn, msg: InboundMessage) -> tuple[dict[str, Any], bool]:
        """The message's conversation row, locked (the upsert locks it), and always the message's customer's.

        The owner is whoever's message created the row; the check runs under the row lock, so two customers
        racing for a new conversation id cannot both get it. Another customer's message is refused (409, and the
        rollback stores nothing) or goes to that customer's own conversation ``<id>~<customer id>``, by policy.
        """
        conversation, made = self._upsert_conversation(conn, msg.channel, msg.conversation_external_id,
                                                       msg.customer_id)
        if conversation["customer_id"] == msg.customer_id:
            return conversation, made
        if self.owner(msg.channel) == "separate":
            own = f"{msg.conversation_external_id}{SEPARATOR}{msg.customer_id}"
            conversation, made = self._upsert_conversation(conn, msg.channel, own, msg.customer_id)
            if conversation["customer_id"] == msg.customer_id:
                return conversation, made
        self.metrics.refused.labels("conversation_owner").inc()
        raise Problem(409, "This conversation belongs to another customer: start a new conversation id.",
                      title="Conflict")

    def _turn(self, conn, msg: InboundMessage, on_conversation, work: Work):
        """The turn inside its transaction: (response, ctx, result); ctx None for an already-answered retry."""
        conversation, made = self._conversation(conn, msg)
        if on_conversation is not None:
            on_conversation(conn, conversation)
        message = conn.execute(
            """
            INSERT INTO messages (conversation_id, channel, external_id, direction, sender, text, sent_at, metadata,
                                  customer_id, integration_key_id)
            VALUES (%s, %s, %s, 'in', 'customer', %s, %s, %s, %s, %s)
            ON CONFLICT (channel, external_id) DO NOTHING
            RETURNING id, conversation_id, text, sent_at
            """,
            (conversation["id"], msg.channel, msg.message_external_id, msg.text, msg.sent_at,
             json.dumps(redact_obj(msg.metadata, keep=CHANNEL_METADATA_KEYS), ensure_ascii=False, default=str),
             msg.customer_id, msg.integration_key_id),
        ).fetchone()
        if message is None:
            stored = conn.execute(
                """
                SELECT m.id, m.conversation_id, m.text, m.sent_at, m.throttled, m.customer_id, m.integration_key_id,
                       t.response, t.response_text
                FROM messages m LEFT JOIN turns t ON t.message_id = m.id
                WHERE m.channel = %s AND m.external_id = %s
                """,
                (msg.channel, msg.message_external_id),
            ).fetchone()
            if stored is not None and not same_message(stored, conversation, msg):
                # another message under a taken id: refused, and the rollback stores nothing (not even the
                # conversation row the upsert above may have made)
                raise Problem(409, "This message id is already used by another message.", title="Conflict")
            if stored is not None and stored["response"] is None and stored["throttled"]:
                # kept flagged by an earlier version when refused (quota): this retry is routed now
                message = {k: stored[k] for k in ("id", "conversation_id", "text", "sent_at")}
                conn.execute("UPDATE messages SET throttled = false WHERE id = %s", (message["id"],))
            else:
                self.metrics.duplicates.labels(channel_label(msg.channel)).inc()
                if stored is None or stored["response"] is None:  # stored without a turn (e.g. by an agent tool)
                    raise LookupError("message exists but has no turn")
                if stored["response_text"] is not None:   # the stored text keeps the first answer's key order
                    return json.loads(stored["response_text"]), None, None
                return stored["response"], None, None

        ctx = TurnContext(conn=conn, conversation=conversation, message=message, inbound=msg, timings={},
                          turn_id=turn_id_of(msg), outside_runs=work.outside_runs, new_conversation=made)
        if ctx.outside_runs:
            ctx.timings["outside"] = work.outside_seconds
            ctx.timings["slot_back"] = work.slot_back_seconds
        if work.ahead_seconds is not None:   # outside work asked before the first pass (trace `ahead`)
            ctx.timings["ahead"] = work.ahead_seconds
        t_decide = time.perf_counter()
        moved = self._moved(conn, conversation, message, work, made)
        result = self.decider(ctx) if moved is None else self._superseded(conversation, moved, work)
        ctx.timings.setdefault("decide", time.perf_counter() - t_decide)
        response = None
        scope = CURRENT_PASS.get()
        # a refused message, or a pass that asked for outside work, is rolled back by the caller: not stored
        if result.reject is None and not (scope is not None and scope.wanted):
            response = self._store_turn(conn, conversation, message, ctx, result)
        return response, ctx, result

    def _mark(self, conn, conversation: dict[str, Any], message: dict[str, Any], made: bool) -> dict[str, Any]:
        """What must not change while a turn's outside work runs: the conversation's state and session, its
        messages after this one, and who holds its tickets (none in a conversation this pass made)."""
        tickets = "" if made else conn.execute(_TICKETS_HELD, (str(conversation["id"]),)).fetchone()["tickets"]
        return {"message": message["id"], "state": conversation["state"], "session": conversation["session_no"],
                "tickets": tickets}

    def _moved(self, conn, conversation: dict[str, Any], message: dict[str, Any], work: Work,
               made: bool = False) -> str | None:
        """Why the conversation moved on since the turn's first pass, or since work was asked ahead of it
        (ahead_mark); None: it did not, or nothing ran outside. ``made``: this pass made the conversation row,
        so no other message can be in it (another turn's would have made the row first)."""
        now = self._mark(conn, conversation, message, made)
        if work.mark is None or (work.outside_runs == 0 and work.ahead_seconds is None):
            work.mark = now
            return None
        was = work.mark
        newer = None if made else conn.execute(
            "SELECT sender FROM messages WHERE conversation_id = %s AND id > %s AND id <> %s ORDER BY id LIMIT 1",
            (conversation["id"], was["message"], message["id"])).fetchone()
        if newer is not None:
            return f"a newer message ({newer['sender']}) was routed meanwhile"
        if was["state"] is not None and (now["state"], now["session"]) != (was["state"], was["session"]):
            return f"the conversation moved from {was['state']} to {now['state']} meanwhile"
        if now["tickets"] != was["tickets"]:
            return "its tickets changed meanwhile (an agent claimed or closed one)"
        return None

    def _superseded(self, conversation: dict[str, Any], why: str, work: Work) -> TurnResult:
        """The turn of a message the conversation moved past while its outside work ran: stored, not decided;
        that work's results are not applied (a tool call keeps its audit row)."""
        log.info("turn of message %s superseded: %s", work.mark and work.mark.get("message"), why)
        done = sorted(str(k[1]) if isinstance(k, tuple) and len(k) > 1 else str(k) for k in work.ready)
        return TurnResult(decision=Decision(channel="none", explanation={"note": "superseded", "why": why}),
                          state=conversation["state"], trace={"superseded": {"why": why, "outside": done},
                                                              "outcome": "superseded"})

    def _observe_stages(self, ctx: TurnContext, result: TurnResult) -> None:
        """Stage latencies the decider does not observe itself, read from the turn's trace."""
        trace = result.trace or {}
        rag_ms = (trace.get("rag") or {}).get("timings_ms") or {}
        for stage in ("rerank", "answer"):
            if stage in rag_ms:
                self.metrics.stage_seconds.labels(stage).observe(rag_ms[stage] / 1000)
        if (trace.get("classification") or {}).get("decided_by") == "rules" and "classify" in ctx.timings:
            self.metrics.stage_seconds.labels("rules").observe(ctx.timings["classify"])

    def _store_turn(self, conn, conversation, message, ctx: TurnContext, result: TurnResult) -> dict[str, Any]:
        """The turn row (decision, redacted trace) and the exact response a retry will get again."""
        trace = {"timings_ms": {k: round(v * 1000, 3) for k, v in ctx.timings.items()},
                 "decision": result.decision.model_dump(mode="json"), **(result.trace or {})}
        if ctx.outside_runs:
            trace["outside_runs"] = ctx.outside_runs
        turn_id = ctx.turn_id      # known before the insert, so the row is written once with its response
        out = TurnOut(
            conversation_id=str(conversation["id"]),
            external_conversation_id=conversation["external_id"],
            turn_id=str(turn_id),
            state=result.state,
            decision=result.decision,
            reply=Reply.model_validate(result.reply) if result.reply is not None else None,
            ticket_id=result.ticket_id,
            lang=result.lang,
            outcome=(result.trace or {}).get("outcome"),
            flow=result.flow,
        )
        response = out.model_dump(mode="json", exclude_none=False)
        if response.get("flow") is None:
            response.pop("flow", None)      # responses without a workflow keep their shape
        conn.execute(
            """
            INSERT INTO turns (id, conversation_id, message_id, session_no, state, decision, response, response_text,
                               trace)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
            """,
            (turn_id, conversation["id"], message["id"], conversation["session_no"], result.state,
             result.decision.model_dump_json(), json.dumps(response, ensure_ascii=False),
             json.dumps(response, ensure_ascii=False),
             json.dumps(redact_obj(trace, keep=BUSINESS_KEYS), ensure_ascii=False, default=str)),
        )
        return response


