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
