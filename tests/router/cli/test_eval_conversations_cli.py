"""`switchboard eval conversations`: in process it runs in a sandbox and never writes to the real shop;
against a gateway (--url) a refused key stops the run with an error instead of failing every case."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest
from typer.testing import CliRunner
from serving_testkit import served

from router.cli import app

REFUND = {"id": "refund", "customer_id": "c1", "turns": [
    {"text": "I want a refund of 30 for order 100234", "expect": {"flow": {"workflow": "refund"}}},
    {"text": "yes", "expect": {"tools": [{"tool": "request_refund", "status": "ok", "times": 1}]}}]}


def _shop_state(dsn: str) -> tuple[int, str]:
    with psycopg.connect(dsn) as conn:
        writes = conn.execute("SELECT count(*) FROM shop.writes").fetchone()[0]
        status = conn.execute("SELECT status FROM shop.orders WHERE order_id = '100234'").fetchone()[0]
    return writes, status


def _databases(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database")}


@pytest.mark.slow
def test_in_process_the_refunds_go_to_a_sandbox_shop_and_the_real_one_is_untouched(dsn, tmp_path, minilm_path,
                                                                                     seed_home):
    from examples.shop.store import Shop

    shop = Shop(dsn, max_size=1)   # the real shop of this gateway's database, with its sample orders
    try:
        shop.load(None)
    finally:
        shop.close()
    before = _shop_state(dsn)
    databases = _databases(dsn)
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps(REFUND) + "\n", encoding="utf-8")
    home = seed_home(tmp_path / "home")   # the classifier's caches as a gateway's restart finds them
    env = {**os.environ, "SWITCHBOARD_DATABASE_URL": dsn, "SWITCHBOARD_HOME": str(home),
           "SWITCHBOARD_EMBEDDING_MODEL": str(minilm_path), "SWITCHBOARD_SHOP_URL": "http://127.0.0.1:9/mcp",
           "SWITCHBOARD_LOG_LEVEL": "WARNING"}
    # a real process: the example shop is started over stdio, which needs the process's own stderr
    result = subprocess.run([sys.executable, "-m", "router.cli", "eval", "conversations", str(cases), "--json"],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # the refund really ran (in the sandbox's shop: the configured SWITCHBOARD_SHOP_URL was not used) ...
    assert report["expectations"]["tools"] == {"passed": 1, "failed": 0, "not_evaluated": 0, "pass_rate": 1.0}, \
        report["results"]
    # ... and the real shop has no write, the order is as it was, the sandbox database is gone
    assert _shop_state(dsn) == before == (0, before[1])
    assert _databases(dsn) == databases
    with psycopg.connect(dsn) as conn:   # nor did the cases' conversations reach the real queue
        assert conn.execute("SELECT count(*) FROM conversations").fetchone()[0] == 0


@pytest.fixture
def live(services):
    """The gateway app served by uvicorn in a thread (the direct API needs an integration key)."""
    from router.app.factory import create_app

    with served(create_app(services=services), start_timeout=20) as base:
        yield base, services


def test_a_refused_key_is_an_error_not_a_failed_case(live, tmp_path):
    url, services = live
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(json.dumps({"id": f"c{i}", "turns": [{"text": "hello", "expect": {"reply": True}}]})
                               for i in range(3)) + "\n", encoding="utf-8")
    runner = CliRunner()
    for headers in ([], ["--header", "Authorization: Bearer sk-not-a-key"]):
        result = runner.invoke(app, ["eval", "conversations", str(cases), "--url", url, *headers],
                               catch_exceptions=False)
        assert result.exit_code == 1, result.output
        assert "refused the request (401" in result.output and "--header 'Authorization: Bearer <key>'" in \
            result.output, result.output
        assert "cases passed" not in result.output
    with services.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM messages").fetchone()["n"] == 0


def test_a_gateway_whose_tools_reach_a_live_shop_is_never_evaluated(live, tmp_path):
    """An evaluation never writes to a real shop: --url runs only against a gateway that declares its tools a
    sandbox (SWITCHBOARD_TOOLS_SANDBOX, shown by /readyz) or has none."""
    from keys_testkit import issue_integration_key

    from router.app.composition import wire_flows

    url, services = live
    wire_flows(services)                      # the example shop over MCP stdio: tools that really write
    assert services.tools is not None
    key = issue_integration_key(services.pool, ["web"])
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": "c1", "turns": [{"text": "hello", "expect": {"reply": True}}]}) + "\n",
                     encoding="utf-8")
    runner = CliRunner()
    args = ["eval", "conversations", str(cases), "--url", url, "--header", f"Authorization: Bearer {key}"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "call a live shop" in result.output and "SWITCHBOARD_TOOLS_SANDBOX=true" in result.output
    with services.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM messages").fetchone()["n"] == 0
    # the same gateway declared a sandbox (its tools file on a staging shop) is evaluated
    services.settings = services.settings.model_copy(update={"tools_sandbox": True})
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "cases passed" in result.output, result.output
    with services.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM messages").fetchone()["n"] == 1
