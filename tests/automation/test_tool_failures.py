"""A failing tool server never yields status ok: timeouts, 5xx, malformed output, isError, an open breaker.

Real transports only: a misbehaving MCP server over stdio (flaky_mcp_server.py) and a real HTTP API on
loopback (tool_servers.py).
"""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

from tool_servers import ApiServer, free_port, gateway_env

HERE = Path(__file__).resolve().parent

ANY = {"type": "object"}
VALUE_OUT = {"type": "object", "required": ["value"], "properties": {"value": {"type": "string"}}}


def _tool(name, server, *, remote=None, http=None, timeout=2, retry=1, breaker=3, risk="read", inp=None, out=None,
          extra=""):
    inp = inp or {"type": "object", "additionalProperties": False, "properties": {}}
    out = out or VALUE_OUT
    lines = [f"  - name: {name}", "    description: {zh: 测试, en: test}", f"    risk: {risk}",
             f"    server: {server}", f"    timeout: {timeout}", f"    retry: {{attempts: {retry}, backoff_ms: 10}}",
             f"    breaker: {{fail_max: {breaker}, reset_seconds: 60}}", "    allowed_for: ['*']",
             f"    input_schema: {inp!r}".replace("False", "false").replace("True", "true"),
             f"    output_schema: {out!r}".replace("False", "false").replace("True", "true")]
    if remote:
        lines.append(f"    remote: {remote}")
    if http:
        lines.append(f"    http: {http}")
    if extra:
        lines.extend("    " + line for line in dedent(extra).strip().splitlines())
    return "\n".join(lines)


@pytest.fixture
def api():
    server = ApiServer(free_port()).start()
    yield server
    server.stop()


@pytest.fixture
def flaky_gateway(pool, tmp_path, api):
    from automation.tools import load_tool_gateway

    order_in = {"type": "object", "additionalProperties": False, "required": ["order_id"],
                "properties": {"order_id": {"type": "string", "pattern": "^[A-Za-z0-9 ]{1,20}$"}}}
    order_out = {"type": "object", "required": ["order_id", "status"]}
    refund_in = {"type": "object", "additionalProperties": False, "required": ["customer_id", "amount"],
                 "properties": {"customer_id": {"type": "string"}, "amount": {"type": "number"},
                                "tenant": {"type": "string"}}}
    tools = [
        _tool("echo", "flaky", inp={"type": "object", "required": ["value"],
                                    "properties": {"value": {"type": "string", "maxLength": 10}}}),
        _tool("slow", "flaky", timeout=0.5, breaker=2,
              inp={"type": "object", "properties": {"seconds": {"type": "number"}}}),
        _tool("wrong_shape", "flaky"),
        _tool("not_json", "flaky"),
        _tool("refuses", "flaky", breaker=1, timeout=10),   # an answer, not a timeout, even on a busy machine
        _tool("crashes", "flaky", timeout=10),
        _tool("hits", "flaky", out={"type": "object", "required": ["hits"]}),
        _tool("http_order", "api", http="{method: GET, path: '/orders/{order_id}'}", inp=order_in, out=order_out),
        _tool("http_boom", "api", http="{method: GET, path: /boom}", out=ANY, breaker=2),
        _tool("http_flaky", "api", http="{method: GET, path: /flaky}", out=order_out, retry=2),
        _tool("http_missing", "api", http="{method: GET, path: /missing}", out=ANY, breaker=1),
        _tool("http_slow", "api", http="{method: GET, path: /slow}", out=ANY, timeout=0.4),
        _tool("http_text", "api", http="{method: GET, path: /text}", out=ANY),
        _tool("http_shape", "api", http="{method: GET, path: /shape}", out=order_out),
        _tool("http_refund", "api", http="{method: POST, path: /refunds}", inp=refund_in, out=ANY, risk="money",
              retry=2, extra="identity_argument: customer_id\nstatic_arguments: {tenant: acme}"),
    ]
    text = dedent(f"""\
        version: 1
        servers:
          flaky:
            transport: mcp
            command: ${{PYTHON}}
            args: [{HERE / 'flaky_mcp_server.py'}]
            env: {{PYTHONPATH: "${{PYTHONPATH:-}}"}}
          api:
            transport: http
            base_url: http://127.0.0.1:{api.port}
            headers: {{X-Api-Key: "${{TEST_API_KEY}}"}}
        tools:
        """) + "\n".join(tools) + "\n"
    path = tmp_path / "tools.yaml"
    path.write_text(text, encoding="utf-8")
    gw = load_tool_gateway(path, pool=pool, variables=gateway_env(TEST_API_KEY="k-123"))
    yield gw
    gw.close()


