"""A tool's error body echoes what it was sent: the gateway masks it before it cuts it to its short length,
so a value straddling the cut never leaves its head behind (real HTTP server on loopback, real audit rows)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tool_servers import gateway_env

PHONE = "13812345678"


class _Echo(BaseHTTPRequestHandler):
    """400 with a detail that puts the phone number across character 300 of the error text."""

    pad = 0

    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"detail": "x" * self.pad + f" call {PHONE} now"}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def echo_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("at, shift", [(200, -4), (300, -8), (300, -4), (300, -1)])
def test_a_tool_error_straddling_a_cut_is_masked_whole(echo_server, pool, tmp_path, at, shift):
    """``at`` 200: where the error detail used to be cut before masking; 300: the error's stored length."""
    from automation.tools import Caller, load_tool_gateway
    from text import personal

    tools = tmp_path / "tools.yaml"
    tools.write_text(f"""\
version: 1
servers:
  api: {{transport: http, base_url: "http://127.0.0.1:{echo_server.server_port}"}}
tools:
  - name: lookup
    description: {{zh: 查询, en: lookup}}
    risk: read
    server: api
    timeout: 2
    retry: {{attempts: 1, backoff_ms: 10}}
    breaker: {{fail_max: 5, reset_seconds: 60}}
    allowed_for: ['*']
    input_schema: {{type: object, properties: {{}}}}
    output_schema: {{type: object}}
    http: {{method: GET, path: /lookup}}
""", encoding="utf-8")
    gw = load_tool_gateway(tools, pool=pool, redact=lambda v: personal.mask(v) or "", variables=gateway_env())
    try:
        prefix = "lookup: HTTP 400: "          # what the gateway's error text starts with
        _Echo.pad = (300 - len(prefix) if at == 300 else 200) - len(" call ") + shift
        r = gw.call("lookup", {}, Caller(channel="web", customer_id="c1", conversation_id="conv-1",
                                          turn_id="turn-1", purpose="test"))
    finally:
        gw.close()
    assert r.status == "error" and r.error.startswith(prefix), r.error
    raw = "x" * _Echo.pad + f" call {PHONE} now"
    if at == 300:
        raw = prefix + raw
    assert raw.index(PHONE) < at < raw.index(PHONE) + len(PHONE)           # the value straddles the cut
    if at == 200:
        assert r.error.endswith(" call [phone] now"), r.error
    assert "1381" not in r.error and len(r.error) <= 300 and not re.search(r"\[[a-z ]*$", r.error), r.error
    with pool.connection() as conn:
        row = conn.execute("SELECT * FROM tool_calls ORDER BY created_at DESC LIMIT 1").fetchone()
    stored = json.dumps({k: v for k, v in row.items() if isinstance(v, (str, dict, list))}, default=str)
    assert "1381" not in stored   # the texts kept (a duration's digits may hold "1381" by chance)
