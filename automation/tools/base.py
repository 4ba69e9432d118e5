"""The tool gateway's contract: who calls (``Caller``), what comes back (``ToolResult``), what a tool is
(``ToolSpec``), the gateway the workflow engine talks to (``ToolGateway``) and the transports behind it
(``Transport``, one file per backend: ``mcp.py``, ``http.py``).

A transport never decides the status of a call: it returns the tool's raw result or raises one of the
``TransportError`` kinds below, and the gateway turns that into a status. ``status == "ok"`` only ever means
"the tool really answered, and the answer validates against its output schema".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Risk = Literal["read", "write", "money"]
RISKS = ("read", "write", "money")
CONNECT_TIMEOUT_S = 30.0  # opening a session; a stdio server is a fresh Python process, slow to import when busy
STATUSES = ("ok", "error", "timeout", "invalid_input", "invalid_output", "breaker_open", "denied", "rate_limited",
            "unknown")  # unknown: a write the server cannot deduplicate was sent and its answer lost


@dataclass(frozen=True)
class Caller:
    """The verified identity, never what the customer typed."""

    channel: str
    customer_id: str
    conversation_id: str | None = None
    turn_id: str | None = None
    purpose: str | None = None  # the intent or workflow name asking for the call (checked against allowed_for)


@dataclass
class ToolResult:
    tool: str
    status: str  # one of STATUSES
    output: Any = None  # the tool's real, schema-validated result when status == "ok", else None
    error: str | None = None  # redacted, short
    attempts: int = 1
    latency_ms: float = 0.0
    call_id: str | None = None  # the audit row id
    # not written again: {"call_id", "at", "via"}; via "key" (this step's own earlier call), "read_back" (the
    # record shows the earlier call happened) or "conversation" (the same write earlier in the conversation)
    earlier: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 1  # total attempts, 1 = no retry
    backoff_ms: float = 50.0  # wait before the 2nd attempt; doubles after each


@dataclass(frozen=True)
class RateLimit:
    calls: int
    per_seconds: float
    scope: Literal["customer", "tool"] = "customer"  # one budget per customer, or one for everybody


@dataclass(frozen=True)
class BreakerPolicy:
    fail_max: int = 5  # consecutive failures (timeouts, unreachable, 5xx, malformed output) that open it
    reset_seconds: float = 30.0  # how long it stays open before one trial call


@dataclass(frozen=True)
class Binding:
    """Where the tool lives: a server of tools.yaml and, for MCP, the remote tool name; for HTTP, the request."""

    server: str
    remote_name: str | None = None  # MCP: the server's tool name
    method: str = "POST"  # HTTP
    path: str | None = None  # HTTP: a template such as /orders/{order_id}; placeholders are input properties
    query: tuple[str, ...] = ()  # HTTP: input properties sent as the query string
    body: bool = True  # HTTP: send the remaining arguments as a JSON body (POST/PUT/PATCH)


@dataclass(frozen=True)
class Unwrap:
    """Where a wrapping server puts the result (``{ok, parsed_content}``): the result is ``path`` of the answer;
    ``ok`` names a boolean field whose false means the call failed, with ``error``'s text."""

    path: tuple[str, ...] = ()
    ok: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class ReadBack:
    """A read tool that shows whether a write happened: called with ``args`` (its argument -> the write's
    argument), the write happened when every dotted path of ``done`` has its value (``$name``: the write's
    argument ``name``)."""

    tool: str
    args: dict[str, str] = field(default_factory=dict)
    done: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: dict[str, str]  # {"zh": ..., "en": ...}
    input_schema: dict
    output_schema: dict
    risk: Risk
    binding: Binding
    timeout_s: float = 5.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    rate_limit: RateLimit | None = None
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    allowed_for: tuple[str, ...] = ()  # intents / workflows that may call it; "*" = any purpose
    identity_argument: str | None = None  # the argument the gateway fills with the verified customer id
    idempotency_argument: str | None = None  # the argument the gateway fills with the idempotency key
    static_arguments: dict[str, Any] = field(default_factory=dict)  # set by the gateway on every call
    unwrap: Unwrap | None = None  # the result inside a wrapped answer
    verify: ReadBack | None = None  # a write's read-back, before a repeat of an unknown outcome

    @property
    def server_deduplicates(self) -> bool:
        """The key reaches the server (an argument, or HTTP's Idempotency-Key header), which recognises a repeat;
        otherwise only the gateway's audit knows the write was made."""
        return self.idempotency_argument is not None or self.binding.path is not None

    @property
    def injected_arguments(self) -> frozenset[str]:
        """Arguments the gateway sets itself; a caller's value for them is overridden."""
        names = set(self.static_arguments)
        if self.identity_argument:
            names.add(self.identity_argument)
        if self.idempotency_argument:
            names.add(self.idempotency_argument)
        return frozenset(names)

    @property
    def caller_arguments(self) -> list[str]:
        """The input properties a caller (a workflow step) supplies: the schema's minus the injected ones."""
        props = (self.input_schema or {}).get("properties", {}) or {}
        return [p for p in props if p not in self.injected_arguments]

    @property
    def writes(self) -> bool:
        return self.risk in ("write", "money")

    def allows(self, purpose: str | None) -> bool:
        return "*" in self.allowed_for or (purpose is not None and purpose in self.allowed_for)


class ToolGateway(Protocol):
    def call(self, name: str, arguments: dict, caller: Caller, *, idempotency_key: str | None = None,
             repeat: bool = False) -> ToolResult:
        """``repeat``: the same write may be made again in the conversation (else answered from the audit)."""
        ...

    def spec(self, name: str) -> ToolSpec:
        ...

    def names(self) -> list[str]:
        ...


# --- transports --------------------------------------------------------------------------------------------


class TransportError(Exception):
    """A call that did not produce a usable result. ``counts`` = it says the server is unhealthy (breaker);
    ``retryable`` = trying again may help; ``sent`` = the request may have reached the server (a write's outcome
    is then unknown), false when it certainly did not (no connection)."""

    status = "error"
    counts = True
    retryable = True
    sent = True


class TransportTimeout(TransportError):
    status = "timeout"


class TransportUnavailable(TransportError):
    """Cannot connect, connection lost, HTTP 5xx/429."""


class NotConnected(TransportUnavailable):
    """No connection to the server: the request was never sent."""

    sent = False


class ToolReportedError(TransportError):
    """The tool answered with an error of its own (MCP ``isError``, HTTP 4xx): a real answer, not an outage."""

    counts = False
    retryable = False
    sent = False   # answered: nothing is unknown about it


class MalformedOutput(TransportError):
    """The server answered something that is not a result (not JSON, or it broke the server's own schema)."""

    status = "invalid_output"
    retryable = False


@runtime_checkable
class Transport(Protocol):
    """One server of tools.yaml. Coroutines run on the gateway's event loop thread."""

    name: str

    async def call(self, spec: ToolSpec, arguments: dict, *, timeout: float, idempotency_key: str | None) -> Any:
        """Run the tool; return its JSON result or raise a TransportError."""
        ...

    async def list_tools(self) -> list[str] | None:
        """Remote tool names when the transport can tell (MCP), else None."""
        ...

    async def aclose(self) -> None:
        ...
