"""A test-only stand-in for the tool gateway (``automation.tools``), over the real MCP stdio transport.

It speaks the ``ToolGateway`` protocol the engine depends on: tools listed from the MCP server
(input schema as the server declares it), each argument set validated with jsonschema before the
call, the verified customer id put into the argument the shop names it (``customer_ref``), the
idempotency key into the shop's ``op_token``. It is deliberately small: no breaker, no audit table.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from automation.tools.base import Caller, ToolResult

SERVER = Path(__file__).resolve().parent / "second_shop" / "server.py"

# the deployer's configuration of the second shop's tools: risk, and how identity and keys are passed
CATALOG = {
    "get_customer_profile": {"risk": "read"},
    "list_customer_orders": {"risk": "read"},
    "get_order_details": {"risk": "read"},
    "get_product": {"risk": "read"},
    "cancel_pending_order": {"risk": "money"},
    "modify_pending_order_address": {"risk": "write"},
    "modify_pending_order_items": {"risk": "money"},
    "return_delivered_order_items": {"risk": "money"},
    "exchange_delivered_order_items": {"risk": "money"},
    "update_customer_address": {"risk": "write"},
}
IDENTITY_ARGUMENT = "customer_ref"
KEY_ARGUMENT = "op_token"


@dataclass
class ToolSpec:
    name: str
    description: dict
    input_schema: dict
    output_schema: dict = field(default_factory=dict)
    risk: str = "read"


class McpShopGateway:
    def __init__(self, server: Path = SERVER, catalog: dict | None = None):
        self.catalog = catalog or CATALOG
        self.calls: list[dict] = []
        self._loop = asyncio.new_event_loop()
        self._ready = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._queue: asyncio.Queue | None = None
        self._hidden: dict[str, set] = {}
        asyncio.run_coroutine_threadsafe(self._main(server), self._loop)
        self._specs: dict[str, ToolSpec] = self._ready.result(timeout=60)

    async def _main(self, server: Path) -> None:
        self._queue = asyncio.Queue()
        try:
            async with Client(StdioServerParameters(command=sys.executable, args=[str(server)])) as client:
                listed = await client.list_tools()
                specs = {}
                for t in listed.tools:
                    schema = copy.deepcopy(t.input_schema)
                    self._hidden[t.name] = {h for h in (IDENTITY_ARGUMENT, KEY_ARGUMENT) if h in schema.get("properties", {})}
                    for hidden in (IDENTITY_ARGUMENT, KEY_ARGUMENT):
                        schema.get("properties", {}).pop(hidden, None)
                        if hidden in schema.get("required", []):
                            schema["required"].remove(hidden)
                    specs[t.name] = ToolSpec(t.name, {"en": t.description or "", "zh": t.description or ""},
                                             schema, risk=self.catalog.get(t.name, {}).get("risk", "read"))
                self._ready.set_result(specs)
                while True:
                    item = await self._queue.get()
                    if item is None:
                        break
                    name, args, fut = item
                    try:
                        fut.set_result(await client.call_tool(name, args))
                    except Exception as exc:  # the transport's failure is the caller's error result
                        fut.set_exception(exc)
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise

    def _raw(self, name: str, args: dict) -> Any:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (name, args, fut))
        return fut.result(timeout=30)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, None)
        time.sleep(0.2)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    # ------------------------------------------------ ToolGateway
    def names(self) -> list[str]:
        return sorted(n for n in self._specs if n in self.catalog)

    def spec(self, name: str) -> ToolSpec:
        if name not in self.catalog:
            raise KeyError(name)
        return self._specs[name]

    def call(self, name: str, arguments: dict, caller: Caller, *, idempotency_key: str | None = None) -> ToolResult:
        started = time.perf_counter()
        if name not in self.catalog:
            return ToolResult(name, "denied", error="unknown tool")
        spec = self._specs[name]
        try:
            jsonschema.validate(arguments, spec.input_schema)
        except jsonschema.ValidationError as exc:
            return ToolResult(name, "invalid_input", error=exc.message)
        args = dict(arguments)
        props = self._full_props(name)
        if IDENTITY_ARGUMENT in props:
            args[IDENTITY_ARGUMENT] = caller.customer_id
        if KEY_ARGUMENT in props:
            if not idempotency_key:
                return ToolResult(name, "invalid_input", error="a write needs an idempotency key")
            args[KEY_ARGUMENT] = idempotency_key
        self.calls.append({"tool": name, "arguments": args, "idempotency_key": idempotency_key})
        try:
            res = self._raw(name, args)
        except Exception as exc:
            return ToolResult(name, "error", error=str(exc), latency_ms=(time.perf_counter() - started) * 1000)
        ms = (time.perf_counter() - started) * 1000
        text = "".join(getattr(c, "text", "") for c in res.content)
        if res.is_error:
            return ToolResult(name, "error", error=text[:300], latency_ms=ms)
        output = res.structured_content
        if output is None:
            try:
                output = json.loads(text)
            except ValueError:
                return ToolResult(name, "invalid_output", error="not JSON", latency_ms=ms)
        if isinstance(output, dict) and set(output) == {"result"}:
            output = output["result"]
        return ToolResult(name, "ok", output=output, latency_ms=ms)

    def _full_props(self, name: str) -> set:
        return self._hidden.get(name, set())

    # ------------------------------------------------ test controls (not offered to workflows)
    def shop(self, control: str, **args: Any) -> Any:
        res = self._raw(control, args)
        out = res.structured_content
        if out is None:
            out = json.loads("".join(getattr(c, "text", "") for c in res.content))
        return out.get("result", out) if isinstance(out, dict) and set(out) == {"result"} else out
