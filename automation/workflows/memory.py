"""Session memory: what the shop and earlier conversations already say about the customer.

At the start of a session (the first flow of a conversation, or the first ticket) the engine calls
the read tools the workflows file declares under ``memory:`` (the example shop: ``get_customer``,
its profile with the recent orders) and gathers the customer's earlier outcomes: their flows (this
package's ``flow_instances``) and their tickets (through an injected read port, since tickets
belong to handoff). The result is cached per conversation in ``flow_memory`` (migration 0160) and
offered to every flow as CEL ``memory.<name>`` and ``memory.outcomes``; it is never required: a
tool that fails leaves its default (``null`` or ``[]``) and the flow simply asks.

The tools are called through the turn's outside port (automation.workflows.outside): all of them at once,
in parallel, with no lock and no connection held. What they said is also kept per customer in this process
for ``ttl_seconds``, so the customer's next conversation does not ask the shop again; a stale entry is still
served once while one background refresh asks the shop anew (never two at once for one customer). Names that
make the very same call (tool and arguments) share it: one call to the shop, each name its own value of it.

    memory:
      ttl_seconds: 1800                       # a session: reload after this long
      outcomes: 5                             # earlier flows and tickets offered as memory.outcomes
      tools:                                  # one call: the profile with the five newest orders
        profile: {call: get_customer, args: {recent_orders: "5"}, value: "result.found ? result.customer : null"}
        orders: {call: get_customer, args: {recent_orders: "5"}, value: result.orders, default: "[]"}
"""

from __future__ import annotations

import re
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from psycopg.types.json import Jsonb

from automation.workflows import understand as U
from automation.workflows.expr import ExpressionError, evaluate, evaluate_value, roots
from automation.workflows.outside import PENDING, CallPending, Outside, call_outside, inline

PURPOSE = "memory"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
RESERVED = ("outcomes", "failed", "loaded_at")

# "the same address as last time", "和上次一样": the customer points at a remembered value
_RECALL = re.compile(
    r"(和|跟|同|与)\s*上(次|回|一次)\S{0,4}(一样|相同)|用\s*上(次|回)的|上(次|回)(那个|的)\s*(地址|抬头)|原来的地址|老地址"
    r"|\bsame\b.{0,20}\b(as|like)\s+(last\s+time|before|previously|the\s+last\s+(one|order))\b"
    r"|\b(the\s+)?(one|address|title)\s+i\s+used\s+(last\s+time|before)\b|\bsame\s+as\s+last\s+time\b"
    r"|\blast\s+time'?s\b|\bmy\s+previous\s+address\b",
    re.I)


def is_recall(text: str) -> bool:
    return bool(_RECALL.search(U.norm(text) if text else ""))


@dataclass
class MemoryCall:
    name: str
    tool: str
    args: dict[str, Any] = field(default_factory=dict)   # CEL over caller, lang
    value: str | None = None                             # CEL over result (default: the result)
    default: str | None = None                           # CEL literal when the tool fails (default null)


@dataclass
class MemorySpec:
    calls: list[MemoryCall] = field(default_factory=list)
    outcomes: int = 5
    ttl_seconds: float = 1800.0
    # some call's arguments read ``lang``: the customer's cached memory is then kept per language (else one copy
    # serves a customer who writes in English in one conversation and in Chinese in the next)
    by_language: bool = False


