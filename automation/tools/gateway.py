"""The tool gateway: every call to a business system goes through ``Gateway.call``.

In order: the purpose is allowed (``allowed_for``), a write carries an idempotency key, the gateway sets the
arguments it owns (the verified customer id, static arguments, the key), the input validates against the
schema (formats included), the rate limit and the circuit breaker let it through; then the transport runs
with the tool's timeout and retry policy, the output validates against the output schema, and the call is
audited in ``tool_calls`` (``audit.AuditWriter``: a write's row is committed before its result is returned, the
rest within milliseconds by a writer thread). ``call`` never raises for a tool's failure.

Schemas are compiled once per tool, twice: ``jsonschema_rs`` (compiled Rust, ~1 us for an order) decides
whether an instance is valid on every call; only an invalid one is handed to ``jsonschema`` (the reference
implementation, ~200 us for the same order) for its ``best_match`` message, which names the offending field.

The circuit breaker is pybreaker (a well-kept implementation of the states and their transitions). Its own
``call`` holds a lock for the whole guarded call, which would let one slow request serialise every turn that
uses the tool; so the gateway asks the breaker's state before the call and reports the outcome to it after,
through ``breaker.call`` with a function that only re-raises the outcome.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema_rs
import pybreaker
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import best_match
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from automation.tools.base import (
    CONNECT_TIMEOUT_S,
    ReadBack,
    Caller,
    MalformedOutput,
    ToolReportedError,
    ToolResult,
    ToolSpec,
    Transport,
    TransportError,
    TransportTimeout,
)
from automation.tools.audit import AuditWriter, earlier_writes
from automation.tools.config import Identity, ToolsFile, load_tools_file, to_specs
from automation.tools.loop import LoopThread
from automation.tools.redact import Redactor, mask_text, redact_value
from text.personal import clip

log = logging.getLogger(__name__)

_ERROR_CHARS = 300
_BACKSTOP_S = 2.0
#: a server's bulkhead when the tools file names none (config.Server.max_concurrent explains the size)
DEFAULT_MAX_CONCURRENT = 64  # the loop enforces the tool's timeout; this only guards against a stuck loop


class ToolSettings(BaseSettings):
    """Where the tools file is and how the example shop is reached (prefix ``SWITCHBOARD_``)."""

    model_config = SettingsConfigDict(env_prefix="SWITCHBOARD_", env_file=".env", env_file_encoding="utf-8",
                                      extra="ignore")

    tools_enabled: bool = Field(default=True, description="Build the tool gateway at start-up.")
    tools_file: Path | None = Field(default=None, description="Tools YAML; unset = automation/tools/samples/"
                                    "tools.yaml (the example shop over MCP stdio).")
    shop_url: str | None = Field(default=None, description="The example shop's streamable HTTP endpoint "
                                 "(e.g. http://127.0.0.1:8201/mcp); unset = start it over stdio.")
    shop_data: Path | None = Field(default=None, description="Customers and orders the example shop loads; "
                                   "unset = examples/shop/sample_data.json.")
    tool_deadline_seconds: float = Field(default=5.0, gt=0, le=120, description="How long one turn waits for "
                                         "its tool calls in all; then the customer hears the shop is not answering.")


class _Bucket:
    """Token buckets per key (customer or tool). In-process and exact: a dictionary under a lock is all the
    budget of a tool needs; pods each enforce their own share."""

    def __init__(self, calls: int, per_seconds: float):
        self.capacity = float(calls)
        self.rate = calls / per_seconds
        self._state: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            tokens, at = self._state.get(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - at) * self.rate)
            if tokens < 1.0:
                self._state[key] = (tokens, now)
                return False
            self._state[key] = (tokens - 1.0, now)
            if len(self._state) > 50_000:  # forget customers whose bucket is full again
                cutoff = now - self.capacity / self.rate
                self._state = {k: v for k, v in self._state.items() if v[1] > cutoff}
            return True


class _Schema:
    """One JSON Schema, compiled once: a fast validity check, and the reference validator's message."""

    def __init__(self, schema: dict, checker: FormatChecker):
        self.fast = jsonschema_rs.validator_for(schema, validate_formats=True)
        self.reference = Draft202012Validator(schema, format_checker=checker)

    def error(self, instance: Any, what: str) -> str | None:
        """None when ``instance`` is valid, else "<path>: <message>" of the error that matters most."""
        try:
            if self.fast.is_valid(instance):
                return None
        except (ValueError, TypeError):
            pass   # a value JSON has no type for (the reference validator decides, and says why)
        error = best_match(self.reference.iter_errors(instance))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or what
            return f"{where}: {error.message}"
        try:
            fast = next(iter(self.fast.iter_errors(instance)), None)
        except (ValueError, TypeError):
            return None
        if fast is None:
            return None
        return f"{'/'.join(str(p) for p in fast.instance_path) or what}: {fast.message}"


