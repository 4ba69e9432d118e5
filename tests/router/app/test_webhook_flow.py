"""The webhook contract end to end over HTTP (TestClient): customers post to /v1/messages, agents work
the queue through /v1/handoff with real tokens; real classifier, knowledge base, queue and Postgres."""

from __future__ import annotations

import itertools

import psycopg
import pytest
import yaml
from keys_testkit import authorize
from fastapi.testclient import TestClient

from router.app.factory import create_app
from router.turn.escalation import SAMPLE_POLICY
from router.turn.guards import set_sensitive
from routing_kit import kb_template, make_agent, routing_services, rows

pytestmark = pytest.mark.slow
PROBLEM = "application/problem+json"


@pytest.fixture
def make_client(fresh_db, pg_server, template_dsn, e5_encoder, tmp_path):
    _, uri = pg_server
    template_name = psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"]
    name, home, kb_dir = kb_template(uri, template_name, e5_encoder)
    opened = []

    def make(**settings):
        svc = routing_services(fresh_db(name), home, e5_encoder, kb_dir, **settings)
        client = TestClient(create_app(services=svc))
        client.__enter__()
        authorize(client, svc.pool)
        opened.append((client, svc))
        return client, svc

    yield make
    for client, svc in opened:
        client.__exit__(None, None, None)
        svc.close()


@pytest.fixture
def client_svc(make_client):
    return make_client()


_ids = itertools.count()


def post(client, text, *, conv="c-1", customer="u-1", message_id=None, expect=200):
    r = client.post("/v1/messages", json={"channel": "web", "conversation_id": conv, "customer_id": customer,
                                          "message_id": message_id or f"w-{next(_ids)}", "text": text})
    assert r.status_code == expect, r.text
    return r


def agent_headers(svc, name, **kw):
    _, token = make_agent(svc.pool, name, **kw)
    return {"Authorization": f"Bearer {token}"}


def test_contract_of_an_l1_answer_in_english_and_chinese(client_svc):
    client, svc = client_svc
    for conv, text, lang in [("c-en", "how long does a refund take to reach my card?", "en"),
                             ("c-zh", "电子发票怎么开？", "zh")]:
        body = post(client, text, conv=conv).json()
        assert set(body) == {"conversation_id", "external_conversation_id", "turn_id", "state", "decision", "reply",
                             "ticket_id", "feedback_token", "lang", "outcome"}
        assert body["feedback_token"].startswith("sbf_")
        assert body["lang"] == body["reply"]["lang"] == lang and body["outcome"] == "resolved"
        d = body["decision"]
        assert {"intent", "tier", "confidence", "channel", "explanation"} <= set(d)
        assert d["tier"] == "L1" and d["channel"] in ("rules", "embeddings") and 0 <= d["confidence"] <= 1
        assert d["explanation"]["channel"] == d["channel"]
        assert d.get("escalation") is None and body["ticket_id"] is None
        assert body["state"] == "l1_resolved"
        assert body["reply"]["text"] and body["reply"]["citations"]
        assert body["reply"]["citations"][0]["doc_id"].endswith(f"-{lang}")
        assert body["external_conversation_id"] == conv


def test_l3_lifecycle_over_http_with_an_agent(client_svc):
    client, svc = client_svc
    first = post(client, "我要找人工客服").json()
    assert first["decision"]["tier"] == "L3" and first["decision"]["escalation"]["rule"] == "human_request"
    assert first["reply"]["text"] and first["state"] == "l3_queuing"
    tid = first["ticket_id"]
    hdr = agent_headers(svc, "mei")
    got = client.get(f"/v1/handoff/tickets/{tid}", headers=hdr).json()
    assert got["context"]["transcript"][0]["text"] == "我要找人工客服"
    assert client.post(f"/v1/handoff/tickets/{tid}/claim", headers=hdr).status_code == 200
    held = post(client, "在吗？").json()
    assert held["state"] == "l3_connected" and held["reply"] is None and held["ticket_id"] == tid
    r = client.post(f"/v1/handoff/tickets/{tid}/messages", headers=hdr, json={"text": "您好，我是小美，请问有什么可以帮您？"})
    assert r.status_code == 200, r.text
    r = client.post(f"/v1/handoff/tickets/{tid}/resolve", headers=hdr, json={"outcome": "solved"})
    assert r.status_code == 200, r.text
    bye = post(client, "谢谢").json()
    assert bye["state"] == "closed" and bye["reply"]["text"]
    new = post(client, "how long does a refund take to reach my card?").json()
    assert new["state"] == "l1_resolved" and new["conversation_id"] == first["conversation_id"]
    out = rows(svc.pool, "SELECT kind, payload->>'text' AS text FROM outbox ORDER BY id")
    assert [o["kind"] for o in out] == ["ack", "agent_message", "reply", "reply"]


def test_queue_screens_hear_router_tickets_after_the_turn_commits(client_svc):
    """Opening a ticket and a customer's message to it are announced (NOTIFY) once the turn committed."""
    client, svc = client_svc
    with psycopg.connect(svc.settings.database_dsn(), autocommit=True) as listener:
        listener.execute("LISTEN handoff_events")
        first = post(client, "I want to talk to a human", conv="c-notify").json()
        post(client, "are you there? 13812345678", conv="c-notify")
        notes = [n.payload for n in listener.notifies(timeout=5, stop_after=2)]
    assert len(notes) == 2 and all(first["ticket_id"] in n for n in notes)
    assert '"action" : "opened"' in notes[0] and '"action" : "customer_message"' in notes[1]
    assert "13812345678" not in notes[1]