def parse_memory(value: Any, path: tuple[Any, ...], chk: Any) -> MemorySpec | None:
    """Validate the ``memory:`` section against the gateway: read tools only, known arguments, CEL that compiles."""
    if value is None:
        return None
    if not isinstance(value, dict):
        chk.err(path, "expected {tools: {NAME: {call, args, value, default}}, outcomes: N, ttl_seconds: S}")
        return None
    for k in value:
        if k not in ("tools", "outcomes", "ttl_seconds"):
            chk.err(path + (k,), f"unknown key {k!r} (tools, outcomes, ttl_seconds)")
    spec = MemorySpec()
    for key, attr in (("outcomes", "outcomes"), ("ttl_seconds", "ttl_seconds")):
        if key in value:
            v = value[key]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                chk.err(path + (key,), "expected a number >= 0")
            else:
                setattr(spec, attr, int(v) if key == "outcomes" else float(v))
    tools = value.get("tools") or {}
    if not isinstance(tools, dict):
        chk.err(path + ("tools",), "expected a mapping of memory name to {call, args, value, default}")
        return spec
    for name, body in tools.items():
        p = path + ("tools", name)
        if not isinstance(name, str) or not _NAME.match(name) or name in RESERVED:
            chk.err(p, f"a memory name is lower case letters, digits and _ (not {', '.join(RESERVED)})")
            continue
        if not isinstance(body, dict) or "call" not in body:
            chk.err(p, "expected {call: TOOL, args, value, default}")
            continue
        for k in body:
            if k not in ("call", "args", "value", "default"):
                chk.err(p + (k,), f"unknown key {k!r} (call, args, value, default)")
        ts = chk.tool(body["call"], p + ("call",))
        if ts is not None and getattr(ts, "risk", "read") != "read":
            chk.err(p + ("call",), f"memory only reads: {body['call']!r} is a {ts.risk} tool")
        args = body.get("args") or {}
        if not isinstance(args, dict):
            chk.err(p + ("args",), "arguments are a mapping of argument name to a CEL expression")
            args = {}
        props = None
        if ts is not None:   # the gateway's spec knows what a caller may pass; a bare spec, its input schema
            props = (list(ts.caller_arguments) if hasattr(ts, "caller_arguments")
                     else list(((getattr(ts, "input_schema", None) or {}).get("properties") or {})))
        for k, src in args.items():
            if props is not None and k not in props:
                chk.err(p + ("args", k), f"unknown argument {k!r} of tool {ts.name!r} (it takes: {', '.join(sorted(props))})")
            _check_expr(src, p + ("args", k), {"caller", "lang"}, chk)
            spec.by_language = spec.by_language or _reads_lang(src)
        for key, allowed in (("value", {"result"}), ("default", set())):
            if key in body:
                _check_expr(body[key], p + (key,), allowed, chk)
        spec.calls.append(MemoryCall(name=name, tool=str(body["call"]), args=args, value=body.get("value"),
                                     default=body.get("default")))
    return spec


def _reads_lang(source: Any) -> bool:
    try:
        return isinstance(source, str) and "lang" in roots(source)[0]
    except ExpressionError:
        return False   # reported by _check_expr


def _check_expr(source: Any, path: tuple[Any, ...], allowed: set[str], chk: Any) -> None:
    if not isinstance(source, str):
        chk.err(path, "expected a CEL expression (a string)")
        return
    try:
        names, _ = roots(source)
    except ExpressionError as exc:
        chk.err(path, f"CEL does not compile: {exc}")
        return
    for n in sorted(names - allowed):
        chk.err(path, f"unknown name {n!r} in {source!r} (known here: {', '.join(sorted(allowed)) or 'none'})")


# ---------------------------------------------------------------- loading

TicketHistory = Callable[[Any, str, str, int], list[dict[str, Any]]]   # (conn, channel, customer_id, limit) -> tickets


def empty(spec: MemorySpec | None) -> dict[str, Any]:
    out: dict[str, Any] = {"outcomes": [], "failed": []}
    for c in (spec.calls if spec else []):
        out[c.name] = _default(c)
    return out


def _default(c: MemoryCall) -> Any:
    if c.default is None:
        return None
    try:
        return evaluate(c.default, {})
    except ExpressionError:
        return None


def _who(caller: Any) -> Any:
    from automation.tools.base import Caller

    return Caller(channel=caller.channel, customer_id=caller.customer_id, conversation_id=caller.conversation_id,
                  turn_id=caller.turn_id, purpose=PURPOSE)


def _from_tools(spec: MemorySpec, tools: Any, caller: Any, lang: str, outside: Outside) -> dict[str, Any]:
    """What the declared read tools say (each its default when it fails); every call is asked of the port
    before any result is needed, so a pass notes them all and they run in parallel."""
    out: dict[str, Any] = {"failed": []}
    who = _who(caller)
    scope = {"caller": {"channel": caller.channel, "customer_id": caller.customer_id}, "lang": lang}
    got: list[tuple[MemoryCall, Any]] = []
    for c in spec.calls:
        out[c.name] = _default(c)
        try:
            args = evaluate_value(c.args, scope)
            got.append((c, call_outside(outside, tools, c.tool, args, who, None, shared=True)))
        except Exception as exc:  # noqa: BLE001 - memory is a courtesy: a broken tool never blocks the flow
            out["failed"].append({"name": c.name, "tool": c.tool, "status": type(exc).__name__})
    if any(result is PENDING for _, result in got):
        raise CallPending("memory")
    for c, result in got:
        if not result.ok:
            out["failed"].append({"name": c.name, "tool": c.tool, "status": result.status})
            continue
        try:
            out[c.name] = evaluate(c.value, {"result": result.output}) if c.value else result.output
        except ExpressionError:
            out["failed"].append({"name": c.name, "tool": c.tool, "status": "bad_value"})
    return out


