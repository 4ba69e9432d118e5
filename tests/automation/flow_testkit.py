"""Helpers of the workflow engine's tests: the second shop behind the real gateway, and the approval port."""

from __future__ import annotations

import uuid
from pathlib import Path

from tool_servers import gateway_env

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
        assert self.gateway.flush_audit()
        with self._pool.connection() as conn:
            rows = conn.execute("SELECT tool, status, idempotency_key FROM tool_calls ORDER BY created_at").fetchall()
        return [dict(r) if isinstance(r, dict) else {"tool": r[0], "status": r[1], "idempotency_key": r[2]} for r in rows]


def trailhead_gateway(pool):
    from automation.tools import load_tool_gateway

    return load_tool_gateway(SECOND_SHOP / "tools.yaml", pool=pool,
                             variables=gateway_env(TRAILHEAD_SERVER=str(SECOND_SHOP / "server.py")))


class RecordingApprovals:
    """The ApprovalPort reduced to what the engine needs: a ticket id per request (the router's port opens a
    handoff approval ticket); the requests are kept for the asserts."""

    def __init__(self):
        self.requests = []

    def open_approval(self, conn, request):
        ticket = f"apr_{uuid.uuid4().hex[:10]}"
        self.requests.append((ticket, request))
        return ticket
