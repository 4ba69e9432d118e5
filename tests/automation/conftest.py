"""Fixtures for the workflow engine: the second shop over real MCP stdio, and a real database per test."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from mcp_gateway import McpShopGateway

HERE = Path(__file__).resolve().parent
SECOND_SHOP_WORKFLOWS = HERE / "second_shop" / "workflows.yaml"


class RecordingApprovals:
    """The ApprovalPort as the router will offer it, reduced to what the engine needs: a ticket id per request.

    The real port (the handoff approval ticket) is the router's; here the requests are kept for the asserts.
    """

    def __init__(self):
        self.requests = []

    def open_approval(self, conn, request):
        ticket = f"apr_{uuid.uuid4().hex[:10]}"
        self.requests.append((ticket, request))
        return ticket


@pytest.fixture(scope="session")
def shop_gateway():
    gw = McpShopGateway()
    yield gw
    gw.close()


@pytest.fixture
def shop(shop_gateway):
    shop_gateway.shop("debug_reset")
    shop_gateway.calls.clear()
    return shop_gateway


@pytest.fixture
def approvals():
    return RecordingApprovals()


@pytest.fixture
def second_shop_workflows(shop):
    from automation.workflows.spec import load_workflows

    return load_workflows(SECOND_SHOP_WORKFLOWS, tools=shop)


@pytest.fixture
def engine(second_shop_workflows, shop, approvals):
    from automation.workflows.engine import FlowEngine

    return FlowEngine(second_shop_workflows, shop, approvals)


@pytest.fixture
def db(dsn):
    """A connection factory: one connection per turn, committed like the turn's transaction."""
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