class _CustomerCache:
    """What the memory tools said per customer (per gateway: a reload or another database starts afresh)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_tools: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[float, dict[str, Any]]]] = \
            weakref.WeakKeyDictionary()
        self._refreshing: set[tuple[Any, ...]] = set()
        self._changed: dict[tuple[Any, Any], float] = {}   # (channel, customer): when their shop data last changed

    def get(self, tools: Any, key: tuple[Any, ...]) -> tuple[float, dict[str, Any]] | None:
        with self._lock:
            try:
                return self._by_tools.get(tools, {}).get(key)
            except TypeError:   # a gateway that cannot be weakly referenced is not cached
                return None

    def put(self, tools: Any, key: tuple[Any, ...], data: dict[str, Any], asked_at: float | None = None) -> None:
        """Keep what the shop said; ``asked_at`` (monotonic): when it was asked, so an answer asked before the
        customer's own change (a refresh in flight during a write) is not kept."""
        if data.get("failed"):
            return   # a failed part is asked again next time
        with self._lock:
            if asked_at is not None and self._changed.get(key[:2], float("-inf")) >= asked_at:
                return
            try:
                entries = self._by_tools.setdefault(tools, {})
            except TypeError:
                return
            if len(entries) > 20_000:
                entries.clear()
            entries[key] = (time.monotonic(), data)

    def refresh(self, tools: Any, key: tuple[Any, ...], load: Callable[[], dict[str, Any]]) -> None:
        """Ask the shop again on a background thread (one at a time per customer)."""
        with self._lock:
            if key in self._refreshing:
                return
            self._refreshing.add(key)

        asked_at = time.monotonic()

        def run() -> None:
            try:
                self.put(tools, key, load(), asked_at)
            except Exception:  # noqa: BLE001 - the stale entry stays; the next conversation asks again
                pass
            finally:
                with self._lock:
                    self._refreshing.discard(key)

        threading.Thread(target=run, name="memory-refresh", daemon=True).start()

    def changed_since(self, channel: Any, customer_id: Any, at: float) -> bool:
        """Whether the customer's shop data changed after ``at`` (monotonic seconds)."""
        with self._lock:
            return self._changed.get((channel, customer_id), float("-inf")) >= at

    def forget(self, channel: Any, customer_id: Any) -> None:
        """The customer changed something in the shop (a write succeeded, here or in another gateway process):
        what any gateway of this process kept of them is stale."""
        with self._lock:
            if len(self._changed) > 20_000:
                self._changed.clear()
            self._changed[(channel, customer_id)] = time.monotonic()
            for entries in list(self._by_tools.values()):
                for key in [k for k in entries if k[:2] == (channel, customer_id)]:
                    del entries[key]

    def clear(self) -> None:
        with self._lock:
            self._by_tools = weakref.WeakKeyDictionary()
            self._changed.clear()


CUSTOMERS = _CustomerCache()


class _ForTurn:
    """Memory a look ahead loaded for a turn (FlowEngine.ahead), taken once by that turn's own load: the
    customer's earlier outcomes are not read twice. Bounded; dropped when the customer's shop data changed since
    (a write here or in another gateway process: memory.forget)."""

    def __init__(self, size: int = 512) -> None:
        self._lock = threading.Lock()
        self._size = size
        self._kept: dict[tuple[Any, ...], tuple[float, dict[str, Any]]] = {}

    def put(self, key: tuple[Any, ...], data: dict[str, Any], asked_at: float) -> None:
        """``asked_at`` (monotonic): when ``data`` began to be gathered (a change of the customer's since voids it)."""
        with self._lock:
            if len(self._kept) >= self._size:
                self._kept.pop(next(iter(self._kept)))   # the oldest
            self._kept[key] = (asked_at, data)

    def take(self, key: tuple[Any, ...], channel: Any, customer_id: Any) -> dict[str, Any] | None:
        with self._lock:
            got = self._kept.pop(key, None)
        if got is None or CUSTOMERS.changed_since(channel, customer_id, got[0]):
            return None
        return got[1]


