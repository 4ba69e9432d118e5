"""Workflows wired into the router, end to end on real parts: the bundled classifier and workflows, the
tool gateway talking MCP over stdio to the example shop (started by the gateway on the test's own
database, schema ``shop``), the handoff queue and the direct API."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import psycopg
import pytest
from fastapi.testclient import TestClient

from keys_testkit import authorize
from routing_kit import api_client, flow_services, kb_template, make_agent, routing_services, rows, ticket_memory

pytestmark = pytest.mark.slow

_ids = itertools.count()


@pytest.fixture
def svc(fresh_db, pg_server, template_dsn, e5_encoder):
    s = flow_services(fresh_db, pg_server, template_dsn, e5_encoder)
    yield s
    s.close()


@pytest.fixture
def shop_down(fresh_db, pg_server, template_dsn, e5_encoder, monkeypatch):
    """The gateway pointed at a shop that is not running (nothing listens on the port)."""
    monkeypatch.setenv("SWITCHBOARD_SHOP_URL", "http://127.0.0.1:9109/mcp")
    _, uri = pg_server
    template_name = psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"]
    name, home, kb_dir = kb_template(uri, template_name, e5_encoder)
    s = routing_services(fresh_db(name), home, e5_encoder, kb_dir, flows=True)
    yield s
    s.close()


@pytest.fixture
def api(svc):
    with api_client(svc) as c:
        yield c


def say(api, text: str, *, customer: str = "c1", conversation: str = "conv-1") -> dict:
    r = api.post("/v1/messages", json={"channel": "web", "conversation_id": conversation, "customer_id": customer,
                                       "message_id": f"m-{next(_ids)}", "text": text})
    assert r.status_code == 200, r.text
    return r.json()


def shop_dump(svc) -> dict:
    env = {**os.environ, "SWITCHBOARD_DATABASE_URL": svc.dsn}
    out = subprocess.run([sys.executable, "-m", "examples.shop", "dump", "--json"], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def refunds_of(svc, order_id: str) -> list[dict]:
    order = next(o for o in shop_dump(svc)["orders"] if o["order_id"] == order_id)
    return [w for w in order["writes"] if w["tool"] == "request_refund"]


def test_order_status_in_english_and_chinese_from_the_shop(api, svc):
    en = say(api, "where is my order 100234")
    assert en["flow"]["workflow"] == "order_status" and en["flow"]["status"] == "completed"
    text = en["reply"]["text"]
    assert "100234" in text and "shipped" in text and "顺丰速运" in text and "SF1402837465299" in text
    assert en["ticket_id"] is None
    zh = say(api, "我的订单100234到哪了", conversation="conv-zh")
    assert zh["flow"]["workflow"] == "order_status"
    assert "订单 100234" in zh["reply"]["text"] and "SF1402837465299" in zh["reply"]["text"]
    assert "运单号" in zh["reply"]["text"] and zh["ticket_id"] is None
    assert rows(svc.pool, "SELECT count(*) AS n FROM tickets")[0]["n"] == 0
    sent = rows(svc.pool, "SELECT payload FROM outbox ORDER BY id")
    assert any("SF1402837465299" in r["payload"]["text"] for r in sent)


def test_without_an_order_number_the_bot_asks_which(api):
    out = say(api, "where is my order")
    assert out["flow"]["workflow"] == "order_status" and out["flow"]["status"] == "waiting"
    assert out["flow"]["awaiting"] == "order_id"
    assert "order" in out["reply"]["text"].lower() and out["ticket_id"] is None
    # the answer completes the flow with the shop's real status
    done = say(api, "100234")
    assert done["flow"]["status"] == "completed" and "SF1402837465299" in done["reply"]["text"]


def test_a_flow_that_hands_over_says_so_once(api):
    """Three replies the bot cannot read hand the task to a person: the customer is told once, in the ticket's
    acknowledgement, not also in the engine's own words ("I'm passing this to a colleague" + "Let me check...")."""
    say(api, "where is my order", conversation="conv-once")
    for text in ("which one?", "what do you mean?", "which one?"):    # asks nothing the bot can read or answer
        out = say(api, text, conversation="conv-once")
    assert out["ticket_id"] is not None, out
    text = out["reply"]["text"]
    assert "colleague" in text and "passing this to a colleague" not in text, text
    assert text.lower().count("colleague") == 1, text