@pytest.fixture
def caller():
    from automation.tools import Caller

    return Caller(channel="web", customer_id="c9", conversation_id="conv-f", turn_id="t-1", purpose="test")


def _hits(gw, caller) -> dict:
    r = gw.call("hits", {}, caller)
    assert r.ok, r
    return r.output["hits"]


def test_a_healthy_tool_is_ok(flaky_gateway, caller):
    r = flaky_gateway.call("echo", {"value": "hi"}, caller)
    assert r.ok and r.output == {"value": "hi"} and r.attempts == 1 and r.call_id


def test_timeout_is_not_ok_and_the_session_survives(flaky_gateway, caller):
    r = flaky_gateway.call("slow", {"seconds": 3}, caller)
    assert r.status == "timeout" and r.output is None and not r.ok
    assert flaky_gateway.call("echo", {"value": "after"}, caller).ok


def test_output_breaking_the_schema_is_invalid_output(flaky_gateway, caller):
    r = flaky_gateway.call("wrong_shape", {}, caller)
    assert r.status == "invalid_output" and r.output is None and "value" in r.error


def test_text_that_is_not_json_is_invalid_output(flaky_gateway, caller):
    r = flaky_gateway.call("not_json", {}, caller)
    assert r.status == "invalid_output" and r.output is None


def test_is_error_results_are_errors(flaky_gateway, caller):
    r = flaky_gateway.call("refuses", {}, caller)
    assert r.status == "error" and r.output is None and "not_found" in r.error
    r = flaky_gateway.call("crashes", {}, caller)
    assert r.status == "error" and r.output is None
    assert "boom" not in r.error  # the server keeps a crash's text to itself


def test_a_tool_error_does_not_open_the_breaker(flaky_gateway, caller):
    for _ in range(3):  # fail_max is 1: a business error is an answer, not an outage
        assert flaky_gateway.call("refuses", {}, caller).status == "error"
    assert flaky_gateway.breaker_state("refuses") == "closed"
    assert _hits(flaky_gateway, caller)["refuses"] == 3


def test_breaker_opens_after_failures_and_short_circuits(flaky_gateway, caller):
    statuses = [flaky_gateway.call("slow", {"seconds": 3}, caller).status for _ in range(2)]
    assert statuses == ["timeout", "timeout"]
    assert flaky_gateway.breaker_state("slow") == "open"
    r = flaky_gateway.call("slow", {"seconds": 0}, caller)
    assert r.status == "breaker_open" and r.output is None and r.attempts == 0
    assert _hits(flaky_gateway, caller)["slow"] == 2  # the third call never reached the server


def test_input_violations_are_refused_before_any_call(flaky_gateway, caller, api):
    r = flaky_gateway.call("echo", {"value": "far too long for the schema"}, caller)
    assert r.status == "invalid_input" and r.attempts == 0
    assert "echo" not in _hits(flaky_gateway, caller)
    r = flaky_gateway.call("http_order", {"order_id": "../admin"}, caller)
    assert r.status == "invalid_input" and api.requests == []


def test_http_ok_with_encoded_path_and_env_header(flaky_gateway, caller, api):
    r = flaky_gateway.call("http_order", {"order_id": "AB 12"}, caller)
    assert r.ok and r.output == {"order_id": "AB 12", "status": "paid"}
    seen = api.requests[-1]
    assert seen["raw_path"] == "/orders/AB%2012"
    assert seen["headers"]["x-api-key"] == "k-123"


