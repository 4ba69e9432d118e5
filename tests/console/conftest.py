"""The console's browser tests: the real gateway (classifier rules, router, handoff, state port) served by
uvicorn on a loopback port, driven by Playwright through Debian's chromium.

Playwright cannot download its own browser here, so the launch points at the system chromium; when it
is missing the tests fail with a message saying how to install it (``make test`` installs it first).
"""

from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path

import pytest
from playwright.sync_api import expect
from serving_testkit import served

CHROMIUM = "/usr/bin/chromium"
# the page's own waits are 15 s (set_default_timeout below); expect() has its own 5 s default, too short for a
# first render while the machine's other work (a test run beside this one) holds both cores
expect.set_options(timeout=15_000)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ROUTER_KITS = str(Path(__file__).resolve().parents[1] / "router")


def chromium_path() -> str:
    path = shutil.which("chromium") or CHROMIUM
    if not Path(path).exists():
        pytest.fail("chromium is missing: the console's browser tests need Debian's chromium "
                    "(`apt-get install -y chromium`; `make test` installs it when missing)")
    return path


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": chromium_path(), "args": CHROMIUM_ARGS}


def _classifier(encoder, home: Path):
    """The bundled intents on ``encoder``: the routing tests' classifier, fitted once per run for both."""
    if ROUTER_KITS not in sys.path:
        sys.path.insert(0, ROUTER_KITS)
    from routing_kit import classifier_for

    return classifier_for(encoder, home)


class Gateway:
    """A live gateway: base URL, services, and helpers that act as the customer or the operator would."""

    def __init__(self, url: str, services):
        self.url = url
        self.services = services
        self.pool = services.pool
        self.handoff = services.handoff

    def integration_key(self) -> str:
        """The direct API's key of this gateway (issued once, for the web channel)."""
        if getattr(self, "_key", None) is None:
            from router.app.keys import issue_key

            with self.pool.connection() as conn:
                self._key, _ = issue_key(conn, f"console-test-{uuid.uuid4().hex[:6]}", ["web"])
        return self._key

    def agent(self, name: str, *, role: str = "agent", teams=("general",), approval_level: str | None = None) -> str:
        from handoff import agents as store

        with self.pool.connection() as conn:
            store.add_agent(conn, name, role=role, teams=teams, approval_level=approval_level, actor="test")
            token, _ = store.issue_token(conn, name, label="console-test", actor="test")
        return token

    def revoke(self, token: str) -> None:
        from handoff import agents as store

        with self.pool.connection() as conn:
            store.revoke_token(conn, token, actor="test")

    def customer_says(self, text: str, *, conversation: str | None = None, customer: str = "cust-1") -> dict:
        import httpx

        body = {"channel": "web", "conversation_id": conversation or f"c-{uuid.uuid4().hex[:8]}",
                "customer_id": customer, "message_id": f"m-{uuid.uuid4().hex}", "text": text}
        r = httpx.post(f"{self.url}/v1/messages", json=body, timeout=30,
                       headers={"Authorization": f"Bearer {self.integration_key()}"})
        assert r.status_code == 200, r.text
        return r.json()

    def open_assist(self, *, text: str, draft: str, amount: float | None = None, currency: str | None = None,
                    reason: str = "intent refund_request needs a reviewed answer") -> dict:
        """An L2 ticket as the router opens one: a conversation waiting in l2_assisting, a draft with evidence."""
        with self.pool.connection() as conn, conn.transaction():
            conv = conn.execute(
                "INSERT INTO conversations (channel, external_id, customer_id, state) "
                "VALUES ('web', %s, 'cust-2', 'l2_assisting') RETURNING id",
                (f"c-{uuid.uuid4().hex[:8]}",)).fetchone()
            conn.execute("INSERT INTO messages (conversation_id, channel, external_id, direction, sender, text) "
                         "VALUES (%s, 'web', %s, 'in', 'customer', %s)", (conv["id"], f"m-{uuid.uuid4().hex}", text))
            evidence = [{"chunk_id": "refund-timelines-en#0", "doc_id": "refund-timelines-en", "score": 0.82,
                         "title": "Refund timelines", "section": "Card payments", "source": "refund-timelines-en.md",
                         "text": "Refunds to a card arrive within 5-7 working days."}]
            ticket = self.handoff.open_ticket(
                conn, kind="assist", conversation_id=str(conv["id"]), channel="web", customer_id="cust-2",
                reason=reason, priority="normal", amount=amount, currency=currency,
                context={"transcript": [{"direction": "in", "sender": "customer", "text": text}],
                         "evidence": evidence,
                         "flow": {"name": "refund", "step": "await_approval"},
                         "proposed_tool_call": {"tool": "issue_refund", "arguments": {"order": "A-1"}},
                         "decisions": [{"turn_id": None, "state": "l2_assisting", "decision": {
                             "intent": "refund_request", "tier": "L2", "confidence": 0.91, "channel": "embeddings",
                             "explanation": {"method": "head", "score": 0.91, "threshold": 0.5, "nearest": [
                                 {"intent": "refund_request", "example": "where is my refund", "score": 0.88}]}}}]},
                draft={"text": draft, "citations": [{"doc_id": "refund-timelines-en", "title": "Refund timelines",
                                                     "score": 0.82}],
                       "proposed_action": "reply to refund_request with the draft"})
        return ticket

    def refund_approval(self, conversation: str, *, customer: str = "c1", order: str = "100230",
                        amount: str = "200") -> dict:
        """A refund above the automatic limit, asked for as a customer does (the bundled refund workflow):
        the flow waits for an approver and the approval ticket is returned."""
        self.customer_says("我要退款", conversation=conversation, customer=customer)
        self.customer_says(order, conversation=conversation, customer=customer)
        self.customer_says(f"退{amount}元", conversation=conversation, customer=customer)
        turn = self.customer_says("是", conversation=conversation, customer=customer)
        assert turn["flow"]["status"] == "waiting_approval", turn
        with self.pool.connection() as conn:
            return conn.execute("SELECT t.* FROM tickets t JOIN conversations c ON c.id::text = t.conversation_id "
                                "WHERE t.kind = 'approval' AND c.external_id = %s", (conversation,)).fetchone()

    def refunds(self, order: str) -> list[dict]:
        """The example shop's recorded refunds against an order (its own table in this database)."""
        with self.pool.connection() as conn:
            return conn.execute("SELECT amount, arguments FROM shop.writes WHERE tool = 'request_refund' "
                                "AND order_id = %s ORDER BY id", (order,)).fetchall()

    def flow(self, ticket_id) -> dict:
        with self.pool.connection() as conn:
            return conn.execute("SELECT * FROM flow_instances WHERE approval_ticket = %s",
                                (str(ticket_id),)).fetchone()

    def outbox(self) -> list[dict]:
        with self.pool.connection() as conn:
            return conn.execute("SELECT kind, payload->>'text' AS text, status FROM outbox ORDER BY id").fetchall()

    def ticket(self, ticket_id) -> dict:
        with self.pool.connection() as conn:
            return conn.execute("SELECT * FROM tickets WHERE id = %s", (str(ticket_id),)).fetchone()