def test_a_question_at_a_step_is_answered_then_the_step_asks_again(api):
    """"how do I return it?" at "which order?" is no failed answer: the knowledge base answers it and the step asks
    again, however many such questions come; a question that names no topic ("which one?") is asked again plainly."""
    say(api, "where is my order", conversation="conv-q")
    for question in ("how do I return it?", "how do I return it?", "how do I return it?"):
        out = say(api, question, conversation="conv-q")
        text = out["reply"]["text"]
        assert out["ticket_id"] is None and out["flow"]["status"] == "waiting", out
        assert out["flow"]["awaiting"] == "order_id"
        assert "My Orders" in text and "Which order" in text and "didn't catch" not in text, text
        assert text.index("My Orders") < text.index("Which order")     # the answer, then the question again
    vague = say(api, "which one?", conversation="conv-q")
    assert "didn't catch" in vague["reply"]["text"] and "My Orders" not in vague["reply"]["text"]
    done = say(api, "100234", conversation="conv-q")
    assert done["flow"]["status"] == "completed" and done["ticket_id"] is None


def test_another_customers_order_is_not_found(api):
    out = say(api, "where is my order 100234", customer="c2")
    assert out["flow"]["workflow"] == "order_status"
    assert "couldn't find order 100234" in out["reply"]["text"]
    # nothing of it is shown (its tracking number, its status); the customer's own orders are offered instead
    text = out["reply"]["text"]
    assert "SF1402837465299" not in text and text.count("100234") == 1 and "100241 (shipped)" in text


def test_a_small_refund_executes_once_and_the_reply_states_the_result(api, svc):
    first = say(api, "I want a refund of 30 for order 100234")
    assert first["flow"]["workflow"] == "refund" and first["flow"]["step"] == "confirm_refund", first
    assert first["flow"]["pending_action"]["tool"] == "request_refund"
    assert refunds_of(svc, "100234") == []                       # nothing happens before the yes
    done = say(api, "yes")
    assert done["flow"]["status"] == "completed", done
    writes = refunds_of(svc, "100234")
    assert len(writes) == 1 and float(writes[0]["arguments"]["amount"]) == 30.0
    assert "Refunded 30" in done["reply"]["text"] and "CNY" in done["reply"]["text"]
    assert done["ticket_id"] is None
    again = say(api, "yes")                                      # a later yes starts nothing new
    assert len(refunds_of(svc, "100234")) == 1
    assert "Refunded" not in again["reply"]["text"] if again.get("reply") else True


def test_a_tool_failure_never_yields_a_success_reply(shop_down):
    from router.app.factory import create_app

    with TestClient(create_app(services=shop_down)) as c:
        authorize(c, shop_down.pool)
        out = say(c, "where is my order 100234")
        assert out["flow"]["workflow"] == "order_status"
        text = out["reply"]["text"]
        assert "SF1402837465299" not in text and "shipped" not in text
        refund = say(c, "I want a refund of 30 for order 100234", conversation="conv-2")
        assert "Refunded" not in (refund.get("reply") or {}).get("text", "")
    trace = rows(shop_down.pool, "SELECT trace FROM turns ORDER BY created_at LIMIT 1")[0]["trace"]
    statuses = [s["tool_status"] for s in trace["workflow"]["steps"] if s["tool_status"]]
    assert statuses and all(s != "ok" for s in statuses)


