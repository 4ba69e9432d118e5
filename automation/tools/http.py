"""Plain HTTP APIs: a URL template whose placeholders are input properties, the query and a JSON body from the
rest of the arguments, headers from the environment (resolved when tools.yaml is loaded).

Path parameters are validated by the input schema first (load refuses a path parameter without a pattern,
enum or integer type) and then percent-encoded whole, so customer text never shapes the URL.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any
from urllib.parse import quote

import httpx

from automation.tools.base import (
    MalformedOutput,
    NotConnected,
    ToolReportedError,
    ToolSpec,
    TransportTimeout,
    TransportUnavailable,
)

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_RESPONSE_BYTES = 1_000_000


class HttpTransport:
    kind = "http"
    connected = True  # nothing to open first: a connection is made per request (pooled by httpx)

    def __init__(self, name: str, *, base_url: str, headers: dict[str, str] | None = None):
        self.name = name
        self.base_url = base_url.rstrip("/")
        self._headers = {"Accept": "application/json", **(headers or {})}
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(headers=self._headers, follow_redirects=False)
        return self._client

    @staticmethod
    def build_path(template: str, arguments: dict) -> str:
        def repl(m: re.Match) -> str:
            value = str(arguments[m.group(1)])
            if value in ("", ".", ".."):
                raise ValueError(f"path parameter {m.group(1)} may not be {value!r}")
            return quote(value, safe="")

        return _PLACEHOLDER.sub(repl, template)

    async def call(self, spec: ToolSpec, arguments: dict, *, timeout: float, idempotency_key: str | None) -> Any:
        b = spec.binding
        used = set(_PLACEHOLDER.findall(b.path or ""))
        url = self.base_url + self.build_path(b.path or "/", arguments)
        params = {k: _scalar(arguments[k]) for k in b.query if k in arguments and arguments[k] is not None}
        used |= set(b.query)
        body = {k: v for k, v in arguments.items() if k not in used} if b.body else None
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        try:
            response = await asyncio.wait_for(
                self._http().request(b.method, url, params=params, json=body, headers=headers,
                                     timeout=httpx.Timeout(timeout)), timeout)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise TransportTimeout(f"{spec.name}: no answer within {timeout:g} s") from None
        except httpx.ConnectError as exc:
            raise NotConnected(f"{self.name}: {type(exc).__name__}") from None
        except httpx.HTTPError as exc:
            raise TransportUnavailable(f"{self.name}: {type(exc).__name__}") from None
        status = response.status_code
        if status >= 500 or status == 429:
            raise TransportUnavailable(f"{spec.name}: HTTP {status}")
        if status >= 400:
            raise ToolReportedError(f"{spec.name}: HTTP {status}: {_detail(response)}")
        if 300 <= status < 400:
            raise MalformedOutput(f"{spec.name}: HTTP {status} redirect not followed")
        if len(response.content) > MAX_RESPONSE_BYTES:
            raise MalformedOutput(f"{spec.name}: response larger than {MAX_RESPONSE_BYTES} bytes")
        if status == 204 or not response.content:
            return {}
        try:
            return response.json()
        except (ValueError, json.JSONDecodeError):
            raise MalformedOutput(f"{spec.name}: the response is not JSON") from None

    async def list_tools(self) -> list[str] | None:
        return None

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    return str(v)


def _detail(response: httpx.Response) -> str:
    """The error's text, kept long: the gateway masks it and only then cuts it (a cut first could split a value)."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:2000]
    if isinstance(data, dict):
        for key in ("detail", "title", "message", "error"):
            if isinstance(data.get(key), str):
                return data[key][:2000]
    return json.dumps(data, ensure_ascii=False)[:2000]