def test_l2_assist_approved_over_http(client_svc):
    client, svc = client_svc
    body = post(client, "I want to return the jacket, it's too small").json()
    assert body["decision"]["tier"] == "L2" and body["state"] == "l2_assisting"
    tid = body["ticket_id"]
    hdr = agent_headers(svc, "sam")
    t = client.get(f"/v1/handoff/tickets/{tid}", headers=hdr).json()
    assert t["kind"] == "assist" and t["draft"]["text"]
    client.post(f"/v1/handoff/tickets/{tid}/claim", headers=hdr)
    r = client.post(f"/v1/handoff/tickets/{tid}/approve", headers=hdr)
    assert r.status_code == 200, r.text
    conv = rows(svc.pool, "SELECT state FROM conversations WHERE id = %s", body["conversation_id"])[0]
    assert conv["state"] == "l2_resolved"


@pytest.mark.parametrize("text", ["我不想活了", "I am going to kill myself tonight"])
def test_crisis_over_http(client_svc, text):
    client, svc = client_svc
    body = post(client, text).json()
    assert body["decision"]["escalation"]["rule"] == "crisis" and body["decision"]["escalation"]["priority"] == "urgent"
    assert body["decision"]["channel"] == "harness" and body["state"] == "l3_queuing"
    hotline = yaml.safe_load(SAMPLE_POLICY.read_text(encoding="utf-8"))["harness"]["hotline"]
    assert hotline in body["reply"]["text"]
    t = rows(svc.pool, "SELECT kind, priority FROM tickets WHERE id = %s", body["ticket_id"])[0]
    assert (t["kind"], t["priority"]) == ("handoff", "urgent")


def test_stop_over_http_blocks_bot_and_agents(client_svc):
    client, svc = client_svc
    tid = post(client, "转人工").json()["ticket_id"]
    stop = post(client, "退订").json()
    assert stop["reply"] is None and stop["decision"]["explanation"]["rule"] == "stop"
    assert post(client, "where is my order").json()["reply"] is None
    hdr = agent_headers(svc, "kai")
    client.post(f"/v1/handoff/tickets/{tid}/claim", headers=hdr)
    r = client.post(f"/v1/handoff/tickets/{tid}/messages", headers=hdr, json={"text": "Hello?"})
    assert r.status_code == 409 and r.headers["content-type"].startswith(PROBLEM)
    assert [o["kind"] for o in rows(svc.pool, "SELECT kind FROM outbox ORDER BY id")] == ["ack"]


def test_quota_over_http_is_429_with_retry_after(make_client, tmp_path):
    policy = yaml.safe_load(SAMPLE_POLICY.read_text(encoding="utf-8"))
    policy["harness"]["quota"] = {"max_messages": 2, "window_seconds": 30}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy, allow_unicode=True), encoding="utf-8")
    client, svc = make_client(policy_file=path)
    post(client, "电子发票怎么开？")
    post(client, "how long does a refund take to reach my card?")
    r = post(client, "where is my order", message_id="q-3", expect=429)
    assert r.headers["content-type"].startswith(PROBLEM)
    retry = int(r.headers["retry-after"])
    assert 1 <= retry <= 30 and r.json()["retry_after"] == retry and r.json()["status"] == 429
    assert rows(svc.pool, "SELECT count(*) AS n FROM turns")[0]["n"] == 2
    with svc.pool.connection() as conn:
        conn.execute("UPDATE messages SET received_at = received_at - interval '31 seconds'")
    ok = post(client, "where is my order", message_id="q-3").json()
    assert ok["decision"]["intent"] == "order_query"


def test_retry_is_replayed_without_a_second_ticket(client_svc):
    client, svc = client_svc
    a = post(client, "我要退款600元", message_id="same")
    b = post(client, "我要退款600元", message_id="same")
    assert a.json() == b.json() and b.headers["idempotent-replayed"] == "true"
    assert a.json()["decision"]["escalation"]["rule"] == "refund_amount"
    assert rows(svc.pool, "SELECT count(*) AS n FROM tickets")[0]["n"] == 1


def test_sensitive_customer_over_http(client_svc):
    client, svc = client_svc
    with svc.pool.connection() as conn:
        set_sensitive(conn, "web", "vip", True)
    body = post(client, "电子发票怎么开？", customer="vip", conv="c-vip").json()
    assert body["decision"]["escalation"]["rule"] == "sensitive" and body["state"] == "l3_queuing"


def test_bad_input_is_a_problem_not_a_500(client_svc):
    client, svc = client_svc
    r = client.post("/v1/messages", json={"channel": "web", "conversation_id": "c", "customer_id": "u",
                                          "message_id": "big", "text": "好" * (svc.settings.max_text_chars + 1)})
    assert r.status_code == 413 and r.headers["content-type"].startswith(PROBLEM)
    r = client.post("/v1/messages", json={"channel": "web", "text": "hi"})
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM)
    assert rows(svc.pool, "SELECT count(*) AS n FROM messages")[0]["n"] == 0
