"""Fixtures of the tool gateway's tests: the example shop over real MCP transports, on this test's database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {timeout} s")


def gateway_env(**extra: str) -> dict[str, str]:
    """Variables for tools.yaml: this checkout on the shop's path, the stdio transport unless a URL is given."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["SWITCHBOARD_SHOP_URL"] = ""
    env.pop("SWITCHBOARD_SHOP_DATA", None)
    env.update(extra)
    return env


@pytest.fixture
def web_c1():
    from automation.tools import Caller

    return Caller(channel="web", customer_id="c1", conversation_id="conv-1", turn_id="turn-1", purpose="order_status")


@pytest.fixture
def shop_gateway(pool):
    """The bundled tools.yaml: the gateway starts the shop and speaks MCP over stdio."""
    from automation.tools import load_tool_gateway

    gw = load_tool_gateway(None, pool=pool, variables=gateway_env())
    yield gw
    gw.close()


@pytest.fixture
def shop_http(dsn):
    """The shop as its own process, serving streamable HTTP on a free loopback port."""
    port = free_port()
    env = gateway_env(SWITCHBOARD_DATABASE_URL=dsn)
    proc = subprocess.Popen([sys.executable, "-m", "examples.shop", "--http", "--port", str(port)], env=env,
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp", proc, port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def shop_dump(dsn: str) -> dict:
    import json

    out = subprocess.run([sys.executable, "-m", "examples.shop", "dump", "--json", "--dsn", dsn], cwd=REPO,
                         env=gateway_env(), capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


# --- the workflow engine's fixtures: the second shop (tests/automation/second_shop) through the real gateway ---

SECOND_SHOP = Path(__file__).resolve().parent / "second_shop"
TEST_CALLER_PURPOSE = "tests"


class Trailhead:
    """The second shop behind the real tool gateway; its test controls are tools allowed only for 'tests'."""

    def __init__(self, gateway, pool):
        self.gateway = gateway
        self._pool = pool

    def shop(self, control: str, **args):
        from automation.tools import Caller

        res = self.gateway.call(control, args, Caller("test", "tests", purpose=TEST_CALLER_PURPOSE))
        assert res.ok, res.error
        return res.output

    @property
    def calls(self) -> list[dict]:
        """Every call the gateway audited, in order (tool, status, idempotency key)."""
        with self._pool.connection() as conn:
            rows = conn.execute("SELECT tool, status, idempotency_key FROM tool_calls ORDER BY created_at").fetchall()
        return [dict(r) if isinstance(r, dict) else {"tool": r[0], "status": r[1], "idempotency_key": r[2]} for r in rows]


def trailhead_gateway(pool):
    from automation.tools import load_tool_gateway

    return load_tool_gateway(SECOND_SHOP / "tools.yaml", pool=pool,
                             variables=gateway_env(TRAILHEAD_SERVER=str(SECOND_SHOP / "server.py")))


@pytest.fixture
def shop(pool):
    gw = trailhead_gateway(pool)
    yield Trailhead(gw, pool)
    gw.close()


class RecordingApprovals:
    """The ApprovalPort reduced to what the engine needs: a ticket id per request (the router's port opens a
    handoff approval ticket); the requests are kept for the asserts."""

    def __init__(self):
        self.requests = []

    def open_approval(self, conn, request):
        import uuid

        ticket = f"apr_{uuid.uuid4().hex[:10]}"
        self.requests.append((ticket, request))
        return ticket


@pytest.fixture
def approvals():
    return RecordingApprovals()


@pytest.fixture
def second_shop_workflows(shop):
    from automation.workflows.spec import load_workflows

    return load_workflows(SECOND_SHOP / "workflows.yaml", tools=shop.gateway)


@pytest.fixture
def engine(second_shop_workflows, shop, approvals):
    from automation.workflows.engine import FlowEngine

    return FlowEngine(second_shop_workflows, shop.gateway, approvals)


@pytest.fixture
def db(dsn):
    """A connection factory: one connection per turn, rows as dicts."""
    import psycopg
    from psycopg.rows import dict_row

    opened = []

    def connect():
        c = psycopg.connect(dsn, row_factory=dict_row)
        opened.append(c)
        return c

    yield connect
    for c in opened:
        c.close()


@pytest.fixture
def turn(db):
    """Run one engine call in its own committed transaction, as the router's turn would."""

    def run(fn, *args, **kwargs):
        with db() as conn:
            with conn.transaction():
                return fn(conn, *args, **kwargs)

    return run
