"""The tools file: which tools exist, where they live and how they are guarded.

Validated on load with pydantic and ``jsonschema``; every error names the file, the line and the field
(positions come from the YAML node marks), like the intents file. Strings of ``servers`` may reference the
environment as ``${VAR}`` or ``${VAR:-default}`` (secrets come from the environment only: credential-looking
headers must be references); ``${PYTHON}`` is this interpreter and ``${DATABASE_URL}`` the gateway's own
database (so the example shop finds its schema). See docs/tools.md for the schema.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from automation.tools.base import Binding, BreakerPolicy, RateLimit, ReadBack, RetryPolicy, ToolSpec, Unwrap
from failures.yaml_source import SourceError, compose, construct, dotted, line_for, named_field, syntax_error

BUNDLED_TOOLS = Path(__file__).resolve().parent / "samples" / "tools.yaml"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SECRET_HEADER = re.compile(r"authorization|token|secret|key|password|cookie", re.I)


class ToolConfigError(SourceError):
    """A problem in a tools file, pinned to a line and a field."""

    label = "<tools>"


class _AtPath(ValueError):
    def __init__(self, path: tuple, message: str):
        super().__init__(message)
        self.path = path


# --- the file's shape ----------------------------------------------------------------------------------------


class Identity(BaseModel):
    """How a verified caller becomes the tool's customer id: ``{customer_id}`` and ``{channel}`` placeholders."""

    model_config = ConfigDict(extra="forbid")

    default: str = "{customer_id}"
    channels: dict[str, str] = Field(default_factory=dict)

    @field_validator("default")
    @classmethod
    def _template(cls, v: str) -> str:
        _check_identity_template(v)
        return v

    @field_validator("channels")
    @classmethod
    def _templates(cls, v: dict[str, str]) -> dict[str, str]:
        for t in v.values():
            _check_identity_template(t)
        return v

    def customer_ref(self, channel: str, customer_id: str) -> str:
        return self.channels.get(channel, self.default).format(channel=channel, customer_id=customer_id)


def _check_identity_template(v: str) -> None:
    names = set(_PLACEHOLDER.findall(v))
    if "customer_id" not in names or names - {"customer_id", "channel"}:
        raise ValueError(f"an identity template uses {{customer_id}} and optionally {{channel}} (got {v!r})")


class UnwrapRule(BaseModel):
    """``unwrap: parsed_content`` or ``unwrap: {path: parsed_content, ok: ok, error: message}``: a server that
    wraps every result; expressions then read the result itself (``x.order``, not ``x.parsed_content.order``)."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(default="", description="dotted path of the result in the answer ('' = the whole answer)")
    ok: str | None = Field(default=None, description="a field that is false when the call failed")
    error: str | None = Field(default=None, description="the field with the failure's message")

    @model_validator(mode="before")
    @classmethod
    def _short(cls, v: Any) -> Any:
        return {"path": v} if isinstance(v, str) else v

    @field_validator("path")
    @classmethod
    def _dotted(cls, v: str) -> str:
        if v and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", v):
            raise ValueError(f"a dotted path of field names (got {v!r})")
        return v

    def to_spec(self) -> Unwrap:
        return Unwrap(path=tuple(self.path.split(".")) if self.path else (), ok=self.ok, error=self.error)


class Verify(BaseModel):
    """A write's read-back: the read tool that shows whether an earlier attempt of the write happened."""

    model_config = ConfigDict(extra="forbid")

    call: str = Field(description="a read tool of this file")
    args: dict[str, str] = Field(default_factory=dict, description="its argument -> the write's argument")
    done: dict[str, Any] = Field(min_length=1, description="dotted path of its result -> the value once written "
                                 "($name: the write's argument name)")


