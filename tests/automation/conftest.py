"""Fixtures of the tool gateway's tests: the example shop over real MCP transports, on this test's database."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tool_servers import REPO, free_port, gateway_env, wait_for_port


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


# --- the workflow engine: the second shop (second_shop/) through the real gateway, one connection per turn ---

@pytest.fixture
def shop(pool):
    from flow_testkit import Trailhead, trailhead_gateway

    gw = trailhead_gateway(pool)
    yield Trailhead(gw, pool)
    gw.close()


@pytest.fixture
def approvals():
    from flow_testkit import RecordingApprovals

    return RecordingApprovals()


@pytest.fixture
def second_shop_workflows(shop):
    from automation.workflows.spec import load_workflows
    from flow_testkit import SECOND_SHOP

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