def _gateway(services, minilm_encoder, tmp_path, monkeypatch, *, flows: bool):
    from router.app.composition import wire_flows, wire_handoff, wire_router
    from router.app.factory import create_app

    monkeypatch.setenv("SWITCHBOARD_HANDOFF_LEASE_SECONDS", "6")
    services.classifier = _classifier(minilm_encoder, tmp_path)
    wire_handoff(services)
    if flows:
        wire_flows(services)
        assert services.flows is not None, "the bundled tools and workflows did not load"
    wire_router(services)
    with served(create_app(services=services), start_timeout=30) as url:
        yield Gateway(url, services)


@pytest.fixture
def gateway(services, minilm_encoder, tmp_path, monkeypatch):
    """The gateway wired like production (rules + embeddings classifier, router, handoff, state port),
    with a short lease so the console's heartbeats show within a test."""
    yield from _gateway(services, minilm_encoder, tmp_path, monkeypatch, flows=False)


@pytest.fixture
def shop_gateway(services, minilm_encoder, tmp_path, monkeypatch):
    """The same gateway with the tool gateway and the workflows: the bundled refund workflow over the
    example shop (MCP stdio, schema ``shop`` of this test's database)."""
    yield from _gateway(services, minilm_encoder, tmp_path, monkeypatch, flows=True)


@pytest.fixture
def console(gateway, page):
    """A page on the console, with a sign-in helper."""
    return _console(gateway, page)


@pytest.fixture
def shop_console(shop_gateway, page):
    """The console on the gateway with workflows and the example shop."""
    return _console(shop_gateway, page)


def _console(gateway, page):
    page.set_default_timeout(15000)

    def sign_in(token: str):
        page.goto(f"{gateway.url}/console")
        page.get_by_label("Agent token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("button", name="Sign out").wait_for()
        page.locator("#live[data-state=live]").wait_for()

    page.sign_in = sign_in
    return page