def test_a_big_refund_waits_for_a_supervisor_and_runs_once_when_approved(api, svc):
    first = say(api, "I want a refund of 300 for order 100234")
    assert first["flow"]["step"] == "confirm_refund", first
    waiting = say(api, "yes")
    assert waiting["flow"]["status"] == "waiting_approval", waiting
    assert refunds_of(svc, "100234") == []
    ticket = rows(svc.pool, "SELECT * FROM tickets WHERE kind = 'approval'")
    assert len(ticket) == 1
    ticket = ticket[0]
    assert float(ticket["amount"]) == 300.0 and ticket["currency"] == "CNY"
    assert ticket["approval_level"] == "supervisor"
    assert ticket["draft"]["action"]["tool"] == "request_refund"
    # the approver sees who asks and the request itself, not only the "yes"
    assert ticket["context"]["customer"] == {"customer_id": "c1", "channel": "web"}
    said = [m["text"] for m in ticket["context"]["transcript"] if m["direction"] == "in"]
    assert said[-2:] == ["I want a refund of 300 for order 100234", "yes"], said
    assert float(ticket["draft"]["action"]["arguments"]["amount"]) == 300.0
    assert "Refunded" not in waiting["reply"]["text"]

    # an agent without the level may not approve it; a supervisor does, through the handoff API
    _, agent_token = make_agent(svc.pool, "ann", approval_level="auto")
    h = {"Authorization": f"Bearer {agent_token}"}
    assert api.post(f"/v1/handoff/tickets/{ticket['id']}/claim", headers=h).status_code == 200
    assert api.post(f"/v1/handoff/tickets/{ticket['id']}/approve", headers=h).status_code == 403
    assert api.post(f"/v1/handoff/tickets/{ticket['id']}/release", headers=h, json={}).status_code == 200
    _, sup_token = make_agent(svc.pool, "sue", role="supervisor", approval_level="supervisor")
    s = {"Authorization": f"Bearer {sup_token}"}
    assert api.post(f"/v1/handoff/tickets/{ticket['id']}/claim", headers=s).status_code == 200
    r = api.post(f"/v1/handoff/tickets/{ticket['id']}/approve", headers=s)
    assert r.status_code == 200, r.text
    writes = refunds_of(svc, "100234")
    assert len(writes) == 1 and float(writes[0]["arguments"]["amount"]) == 300.0
    told = rows(svc.pool, "SELECT payload FROM outbox WHERE kind = 'reply' ORDER BY id DESC LIMIT 1")[0]
    assert "Refunded 300" in told["payload"]["text"]
    # a second decision changes nothing
    again = api.post(f"/v1/handoff/tickets/{ticket['id']}/approve", headers=s)
    assert again.status_code in (409, 403, 404)
    assert len(refunds_of(svc, "100234")) == 1


def test_a_rejected_approval_runs_nothing_and_the_customer_is_told(api, svc):
    say(api, "I want a refund of 300 for order 100234")
    assert say(api, "yes")["flow"]["status"] == "waiting_approval"
    ticket = rows(svc.pool, "SELECT id FROM tickets WHERE kind = 'approval'")[0]
    _, sup_token = make_agent(svc.pool, "sue", role="supervisor", approval_level="supervisor")
    s = {"Authorization": f"Bearer {sup_token}"}
    assert api.post(f"/v1/handoff/tickets/{ticket['id']}/claim", headers=s).status_code == 200
    r = api.post(f"/v1/handoff/tickets/{ticket['id']}/reject", headers=s, json={"reason": "not eligible"})
    assert r.status_code == 200, r.text
    assert refunds_of(svc, "100234") == []
    told = rows(svc.pool, "SELECT payload FROM outbox WHERE kind = 'reply' ORDER BY id DESC LIMIT 1")[0]
    assert "Refunded" not in told["payload"]["text"] and "not approved" in told["payload"]["text"]