FOR_TURN = _ForTurn()


def _turn_key(spec: MemorySpec, caller: Any, lang: str) -> tuple[Any, ...] | None:
    if not caller.turn_id:
        return None
    return (id(spec), caller.channel, caller.customer_id, caller.conversation_id, caller.turn_id, lang)


def _key(spec: MemorySpec, caller: Any, lang: str) -> tuple[Any, ...]:
    return (caller.channel, caller.customer_id, lang if spec.by_language else None, id(spec))


def kept(spec: MemorySpec, tools: Any, caller: Any, lang: str) -> bool:
    """Whether the customer's tools part would be served from this process (fresh, or stale once)."""
    cached = CUSTOMERS.get(tools, _key(spec, caller, lang))
    return cached is not None and time.monotonic() - cached[0] <= 2 * spec.ttl_seconds


def peek(conn: Any, spec: MemorySpec | None, tools: Any, caller: Any, lang: str, *,
         tickets: TicketHistory | None = None, outside: Outside = inline, stored: bool = True,
         earlier: bool = True) -> dict[str, Any]:
    """The memory :func:`session` would give the conversation now, read only (nothing is stored): its fresh
    ``flow_memory`` row, else what :func:`load` gathers. Asked before a turn (FlowEngine.ahead): a call not at
    hand is asked of ``outside`` (CallPending), and the turn's own load finds its result; a memory loaded here
    is the turn's (``caller.turn_id``): its :func:`session` takes it instead of loading again. ``stored``: False
    for a conversation not stored yet (no ``flow_memory`` row to read); ``earlier``: False for a customer with no
    other conversation (no earlier outcome to read, see :func:`load`)."""
    if spec is None:
        return empty(None)
    row = None if not stored else conn.execute("SELECT data, extract(epoch FROM now() - loaded_at) AS age FROM flow_memory"
                       " WHERE conversation_id = %s", (caller.conversation_id,)).fetchone()
    if row is not None:
        data, age = (row["data"], row["age"]) if isinstance(row, dict) else row
        if float(age) <= spec.ttl_seconds:
            fresh: dict[str, Any] = data
            return fresh
    asked_at = time.monotonic()
    data = load(conn, spec, tools, caller, lang, tickets=tickets, outside=outside, earlier=earlier)
    key = _turn_key(spec, caller, lang)
    if key is not None:
        FOR_TURN.put(key, _jsonable(data), asked_at)   # its own copy: the look ahead walks the flow over `data`
    return data


def shop_part(spec: MemorySpec, tools: Any, caller: Any, lang: str, outside: Outside) -> dict[str, Any]:
    """The tools' part of the memory: the customer's cached one while fresh (a stale one once, refreshed in
    the background), else asked of the shop through the port."""
    key = _key(spec, caller, lang)
    cached = CUSTOMERS.get(tools, key)
    if cached is not None:
        at, data = cached
        age = time.monotonic() - at
        if age <= 2 * spec.ttl_seconds:
            if age > spec.ttl_seconds:
                CUSTOMERS.refresh(tools, key, lambda: _from_tools(spec, tools, caller, lang, inline))
            copy: dict[str, Any] = _jsonable(data)
            return copy
    asked_at = time.monotonic()
    data = _from_tools(spec, tools, caller, lang, outside)
    CUSTOMERS.put(tools, key, data, asked_at)
    return data


def forget(caller: Any) -> None:
    """A write of the customer's succeeded (a cancellation, a refund, a new address): the orders and profile
    remembered of them are stale, here and in every conversation of theirs, so the next flow asks the shop
    again instead of offering a cancelled order as still paid. This drops the process's copy; their
    ``flow_memory`` rows go in the statement that saves the flow (``store.save(forget=...)``), which also tells
    the other gateway processes (``store.MEMORY_STALE``, heard by :func:`stale_elsewhere`)."""
    CUSTOMERS.forget(caller.channel, caller.customer_id)