def test_http_5xx_is_an_error_and_opens_the_breaker(flaky_gateway, caller, api):
    assert [flaky_gateway.call("http_boom", {}, caller).status for _ in range(2)] == ["error", "error"]
    r = flaky_gateway.call("http_boom", {}, caller)
    assert r.status == "breaker_open" and not r.ok
    assert api.hits["boom"] == 2


def test_http_read_is_retried_after_a_503(flaky_gateway, caller, api):
    r = flaky_gateway.call("http_flaky", {}, caller)
    assert r.ok and r.attempts == 2 and api.hits["flaky"] == 2


def test_http_4xx_is_an_error_without_retry_or_breaker(flaky_gateway, caller, api):
    for _ in range(2):
        r = flaky_gateway.call("http_missing", {}, caller)
        assert r.status == "error" and "no such order" in r.error
    assert api.hits["missing"] == 2 and flaky_gateway.breaker_state("http_missing") == "closed"


def test_http_timeout_text_and_shape(flaky_gateway, caller):
    assert flaky_gateway.call("http_slow", {}, caller).status == "timeout"
    assert flaky_gateway.call("http_text", {}, caller).status == "invalid_output"
    assert flaky_gateway.call("http_shape", {}, caller).status == "invalid_output"


def test_http_write_needs_a_key_and_gets_identity_static_args_and_header(flaky_gateway, caller, api):
    r = flaky_gateway.call("http_refund", {"amount": 5, "customer_id": "someone-else"}, caller)
    assert r.status == "invalid_input" and api.hits["refund"] == 0
    r = flaky_gateway.call("http_refund", {"amount": 5, "customer_id": "someone-else", "tenant": "evil"}, caller,
                           idempotency_key="k-1")
    assert r.ok
    seen = api.requests[-1]
    assert seen["body"] == {"amount": 5, "customer_id": "c9", "tenant": "acme"}
    assert seen["headers"]["idempotency-key"] == "k-1"


def test_every_outcome_is_audited(flaky_gateway, caller, pool):
    flaky_gateway.call("echo", {"value": "a"}, caller)
    flaky_gateway.call("wrong_shape", {}, caller)
    flaky_gateway.call("echo", {"value": "x" * 50}, caller)
    assert flaky_gateway.flush_audit()   # reads and refused calls are written by the audit thread
    with pool.connection() as conn:
        rows = conn.execute("SELECT tool, status, attempts, output, caller_customer, conversation_id, turn_id"
                            " FROM tool_calls ORDER BY created_at").fetchall()
    assert [(r["tool"], r["status"]) for r in rows] == [
        ("echo", "ok"), ("wrong_shape", "invalid_output"), ("echo", "invalid_input")]
    assert rows[0]["output"] == {"value": "a"} and rows[1]["output"] is None
    assert {r["caller_customer"] for r in rows} == {"c9"} and {r["turn_id"] for r in rows} == {"t-1"}
    assert [r["attempts"] for r in rows] == [1, 1, 0]


def test_servers_that_cannot_be_reached_are_errors_not_crashes(pool, tmp_path, caller):
    from automation.tools import load_tool_gateway

    text = dedent(f"""\
        version: 1
        servers:
          missing: {{transport: mcp, command: /nonexistent/server}}
          mute: {{transport: mcp, command: "${{PYTHON}}", args: [-c, "import time; time.sleep(60)"],
                  connect_timeout: 1}}
          closed: {{transport: http, base_url: "http://127.0.0.1:{free_port()}"}}
        tools:
        """) + "\n".join([_tool("a", "missing", remote="echo"), _tool("b", "mute", remote="echo"),
                          _tool("c", "closed", http="{method: GET, path: /x}", out=ANY)]) + "\n"
    path = tmp_path / "tools.yaml"
    path.write_text(text, encoding="utf-8")
    gw = load_tool_gateway(path, pool=pool, variables=gateway_env())
    try:
        for name in ("a", "b", "c"):
            r = gw.call(name, {}, caller)
            assert r.status == "error" and r.output is None, r
        assert "could not connect" in gw.call("b", {}, caller).error
        assert set(gw.check()) == {"a", "b"}  # the http server cannot tell before a call
    finally:
        gw.close()