class Server(BaseModel):
    model_config = ConfigDict(extra="forbid")

    transport: Literal["mcp", "http"]
    # mcp: a url means streamable HTTP, otherwise the command is started and spoken to over stdio
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    connect_timeout: float = Field(default=30.0, gt=0, le=300, description="seconds to open a session")
    # the bulkhead admits as many calls as the turns one channel may run at once (router's concurrent_turns
    # per_channel, 64): a server that is only slow then answers every caller in its own latency (at 16, 32
    # customers asking a 2 s shop waited up to three latencies for a slot), while a hanging one holds at most
    # half of the gateway's 128 tool-call threads
    max_concurrent: int = Field(default=64, ge=1, le=1000, description="calls in flight to this server at once "
                                "(a bulkhead: a slow server never takes more of the gateway than this)")
    # http
    base_url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    unwrap: UnwrapRule | None = None   # every tool's results, unless the tool says otherwise

    @model_validator(mode="after")
    def _shape(self) -> Server:
        if self.transport == "mcp":
            if not self.url and not self.command:
                raise ValueError("an mcp server needs `url` (streamable HTTP) or `command` (stdio)")
            if self.base_url:
                raise ValueError("`base_url` is for http servers; an mcp server over HTTP takes `url`")
        else:
            if not self.base_url:
                raise ValueError("an http server needs `base_url`")
            if self.command or self.url or self.args:
                raise ValueError("an http server takes `base_url` and `headers` only")
        for url in (self.url, self.base_url):
            if url and not re.match(r"^https?://[^\s/]+", url):
                raise ValueError(f"not an http(s) URL: {url!r}")
        return self


class HttpBinding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    path: str
    query: list[str] = Field(default_factory=list)

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.startswith("/") or "?" in v or "#" in v or "//" in v:
            raise ValueError("an http path starts with '/' and has no query, fragment or '//'")
        return v


class Retry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    attempts: int = Field(default=1, ge=1, le=5)
    backoff_ms: float = Field(default=50, ge=0, le=10_000)


class Limit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    calls: int = Field(ge=1)
    per_seconds: float = Field(gt=0)
    scope: Literal["customer", "tool"] = "customer"


class Breaker(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fail_max: int = Field(default=5, ge=1)
    reset_seconds: float = Field(default=30, gt=0)


class Description(BaseModel):
    model_config = ConfigDict(extra="forbid")
    zh: str = Field(min_length=1)
    en: str = Field(min_length=1)


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: Description
    risk: Literal["read", "write", "money"]
    server: str
    remote: str | None = Field(default=None, description="MCP: the server's tool name (default: name)")
    http: HttpBinding | None = None
    timeout: float = Field(default=5.0, gt=0, le=120)
    retry: Retry = Field(default_factory=Retry)
    rate_limit: Limit | None = None
    breaker: Breaker = Field(default_factory=Breaker)
    allowed_for: list[str] = Field(min_length=1)
    identity_argument: str | None = None
    idempotency_argument: str | None = None
    static_arguments: dict[str, Any] = Field(default_factory=dict)
    unwrap: UnwrapRule | None = None
    verify: Verify | None = None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"tool names are lower_snake_case, 1-64 characters (got {v!r})")
        return v

    @field_validator("input_schema", "output_schema")
    @classmethod
    def _schema(cls, v: dict) -> dict:
        try:
            Draft202012Validator.check_schema(v)
        except SchemaError as exc:
            raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Tool:
        schema = self.input_schema
        if schema.get("type") != "object":
            raise _AtPath(("input_schema", "type"), "an input schema is an object (`type: object`)")
        props = schema.get("properties") or {}
        for arg in ("identity_argument", "idempotency_argument"):
            value = getattr(self, arg)
            if value is not None and value not in props:
                raise _AtPath((arg,), f"{value!r} is not a property of input_schema")
        for key in self.static_arguments:
            if key not in props:
                raise _AtPath(("static_arguments", key), f"{key!r} is not a property of input_schema")
        if self.verify is not None:
            if self.risk == "read":
                raise _AtPath(("verify",), "`verify` reads back a write; a read tool needs none")
            for key, arg in self.verify.args.items():
                if arg not in props:
                    raise _AtPath(("verify", "args", key), f"{arg!r} is not a property of input_schema")
            for path, value in self.verify.done.items():
                if isinstance(value, str) and value.startswith("$") and value[1:] not in props:
                    raise _AtPath(("verify", "done", path), f"{value[1:]!r} is not a property of input_schema")
        if self.http is not None:
            required = set(schema.get("required") or [])
            for name in _PLACEHOLDER.findall(self.http.path):
                prop = props.get(name)
                if prop is None or name not in required:
                    raise _AtPath(("http", "path"), f"path parameter {name!r} must be a required input property")
                if not (prop.get("pattern") or prop.get("enum") or prop.get("type") == "integer"):
                    raise _AtPath(("http", "path"), f"path parameter {name!r} needs a `pattern`, an `enum` or "
                                  "`type: integer` in input_schema, so customer text cannot shape the URL")
            for name in self.http.query:
                if name not in props:
                    raise _AtPath(("http", "query"), f"query parameter {name!r} is not an input property")
        return self


class ToolsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    identity: Identity = Field(default_factory=Identity)
    servers: dict[str, Server]
    tools: list[Tool]

    @model_validator(mode="after")
    def _references(self) -> ToolsFile:
        seen: set[str] = set()
        for i, tool in enumerate(self.tools):
            if tool.name in seen:
                raise _AtPath(("tools", i, "name"), f"duplicate tool name {tool.name!r}")
            seen.add(tool.name)
            server = self.servers.get(tool.server)
            if server is None:
                raise _AtPath(("tools", i, "server"), f"unknown server {tool.server!r} "
                              f"(declared: {', '.join(self.servers) or 'none'})")
            if server.transport == "http" and tool.http is None:
                raise _AtPath(("tools", i, "http"), f"server {tool.server!r} is http: the tool needs an `http` "
                              "binding (method, path)")
            if server.transport == "mcp" and tool.http is not None:
                raise _AtPath(("tools", i, "http"), f"server {tool.server!r} is mcp: use `remote`, not `http`")
        by_name = {t.name: t for t in self.tools}
        for i, tool in enumerate(self.tools):
            if tool.verify is None:
                continue
            reader = by_name.get(tool.verify.call)
            if reader is None or reader.risk != "read":
                raise _AtPath(("tools", i, "verify", "call"), f"{tool.verify.call!r} is not a read tool of this "
                              f"file (reads: {', '.join(t.name for t in self.tools if t.risk == 'read') or 'none'})")
            reader_props = (reader.input_schema.get("properties") or {})
            for key in tool.verify.args:
                if key not in reader_props:
                    raise _AtPath(("tools", i, "verify", "args", key),
                                  f"{key!r} is not a property of {reader.name}'s input_schema")
        for name, server in self.servers.items():
            for header, value in server.headers.items():
                if _SECRET_HEADER.search(header) and value and not _ENV_REF.search(value):
                    raise _AtPath(("servers", name, "headers", header),
                                  "a credential header takes its value from the environment (${VAR}), not the file")
        return self


def _substitute(data: Any, path: tuple, variables: Mapping[str, str], marks: dict, file: str | None) -> Any:
    """Resolve ``${VAR}`` / ``${VAR:-default}`` in every string under ``servers``."""
    if isinstance(data, dict):
        return {k: _substitute(v, path + (k,), variables, marks, file) for k, v in data.items()}
    if isinstance(data, list):
        return [_substitute(v, path + (i,), variables, marks, file) for i, v in enumerate(data)]
    if not isinstance(data, str):
        return data

    def repl(m: re.Match) -> str:
        name, default = m.group(1), m.group(2)
        value = variables.get(name)
        if value is None or value == "" and default is not None:
            if default is None:
                raise ToolConfigError(f"environment variable {name} is not set (write ${{{name}:-}} for optional)",
                                      file=file, line=line_for(path, marks), field=dotted(path))
            return default
        return value

    return _ENV_REF.sub(repl, data)