def stale_elsewhere(payload: str) -> bool:
    """A ``store.MEMORY_STALE`` notice (``["web", "c4"]``): drop this process's copy of that customer's memory.
    False for a notice that does not parse (nothing dropped)."""
    import json

    try:
        channel, customer_id = json.loads(payload)
    except (ValueError, TypeError):
        return False
    CUSTOMERS.forget(channel, customer_id)
    return True


def load(conn: Any, spec: MemorySpec, tools: Any, caller: Any, lang: str, *,
         tickets: TicketHistory | None = None, outside: Outside = inline, earlier: bool = True) -> dict[str, Any]:
    """Call the declared read tools and gather earlier outcomes; a failure leaves that part at its default.
    ``earlier``: False when the caller knows the customer has no other conversation (a first contact): their
    flows and tickets all belong to conversations, so there is none to read and none is read."""
    from automation.workflows import store

    out = empty(spec)
    out.update(shop_part(spec, tools, caller, lang, outside))
    out["failed"] = list(out["failed"])
    if spec.outcomes and earlier:
        flows = store.customer_outcomes(conn, caller.channel, caller.customer_id, limit=spec.outcomes,
                                        exclude_conversation=caller.conversation_id)
        rows = [{"kind": "flow", "workflow": f["workflow"], "outcome": f["outcome"] or f["status"],
                 "slots": f["slots"], "at": f["updated_at"].isoformat()} for f in flows]
        if tickets is not None:
            try:
                for t in tickets(conn, caller.channel, caller.customer_id, spec.outcomes):
                    rows.append({"kind": "ticket", "ticket_kind": t.get("kind"), "status": t.get("status"),
                                 "outcome": t.get("outcome"), "reason": t.get("reason"),
                                 "at": _iso(t.get("created_at"))})
            except Exception:  # noqa: BLE001 - tickets are a courtesy too
                out["failed"].append({"name": "outcomes", "tool": "tickets", "status": "error"})
        rows.sort(key=lambda r: r["at"] or "", reverse=True)
        out["outcomes"] = rows[: spec.outcomes * 2]
    loaded: dict[str, Any] = _jsonable(out)
    return loaded


def session(conn: Any, spec: MemorySpec | None, tools: Any, caller: Any, lang: str, *,
            tickets: TicketHistory | None = None, outside: Outside = inline, stored: bool = True) -> dict[str, Any]:
    """The conversation's memory: loaded once per session (``ttl_seconds``) and cached in ``flow_memory``;
    ``stored``: False for a conversation that has no row there yet (made in this transaction: not read)."""
    if spec is None:
        return empty(None)
    conversation = caller.conversation_id or f"{caller.channel}:{caller.customer_id}"
    row = None if not stored else conn.execute("SELECT data, extract(epoch FROM now() - loaded_at) AS age"
                                               " FROM flow_memory WHERE conversation_id = %s",
                                               (conversation,)).fetchone()
    if row is not None:
        data, age = (row["data"], row["age"]) if isinstance(row, dict) else row
        if float(age) <= spec.ttl_seconds:
            kept: dict[str, Any] = data
            return kept
    key = _turn_key(spec, caller, lang)
    ahead = FOR_TURN.take(key, caller.channel, caller.customer_id) if key is not None else None
    data = ahead if ahead is not None else load(conn, spec, tools, caller, lang, tickets=tickets, outside=outside)
    data["loaded_at"] = time.time()
    conn.execute("""INSERT INTO flow_memory (conversation_id, customer_channel, customer_id, data)
                    VALUES (%s, %s, %s, %s)
                    ON CONFLICT (conversation_id) DO UPDATE SET data = EXCLUDED.data, loaded_at = now()""",
                 (conversation, caller.channel, caller.customer_id, Jsonb(data)))
    return data


def recall(source: str, memory: dict[str, Any], slots: dict[str, Any]) -> Any:
    """The remembered value a slot's ``recall`` names: the first of a list, or the value; None when nothing is known."""
    try:
        value = evaluate(source, {"memory": memory, "slots": slots})
    except ExpressionError:
        return None
    if isinstance(value, list):
        value = next((v for v in value if v not in (None, "")), None)
    return value


def _iso(v: Any) -> str | None:
    return v.isoformat() if hasattr(v, "isoformat") else (str(v) if v is not None else None)


def _jsonable(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=str))
