"""Tool calls where people look for them: the turn's trace (the replay API) and a ticket's context package.

Real parts: the bundled classifier and workflows, the tool gateway over MCP stdio to the example shop (or
pointed at a shop that is not running), the embedded Postgres, the handoff queue and the HTTP API."""

from __future__ import annotations

import itertools

import psycopg
import pytest
from fastapi.testclient import TestClient

from keys_testkit import authorize
from routing_kit import kb_template, make_agent, routing_services, rows, ticket_memory

pytestmark = pytest.mark.slow

_ids = itertools.count()


def _services(fresh_db, pg_server, template_dsn, e5_encoder):
    _, uri = pg_server
    template_name = psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"]
    name, home, kb_dir = kb_template(uri, template_name, e5_encoder)
    return routing_services(fresh_db(name), home, e5_encoder, kb_dir, flows=True)


@pytest.fixture
def svc(fresh_db, pg_server, template_dsn, e5_encoder):
    s = _services(fresh_db, pg_server, template_dsn, e5_encoder)
    assert s.flows is not None, "the bundled tools and workflows must load"
    yield s
    s.close()


@pytest.fixture
def shop_down(fresh_db, pg_server, template_dsn, e5_encoder, monkeypatch):
    """The gateway pointed at a shop that is not running (nothing listens on the port)."""
    monkeypatch.setenv("SWITCHBOARD_SHOP_URL", "http://127.0.0.1:9109/mcp")
    s = _services(fresh_db, pg_server, template_dsn, e5_encoder)
    yield s
    s.close()


def _client(services):
    from router.app.factory import create_app

    c = TestClient(create_app(services=services))
    c.__enter__()
    authorize(c, services.pool)
    return c


def say(api, text: str, *, customer: str = "c1", conversation: str = "conv-1") -> dict:
    r = api.post("/v1/messages", json={"channel": "web", "conversation_id": conversation, "customer_id": customer,
                                       "message_id": f"m-{next(_ids)}", "text": text})
    assert r.status_code == 200, r.text
    return r.json()


# the session memory's read (automation/workflows/samples/shop.yaml `memory:`: the profile with the recent orders),
# made once per conversation when the first flow starts or a ticket opens
MEMORY = {"get_customer"}


def test_the_trace_shows_each_tool_call_of_the_turn(svc):
    api = _client(svc)
    try:
        out = say(api, "where is my order 100234")
        assert "SF1402837465299" in out["reply"]["text"]
        _, token = make_agent(svc.pool, "sue", role="supervisor")
        r = api.get(f"/v1/conversations/{out['conversation_id']}/trace",
                    headers={"Authorization": f"Bearer {token}"})
    finally:
        api.__exit__(None, None, None)
    assert r.status_code == 200, r.text
    turn = next(t for t in r.json()["turns"] if t["turn_id"] == out["turn_id"])
    calls = turn["tool_calls"]
    assert [c["tool"] for c in calls if c["tool"] not in MEMORY] == ["get_order"], calls
    assert {c["tool"] for c in calls} == MEMORY | {"get_order"}, calls
    assert all(c["status"] == "ok" for c in calls)
    call = next(c for c in calls if c["tool"] == "get_order")
    assert call["status"] == "ok" and call["attempts"] == 1 and call["risk"] == "read"
    assert call["turn_id"] == out["turn_id"] and call["latency_ms"] > 0
    assert call["input"]["order_id"] == "100234"
    order = call["output"]["order"]
    assert order["status"] == "shipped" and order["tracking_no"] == "SF1402837465299"
    assert order["address"] == "[redacted]"          # the audit keeps no address, nor does the replay
    assert call["error"] is None
    # the audit row is the same one the gateway wrote for that turn
    audited = rows(svc.pool, "SELECT id::text AS id, turn_id FROM tool_calls")
    assert sorted((a["id"], a["turn_id"]) for a in audited) == sorted((c["id"], out["turn_id"]) for c in calls)


def test_a_failing_tool_that_ends_in_a_ticket_carries_its_error_in_the_context(shop_down):
    api = _client(shop_down)
    try:
        replies = []
        for text in ("where is my order 100234", "please try again", "again please", "still nothing?"):
            out = say(api, text)
            replies.append(out)
            assert "SF1402837465299" not in ((out.get("reply") or {}).get("text") or "")
            if out.get("ticket_id"):
                break
        ticket_id = replies[-1]["ticket_id"]
        assert ticket_id is not None, [r.get("reply") for r in replies]
        _, token = make_agent(shop_down.pool, "sue", role="supervisor")
        trace = api.get(f"/v1/conversations/{replies[0]['conversation_id']}/trace",
                        headers={"Authorization": f"Bearer {token}"}).json()
    finally:
        api.__exit__(None, None, None)
    context = rows(shop_down.pool, "SELECT context FROM tickets WHERE id = %s", ticket_id)[0]["context"]
    calls = context["tool_calls"]
    assert any(c["tool"] == "get_order" for c in calls), calls
    assert all(c["tool"] in MEMORY | {"get_order"} and c["status"] != "ok" for c in calls), calls
    assert all(c["output"] is None and c["error"] for c in calls)
    assert any("shop" in c["error"] and "connect" in c["error"] for c in calls), calls
    # the package says which calls the ticket's own turn made (the ticket may come from an escalation rule
    # in a later turn, after the flow's failures)
    assert [c["this_turn"] for c in calls] == [c["turn_id"] == replies[-1]["turn_id"] for c in calls]
    # every failed attempt of every turn is in the trace too, under the turn that made it
    by_turn = {t["turn_id"]: t["tool_calls"] for t in trace["turns"]}
    traced = [c for r in replies for c in by_turn[r["turn_id"]]]
    assert [c["id"] for c in traced] == [c["id"] for c in calls]
    assert all(c["status"] == calls[0]["status"] for c in traced)


def test_a_turn_without_a_flow_calls_only_the_session_memory(svc):
    api = _client(svc)
    try:
        out = say(api, "I want to talk to a human agent", conversation="conv-h")
        assert out["ticket_id"] is not None
    finally:
        api.__exit__(None, None, None)
    # the ticket is opened with its session memory still to come: nothing asks the shop until an agent reads it
    svc.tools.flush_audit(5.0)
    (ticket,) = rows(svc.pool, "SELECT context FROM tickets WHERE id = %s", out["ticket_id"])
    assert ticket["context"]["memory_status"] == "pending" and ticket["context"]["memory"] is None
    assert rows(svc.pool, "SELECT count(*) AS n FROM tool_calls WHERE conversation_id = %s",
                out["conversation_id"])[0]["n"] == 0
    context = ticket_memory(svc, out["ticket_id"])    # read as an agent's screen reads it: that loads it
    # no workflow ran: the only calls are the session memory's reads for the ticket's context package
    assert {c["tool"] for c in context["tool_calls"]} <= MEMORY
    assert all(c["risk"] == "read" for c in context["tool_calls"])
    assert context["memory_status"] == "loaded" and context["memory"]["profile"]["customer_id"] == "c1"
    svc.tools.flush_audit(5.0)
    from router.ops.trace import load_trace

    with svc.pool.connection() as conn:
        trace = load_trace(conn, out["conversation_id"])
    (turn,) = trace["turns"]
    assert {c["tool"] for c in turn["tool_calls"]} <= MEMORY
