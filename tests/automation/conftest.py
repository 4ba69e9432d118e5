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