class _Guard:
    """Everything per tool that lives as long as the gateway: compiled schemas, breaker, rate limit."""

    def __init__(self, spec: ToolSpec):
        self.spec = spec
        checker = FormatChecker()
        self.input = _Schema(spec.input_schema, checker)
        self.output = _Schema(spec.output_schema, checker)
        self.storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
        self.breaker = pybreaker.CircuitBreaker(fail_max=spec.breaker.fail_max,
                                                reset_timeout=spec.breaker.reset_seconds,
                                                state_storage=self.storage, name=spec.name)
        self.bucket = _Bucket(spec.rate_limit.calls, spec.rate_limit.per_seconds) if spec.rate_limit else None

    def is_open(self) -> bool:
        if self.breaker.current_state != pybreaker.STATE_OPEN:
            return False
        opened = self.storage.opened_at
        return opened is not None and datetime.now(UTC) < opened + timedelta(seconds=self.breaker.reset_timeout)

    def record(self, failure: BaseException | None) -> None:
        def outcome() -> None:
            if failure is not None:
                raise failure

        try:
            self.breaker.call(outcome)
        except (pybreaker.CircuitBreakerError, TransportError):
            pass


class Gateway:
    """The ``ToolGateway`` of base.py over MCP and HTTP transports."""

    #: how long one turn waits for its tool calls in all (the router's turn reads it; SWITCHBOARD_TOOL_DEADLINE_SECONDS)
    turn_deadline_s = 5.0

    def __init__(self, specs: list[ToolSpec], transports: Mapping[str, Transport], *, pool=None,
                 identity: Identity | None = None, redact: Redactor | None = None, loop: LoopThread | None = None,
                 max_concurrent: Mapping[str, int] | None = None):
        self._guards = {s.name: _Guard(s) for s in specs}
        # the bulkhead: calls in flight per server (a hanging server holds at most this many threads)
        self._slots = {name: threading.BoundedSemaphore((max_concurrent or {}).get(name, DEFAULT_MAX_CONCURRENT))
                       for name in transports}
        for s in specs:
            if s.binding.server not in transports:
                raise ValueError(f"tool {s.name}: no transport for server {s.binding.server!r}")
        self._transports = dict(transports)
        self._pool = pool
        self._identity = identity or Identity()
        self._redact = redact or mask_text
        self._loop = loop or LoopThread()
        self._audit_writer = AuditWriter(pool, self._redact_value) if pool is not None else None
        self._closed = False

    # --- the ToolGateway protocol --------------------------------------------------------------------------

    def names(self) -> list[str]:
        return sorted(self._guards)

    def spec(self, name: str) -> ToolSpec:
        return self._guards[name].spec

    def call(self, name: str, arguments: dict, caller: Caller, *, idempotency_key: str | None = None,
             repeat: bool = False) -> ToolResult:
        """``repeat``: the same write (tool and arguments) may be made again in this conversation; by default an
        earlier successful one is returned instead (``ToolResult.earlier``) and nothing is written."""
        if name not in self._guards:
            raise KeyError(f"unknown tool {name!r} (known: {', '.join(self.names())})")
        if not isinstance(caller, Caller):
            raise TypeError("caller must be a Caller (the verified identity)")
        if not isinstance(arguments, dict):
            raise TypeError("arguments must be a dict")
        if self._closed:
            raise RuntimeError("the tool gateway is closed")
        started = time.perf_counter()
        guard = self._guards[name]
        spec = guard.spec
        args = dict(arguments)
        result = self._run(guard, args, caller, idempotency_key, repeat)
        result.latency_ms = (time.perf_counter() - started) * 1000.0
        result.call_id = self._audit(spec, args, caller, idempotency_key, result)
        return result

    # --- the call --------------------------------------------------------------------------------------------

    def _run(self, guard: _Guard, args: dict, caller: Caller, key: str | None, repeat: bool = False) -> ToolResult:
        spec = guard.spec
        if not spec.allows(caller.purpose):
            return self._fail(spec, "denied", f"{spec.name} is not allowed for {caller.purpose or 'no purpose'}")
        if spec.identity_argument and not (caller.customer_id or "").strip():
            return self._fail(spec, "denied", f"{spec.name} needs a verified customer; the caller has none",
                              plain=True)
        if key is not None and (not isinstance(key, str) or not key.strip() or len(key) > 200):
            return self._fail(spec, "invalid_input", "the idempotency key must be a non-empty string (<= 200)")
        if spec.writes and not key:
            return self._fail(spec, "invalid_input", f"{spec.name} is a {spec.risk} tool: an idempotency key is "
                              "required")
        # the gateway's own arguments win over anything supplied
        args.update(spec.static_arguments)
        if spec.identity_argument:
            args[spec.identity_argument] = self._identity.customer_ref(caller.channel, caller.customer_id)
        if spec.idempotency_argument and key:
            args[spec.idempotency_argument] = key
        error = guard.input.error(args, "arguments")
        if error is not None:
            return self._fail(spec, "invalid_input", error)
        if spec.writes and key and self._pool is not None:
            earlier = self._earlier(spec, args, caller, key, repeat)
            if earlier is not None:
                return earlier
        if guard.is_open():
            return self._fail(spec, "breaker_open", f"{spec.name}: circuit open after repeated failures",
                              plain=True)
        if guard.bucket is not None:
            bucket_key = caller.customer_id if spec.rate_limit.scope == "customer" else "*"
            if not guard.bucket.take(f"{caller.channel}\x00{bucket_key}"):
                return self._fail(spec, "rate_limited", f"{spec.name}: rate limit of {spec.rate_limit.calls} "
                                  f"calls per {spec.rate_limit.per_seconds:g} s reached", plain=True)

        slots = self._slots[spec.binding.server]
        if not slots.acquire(timeout=spec.timeout_s):
            return self._fail(spec, "rate_limited", f"{spec.name}: every slot of server {spec.binding.server} is "
                              "busy (the server is slow or not answering)", plain=True)
        try:
            return self._send(guard, args, key)
        finally:
            slots.release()

    def _send(self, guard: _Guard, args: dict, key: str | None) -> ToolResult:
        spec = guard.spec
        transport = self._transports[spec.binding.server]
        # reads may be repeated; writes only carry a key here, which the server deduplicates on; a write the
        # server cannot deduplicate is repeated only when the request certainly never left (no connection)
        max_attempts = spec.retry.attempts if (not spec.writes or key) else 1
        unkeyed = spec.writes and not spec.server_deduplicates
        backoff = spec.retry.backoff_ms / 1000.0
        attempt = 0
        while True:
            attempt += 1
            try:
                raw = self._transport_call(transport, spec, args, key)
                if spec.unwrap is not None:
                    raw = _unwrapped(spec, raw)
            except TransportError as exc:
                guard.record(exc if exc.counts else None)
                if exc.retryable and attempt < max_attempts and not guard.is_open() and not (unkeyed and exc.sent):
                    time.sleep(backoff)
                    backoff *= 2
                    continue
                if unkeyed and exc.sent:
                    return self._fail(spec, "unknown", f"{exc} (sent: the write may have happened; it is not "
                                      "repeated)", attempts=attempt)
                return self._fail(spec, exc.status, str(exc), attempts=attempt)
            error = guard.output.error(raw, "result")
            if error is not None:
                guard.record(MalformedOutput(error.split(":", 1)[0]))
                return self._fail(spec, "invalid_output", f"{spec.name}: output {error}", attempts=attempt)
            guard.record(None)
            return ToolResult(tool=spec.name, status="ok", output=raw, attempts=attempt)

    def _earlier(self, spec: ToolSpec, args: dict, caller: Caller, key: str, repeat: bool) -> ToolResult | None:
        """A write made before, from the durable audit: this key's own earlier call (a write the server cannot
        deduplicate is never sent twice), or the same write earlier in the conversation. None: go ahead."""
        try:
            rows = earlier_writes(self._pool, spec.name, key, caller.conversation_id)
        except Exception as exc:  # noqa: BLE001 - without the audit a write the server cannot dedupe is not safe
            log.warning("tool %s: earlier calls not readable: %s", spec.name, type(exc).__name__)
            if spec.server_deduplicates:
                return None
            return self._fail(spec, "unknown", f"{spec.name}: the audit cannot be read; not written", attempts=0,
                              plain=True)
        own = [r for r in rows if r["idempotency_key"] == key]
        if own and not spec.server_deduplicates:
            last = own[0]
            if last["status"] == "ok":
                return _answered(spec, last["output"], last, "key")
            if last["status"] in ("unknown", "timeout", "invalid_output"):
                done, record = self._read_back(spec, args, caller) if spec.verify else (None, None)
                if done:
                    return _answered(spec, record, last, "read_back")
                if done is None:
                    return self._fail(spec, "unknown", f"{spec.name}: an earlier attempt ({last['created_at']}) may "
                                      "have been written and cannot be read back; not written again", attempts=0,
                                      plain=True)
        if repeat or not caller.conversation_id:
            return None
        mine = args_digest(args, spec)
        for r in rows:
            if r["status"] == "ok" and r["idempotency_key"] != key and r.get("args_digest") == mine:
                return _answered(spec, r["output"], r, "conversation")
        return None

    def _read_back(self, spec: ToolSpec, args: dict, caller: Caller) -> tuple[bool | None, Any]:
        """Whether the declared read-back shows the write done: (True, record), (False, record), or (None, None)
        when it cannot tell (the read failed)."""
        rb: ReadBack = spec.verify  # type: ignore[assignment]
        rargs = {k: args[v] for k, v in rb.args.items() if v in args}
        res = self.call(rb.tool, rargs, caller)
        if not res.ok:
            return None, None
        for path, want in rb.done.items():
            if isinstance(want, str) and want.startswith("$"):
                want = _dig(args, want[1:])
            if _dig(res.output, path) != want:
                return False, res.output
        return True, res.output

    def _transport_call(self, transport: Transport, spec: ToolSpec, args: dict, key: str | None) -> Any:
        # opening a session (starting a stdio server) is not the tool's time: it gets its own allowance
        opening = 0.0 if getattr(transport, "connected", True) else getattr(transport, "connect_timeout",
                                                                             CONNECT_TIMEOUT_S)
        future = self._loop.submit(transport.call(spec, args, timeout=spec.timeout_s, idempotency_key=key))
        try:
            return future.result(spec.timeout_s + opening + _BACKSTOP_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TransportTimeout(f"{spec.name}: no answer within {spec.timeout_s:g} s") from None
        except TransportError:
            raise
        except Exception as exc:  # noqa: BLE001 - a transport bug must not read as a success, nor crash the turn
            log.exception("tool %s: the transport failed unexpectedly", spec.name)
            raise TransportError(f"{spec.name}: {type(exc).__name__}") from None

    def _fail(self, spec: ToolSpec, status: str, error: str, *, attempts: int = 1, plain: bool = False) -> ToolResult:
        """A failed call. ``plain``: the gateway's own wording from names and numbers of the tools file, which
        holds nothing of the customer's and needs no redaction (a short-circuited call stays cheap)."""
        attempts = attempts if status not in ("denied", "invalid_input", "rate_limited", "breaker_open") else 0
        return ToolResult(tool=spec.name, status=status, output=None,
                          error=clip(error if plain else self._redact(error), _ERROR_CHARS), attempts=attempts)   # masked, then cut

    # --- audit -----------------------------------------------------------------------------------------------

    def _redact_value(self, value: Any) -> Any:
        return redact_value(value, self._redact)

    def _audit(self, spec: ToolSpec, args: dict, caller: Caller, key: str | None, result: ToolResult) -> str | None:
        """The call's ``tool_calls`` row: a write that reached the business system is committed before the
        result is returned; every other row (reads, refused calls) is queued for the writer thread."""
        if self._audit_writer is None:
            return None
        row = AuditWriter.new_row(
            conversation_id=caller.conversation_id, turn_id=caller.turn_id, purpose=caller.purpose, tool=spec.name,
            risk=spec.risk, caller_channel=caller.channel, caller_customer=caller.customer_id, input=args,
            output=result.output if result.ok else None, status=result.status,
            error=result.error if result.earlier is None else
            f"not written again: {result.earlier['via']} {result.earlier['call_id']}",
            latency_ms=result.latency_ms, attempts=result.attempts, idempotency_key=key,
            args_digest=args_digest(args, spec) if spec.writes else None)
        if spec.writes and result.attempts > 0:
            return self._audit_writer.write_now(row)
        return self._audit_writer.write_later(row)

    def flush_audit(self, timeout: float = 5.0, conversation_id: Any = None) -> bool:
        """Wait until every call so far is in ``tool_calls`` (before reading it back in the same process); with
        ``conversation_id``, every call of that conversation (a turn need not wait for other customers' rows)."""
        if self._audit_writer is None:
            return True
        return self._audit_writer.flush(timeout, conversation_id=conversation_id)

    # --- operations ------------------------------------------------------------------------------------------

    def turn_deadline(self) -> float:
        """How long a turn waits for its tool calls: ``turn_deadline_s``, plus the time to open a session with a
        server not yet connected (starting the stdio shop is not the shop's answer time)."""
        opening = [getattr(t, "connect_timeout", CONNECT_TIMEOUT_S) for t in self._transports.values()
                   if not getattr(t, "connected", True)]
        return self.turn_deadline_s + max(opening, default=0.0)

    def breaker_state(self, name: str) -> str:
        return self._guards[name].breaker.current_state

    def check(self, timeout: float = 30.0) -> dict[str, str]:
        """Problems per tool: its MCP server cannot be reached or does not offer the remote tool."""
        problems: dict[str, str] = {}
        listed: dict[str, list[str] | None | Exception] = {}
        for server, transport in self._transports.items():
            try:
                listed[server] = self._loop.run(transport.list_tools(), timeout)
            except Exception as exc:  # noqa: BLE001
                listed[server] = exc
        for name, guard in self._guards.items():
            b = guard.spec.binding
            got = listed.get(b.server)
            if isinstance(got, Exception):
                problems[name] = f"server {b.server} unreachable: {type(got).__name__}"
            elif got is not None and (b.remote_name or name) not in got:
                problems[name] = f"server {b.server} has no tool {b.remote_name or name!r}"
        return problems

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._audit_writer is not None:
            self._audit_writer.close()
        for transport in self._transports.values():
            try:
                self._loop.run(transport.aclose(), 15)
            except Exception:  # noqa: BLE001 - best effort on shutdown
                pass
        self._loop.stop()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_MISSING = object()


def _dig(value: Any, path: str | tuple[str, ...]) -> Any:
    for part in path.split(".") if isinstance(path, str) else path:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _unwrapped(spec: ToolSpec, raw: Any) -> Any:
    """The result inside a wrapped answer; a false ``ok`` is the tool's own refusal."""
    rule = spec.unwrap
    assert rule is not None
    if rule.ok is not None:
        ok = _dig(raw, rule.ok)
        if ok is _MISSING:
            raise MalformedOutput(f"{spec.name}: the answer has no {rule.ok!r}")
        if ok is False:
            message = _dig(raw, rule.error) if rule.error else _MISSING
            raise ToolReportedError(f"{spec.name}: {message if message is not _MISSING else 'the tool refused'}")
    inner = _dig(raw, rule.path)
    if inner is _MISSING:
        raise MalformedOutput(f"{spec.name}: the answer has no {'.'.join(rule.path)!r}")
    return inner


def args_digest(args: dict, spec: ToolSpec) -> str:
    """What makes two writes the same change: a digest of the tool and its arguments without the key (which
    differs between two requests), so the audit can recognise a repeat without keeping the unmasked input."""
    plain = {k: v for k, v in args.items() if k != spec.idempotency_argument}
    text = json.dumps([spec.name, plain], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _answered(spec: ToolSpec, output: Any, row: dict, via: str) -> ToolResult:
    """A write answered from what is already known (attempts 0: nothing was sent)."""
    return ToolResult(tool=spec.name, status="ok", output=output, attempts=0,
                      earlier={"call_id": str(row["id"]), "at": str(row["created_at"]), "via": via})


# --- construction --------------------------------------------------------------------------------------------


def build_transports(config: ToolsFile) -> dict[str, Transport]:
    from automation.tools.http import HttpTransport
    from automation.tools.mcp import McpTransport

    out: dict[str, Transport] = {}
    for name, server in config.servers.items():
        if server.transport == "http":
            out[name] = HttpTransport(name, base_url=server.base_url, headers=server.headers)
        else:
            out[name] = McpTransport(name, url=server.url or None, command=server.command, args=server.args,
                                     env={k: v for k, v in server.env.items() if v != ""}, cwd=server.cwd,
                                     headers=server.headers, connect_timeout=server.connect_timeout)
    return out


def load_tool_gateway(path: str | Path | None = None, *, pool, redact: Redactor | None = None,
                      variables: Mapping[str, str] | None = None) -> Gateway:
    """Load a tools file (the bundled one when ``path`` is None) and build its gateway.

    ``variables`` (default: the environment) resolve ``${VAR}`` in the file's servers;
    ``SWITCHBOARD_DATABASE_URL`` is the pool's own database, so the example shop keeps its schema there.
    """
    values = dict(variables if variables is not None else os.environ)
    conninfo = getattr(pool, "conninfo", None)
    if conninfo:
        values["SWITCHBOARD_DATABASE_URL"] = conninfo
    config = load_tools_file(path, variables=values)
    gateway = Gateway(to_specs(config), build_transports(config), pool=pool, identity=config.identity, redact=redact,
                      max_concurrent={name: server.max_concurrent for name, server in config.servers.items()})
    gateway.turn_deadline_s = ToolSettings().tool_deadline_seconds
    return gateway


def build_tool_gateway(settings: ToolSettings | None = None, *, pool, redact: Redactor | None = None) -> Gateway | None:
    """The composer's helper: the gateway the settings describe, or None when tools are disabled."""
    settings = settings or ToolSettings()
    if not settings.tools_enabled:
        return None
    values = dict(os.environ)
    if settings.shop_url:
        values["SWITCHBOARD_SHOP_URL"] = settings.shop_url
    if settings.shop_data:
        values["SWITCHBOARD_SHOP_DATA"] = str(settings.shop_data)
    return load_tool_gateway(settings.tools_file, pool=pool, redact=redact, variables=values)