def parse_tools(text: str, *, file: str | None = None, variables: Mapping[str, str] | None = None) -> ToolsFile:
    """Parse and validate tools YAML text; raise ToolConfigError naming line and field."""
    try:
        root = compose(text)
    except yaml.MarkedYAMLError as exc:
        message, line = syntax_error(exc)
        raise ToolConfigError(message, file=file, line=line) from None
    if root is None:
        raise ToolConfigError("the file is empty", file=file, line=1)
    marks: dict[tuple, int] = {}
    data = construct(root, file=file, marks=marks, error=ToolConfigError)
    if not isinstance(data, dict):
        raise ToolConfigError("the top level must be a mapping (version, servers, tools)", file=file, line=1)
    variables = dict(os.environ if variables is None else variables)
    variables.setdefault("PYTHON", sys.executable)
    if isinstance(data.get("servers"), dict):
        # headers keep their ${VAR} text for the credential check, then are resolved like the rest
        raw_headers = {n: dict(s.get("headers") or {}) for n, s in data["servers"].items() if isinstance(s, dict)}
        data["servers"] = _substitute(data["servers"], ("servers",), variables, marks, file)
    else:
        raw_headers = {}
    try:
        parsed = ToolsFile.model_validate(_with_raw_headers(data, raw_headers))
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            ctx_err = (err.get("ctx") or {}).get("error")
            if isinstance(ctx_err, _AtPath):
                # model validators know the field: relative to the tool they validate, or absolute at the top
                loc, message = (ctx_err.path if not loc else loc + ctx_err.path), str(ctx_err)
            loc = _data_path(loc, data)
            if err["type"] == "extra_forbidden":
                message = "unknown field"
            errors.append({"file": file, "line": line_for(loc, marks), "field": named_field(loc, data, "tools"),
                           "message": message})
        first = errors[0]
        raise ToolConfigError(first["message"], file=file, line=first["line"], field=first["field"],
                              errors=errors) from None
    for name, server in parsed.servers.items():
        resolved = data["servers"][name].get("headers") or {}
        server.headers = {h: v for h, v in resolved.items() if v}
    return parsed


def _with_raw_headers(data: dict, raw_headers: dict) -> dict:
    out = dict(data)
    if isinstance(out.get("servers"), dict):
        servers = {}
        for name, server in out["servers"].items():
            if isinstance(server, dict) and name in raw_headers:
                server = {**server, "headers": raw_headers[name]}
            servers[name] = server
        out["servers"] = servers
    return out


def _data_path(loc: tuple, data: Any) -> tuple:
    """Keep the parts of a pydantic location that are keys of the data (drops union/model tags)."""
    out: list = []
    node = data
    for p in loc:
        if isinstance(node, dict) and p in node:
            out.append(p)
            node = node[p]
        elif isinstance(node, list) and isinstance(p, int) and 0 <= p < len(node):
            out.append(p)
            node = node[p]
        elif isinstance(p, str) and not isinstance(node, (dict, list)):
            break
        elif isinstance(p, str) and isinstance(node, dict):
            out.append(p)  # a missing or unknown field: name it
            break
    return tuple(out)


def load_tools_file(path: str | Path | None = None, *, variables: Mapping[str, str] | None = None) -> ToolsFile:
    p = Path(path) if path is not None else BUNDLED_TOOLS
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ToolConfigError("file not found", file=str(p)) from None
    except UnicodeDecodeError as exc:
        raise ToolConfigError(f"not UTF-8 text: {exc}", file=str(p)) from None
    return parse_tools(text, file=str(p), variables=variables)


def to_specs(config: ToolsFile) -> list[ToolSpec]:
    specs = []
    for tool in config.tools:
        server = config.servers[tool.server]
        if server.transport == "http":
            binding = Binding(server=tool.server, method=tool.http.method, path=tool.http.path,
                              query=tuple(tool.http.query), body=tool.http.method in ("POST", "PUT", "PATCH"))
        else:
            binding = Binding(server=tool.server, remote_name=tool.remote or tool.name)
        specs.append(ToolSpec(
            name=tool.name,
            description={"zh": tool.description.zh, "en": tool.description.en},
            input_schema=tool.input_schema,
            output_schema=tool.output_schema,
            risk=tool.risk,
            binding=binding,
            timeout_s=tool.timeout,
            retry=RetryPolicy(attempts=tool.retry.attempts, backoff_ms=tool.retry.backoff_ms),
            rate_limit=(RateLimit(calls=tool.rate_limit.calls, per_seconds=tool.rate_limit.per_seconds,
                                  scope=tool.rate_limit.scope) if tool.rate_limit else None),
            breaker=BreakerPolicy(fail_max=tool.breaker.fail_max, reset_seconds=tool.breaker.reset_seconds),
            allowed_for=tuple(tool.allowed_for),
            identity_argument=tool.identity_argument,
            idempotency_argument=tool.idempotency_argument,
            static_arguments=dict(tool.static_arguments),
            unwrap=(tool.unwrap or server.unwrap).to_spec() if (tool.unwrap or server.unwrap) else None,
            verify=(ReadBack(tool=tool.verify.call, args=dict(tool.verify.args), done=dict(tool.verify.done))
                    if tool.verify else None),
        ))
    return specs
