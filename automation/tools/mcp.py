"""MCP servers through the official ``mcp`` SDK client: stdio (the gateway starts the command) or streamable
HTTP (``url``). One session per server is kept open on the gateway's event loop and reopened after a failure.

The SDK's context managers (``stdio_client``, ``streamable_http_client``, ``ClientSession``) are bound to the
task that enters them, so a keeper task owns each connection and calls from any task use its session.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp_types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from automation.tools.base import (
    CONNECT_TIMEOUT_S,
    MalformedOutput,
    NotConnected,
    ToolReportedError,
    ToolSpec,
    TransportError,
    TransportTimeout,
    TransportUnavailable,
)

log = logging.getLogger(__name__)

_CONNECTION_ERRORS = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError,
                      ConnectionError, EOFError)


class McpTransport:
    def __init__(self, name: str, *, url: str | None = None, command: str | None = None, args: list[str] | None = None,
                 env: dict[str, str] | None = None, cwd: str | None = None, headers: dict[str, str] | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT_S, errlog=None):
        if not url and not command:
            raise ValueError("an MCP server needs a url or a command")
        self.name = name
        self.url = url or None
        self._params = None if self.url else StdioServerParameters(command=command, args=list(args or []),
                                                                   env=dict(env or {}), cwd=cwd)
        self._headers = dict(headers or {})
        self._errlog = errlog or sys.stderr
        self.connect_timeout = connect_timeout
        self._session: ClientSession | None = None
        self._stop: asyncio.Event | None = None
        self._keeper: asyncio.Task | None = None
        self._lock: asyncio.Lock | None = None
        self.remote_tools: list[str] | None = None
        self.connects = 0  # how many sessions were opened (a reconnect adds one)

    @property
    def connected(self) -> bool:
        return self._session is not None

    @property
    def kind(self) -> str:
        return "mcp-http" if self.url else "mcp-stdio"

    async def _connect(self) -> ClientSession:
        if self._session is not None:
            return self._session
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._session is not None:
                return self._session
            ready: asyncio.Future = asyncio.get_running_loop().create_future()
            stop = asyncio.Event()
            self._keeper = asyncio.create_task(self._keep(ready, stop), name=f"mcp-{self.name}")
            try:
                session = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout)
            except BaseException:
                stop.set()
                ready.cancel()
                self._keeper.cancel()  # a server stuck in the handshake must not outlive the attempt
                raise
            self._session, self._stop = session, stop
            self.connects += 1
            return session

    async def _keep(self, ready: asyncio.Future, stop: asyncio.Event) -> None:
        session = None
        try:
            async with AsyncExitStack() as stack:
                if self.url:
                    client = await stack.enter_async_context(create_mcp_http_client(headers=self._headers))
                    streams = await stack.enter_async_context(
                        streamable_http_client(self.url, http_client=client))
                else:
                    streams = await stack.enter_async_context(stdio_client(self._params, errlog=self._errlog))
                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                await session.initialize()
                listing = await session.list_tools()
                self.remote_tools = [t.name for t in listing.tools]
                if not ready.done():
                    ready.set_result(session)
                await stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.set_exception(TransportUnavailable(f"{self.name}: connection cancelled"))
            raise
        except BaseException as exc:  # noqa: BLE001 - reported to the caller waiting for the connection
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.warning("MCP server %s: connection ended: %s", self.name, type(exc).__name__)
        finally:
            if session is not None and self._session is session:
                self._session = None

    def _drop(self, session: ClientSession) -> None:
        """Forget a broken session; the next call opens a new one."""
        if self._session is session:
            self._session = None
            if self._stop is not None:
                self._stop.set()

    async def call(self, spec: ToolSpec, arguments: dict, *, timeout: float, idempotency_key: str | None) -> Any:
        try:
            session = await self._connect()
        except asyncio.TimeoutError:
            raise NotConnected(f"{self.name}: could not connect within {self.connect_timeout:g} s") from None
        except TransportError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to connect is the server being unavailable
            raise NotConnected(f"{self.name}: could not connect ({type(exc).__name__})") from None
        remote = spec.binding.remote_name or spec.name
        try:
            result = await asyncio.wait_for(
                session.call_tool(remote, arguments, read_timeout_seconds=timeout), timeout)
        except asyncio.TimeoutError:
            raise TransportTimeout(f"{spec.name}: no answer within {timeout:g} s") from None
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                self._drop(session)
                raise TransportUnavailable(f"{self.name}: connection closed") from None
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise TransportTimeout(f"{spec.name}: no answer within {timeout:g} s") from None
            raise ToolReportedError(f"{spec.name}: protocol error {exc.code}: {exc.error.message}") from None
        except _CONNECTION_ERRORS as exc:
            self._drop(session)
            raise TransportUnavailable(f"{self.name}: connection lost ({type(exc).__name__})") from None
        except RuntimeError as exc:
            # the SDK re-checks structured content against the server's own output schema
            raise MalformedOutput(f"{spec.name}: {exc}") from None
        if not isinstance(result, mcp_types.CallToolResult):
            raise MalformedOutput(f"{spec.name}: unexpected result type {type(result).__name__}")
        if result.is_error:
            raise ToolReportedError(_text_of(result) or f"{spec.name} reported an error")
        if result.structured_content is not None:
            return result.structured_content
        text = _text_of(result)
        try:
            return json.loads(text)
        except (TypeError, ValueError):
            raise MalformedOutput(f"{spec.name}: the result is neither structured content nor JSON text") from None

    async def list_tools(self) -> list[str] | None:
        session = await self._connect()
        listing = await session.list_tools()
        self.remote_tools = [t.name for t in listing.tools]
        return self.remote_tools

    async def aclose(self) -> None:
        if self._stop is not None:
            self._stop.set()
        keeper = self._keeper
        if keeper is not None and not keeper.done():
            try:
                await asyncio.wait_for(keeper, 10)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001
                keeper.cancel()
        self._session = None


def _text_of(result: mcp_types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")[:2000]
