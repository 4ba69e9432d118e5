"""The tool gateway's interface: what a caller (a workflow, an L2 draft) sees of a tool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Caller:            # the verified identity, never what the customer typed
    channel: str
    customer_id: str
    conversation_id: str | None = None
    turn_id: str | None = None
    purpose: str | None = None   # intent or workflow asking (checked against the tool's allowed_for)


@dataclass
class ToolResult:
    tool: str
    status: str          # "ok" | "error" | "timeout" | "invalid_input" | "invalid_output" | "breaker_open" | "denied" | "rate_limited"
    output: Any = None   # the tool's real, schema-validated result when ok
    error: str | None = None
    attempts: int = 1
    latency_ms: float = 0.0
    call_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class ToolGateway(Protocol):
    def call(self, name: str, arguments: dict, caller: Caller, *, idempotency_key: str | None = None) -> ToolResult: ...
    def spec(self, name: str) -> ToolSpec: ...   # .name, .description {zh,en}, .input_schema, .output_schema, .risk in read|write|money
    def names(self) -> list[str]: ...