def test_a_request_for_a_person_wins_over_the_workflow(api, svc):
    out = say(api, "I want to talk to a human agent about my order 100234")
    assert out.get("flow") is None and out["decision"]["tier"] == "L3" and out["ticket_id"] is not None
    assert rows(svc.pool, "SELECT count(*) AS n FROM flow_instances")[0]["n"] == 0


def test_session_memory_starts_flows_and_reaches_the_context_package(api, svc):
    # the bundled intents start change_address and cancel_order; the recent orders come from the session memory
    first = say(api, "I want to cancel my order", customer="c2", conversation="conv-mem")
    assert first["flow"]["workflow"] == "cancel_order", first
    assert first["flow"]["step"] == "confirm_cancel" and "100242" in first["reply"]["text"]   # the one not shipped
    say(api, "never mind", customer="c2", conversation="conv-mem")
    moved = say(api, "帮我改一下收货地址", customer="c1", conversation="conv-mem-zh")
    assert moved["flow"]["workflow"] == "change_address" and moved["flow"]["awaiting"] == "order_id"
    assert "100235" in moved["reply"]["text"] and "100236" in moved["reply"]["text"]
    assert rows(svc.pool, "SELECT count(*) AS n FROM flow_memory WHERE customer_id = 'c1'")[0]["n"] == 1
    person = say(api, "转人工", customer="c1", conversation="conv-mem-zh")
    assert person["ticket_id"] is not None
    context = ticket_memory(svc, person["ticket_id"])     # loaded when an agent reads the ticket
    assert context["memory_status"] == "loaded"
    memory = context["memory"]
    assert memory["profile"]["customer_id"] == "c1"
    assert [o["order_id"] for o in memory["orders"]] == ["100236", "100235", "100234", "100230"]
    assert memory["failed"] == []


def test_a_ticket_shows_its_memory_as_loading_until_it_comes(api, svc):
    """The ticket opens at once; its session memory is loaded when an agent first reads it. Meanwhile the
    handoff API and the console say it is loading (not that the customer has none), and then it is there."""
    hello = say(api, "hello", conversation="conv-wait")
    _, token = make_agent(svc.pool, "sue", role="supervisor")
    h = {"Authorization": f"Bearer {token}"}
    # the conversation's memory row, inserted and not committed: the load after the turn waits at its own write
    with psycopg.connect(svc.dsn) as blocker:
        blocker.execute("INSERT INTO flow_memory (conversation_id, customer_channel, customer_id, data)"
                        " VALUES (%s, 'web', 'c1', '{}')", (hello["conversation_id"],))
        person = say(api, "I want to talk to a human agent", conversation="conv-wait")
        tid = person["ticket_id"]
        assert tid is not None and person["decision"]["tier"] == "L3"
        r = api.get(f"/v1/handoff/tickets/{tid}", headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["context"]["memory_status"] == "pending" and r.json()["context"]["memory"] is None
        r = api.get(f"/console/api/tickets/{tid}/customer", headers=h)
        assert r.status_code == 200, r.text
        assert r.json() == {"ticket_id": tid, "memory": None, "source": "ticket", "status": "pending"}
        blocker.rollback()
    context = ticket_memory(svc, tid)
    assert context["memory_status"] == "loaded"
    r = api.get(f"/console/api/tickets/{tid}/customer", headers=h)
    assert r.status_code == 200 and r.json()["source"] == "ticket" and r.json()["status"] == "loaded", r.text
    memory = r.json()["memory"]
    assert memory["profile"]["customer_id"] == "c1" and "****" in memory["profile"]["phone"]   # the agent view
    assert [o["order_id"] for o in memory["orders"]] == ["100236", "100235", "100234", "100230"]
    # the load wrote only the memory: the rest of the package is as the turn left it
    assert context["transcript"][-1]["text"] == "I want to talk to a human agent"
    assert rows(svc.pool, "SELECT count(*) AS n FROM flow_memory WHERE customer_id = 'c1'")[0]["n"] == 1
