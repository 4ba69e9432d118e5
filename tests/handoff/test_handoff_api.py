"""The /v1/handoff API through the real gateway app: auth, teams, pagination, L2 decisions, messages."""

from __future__ import annotations

import pytest

from handoff_testkit import bearer, conversation_state, events_of

PROBLEM = "application/problem+json"


def _problem(r, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    body = r.json()
    assert body["status"] == status and body["title"] and body["detail"] and body["type"] == "about:blank"
    return body


def test_401_without_a_valid_token(api, pool, make_agent, open_ticket):
    from handoff import agents

    t = open_ticket()
    url = f"/v1/handoff/tickets/{t['id']}"
    r = api.get(url)
    assert _problem(r, 401) and r.headers["www-authenticate"].startswith("Bearer")
    _problem(api.get(url, headers={"Authorization": "Basic YTpi"}), 401)
    _problem(api.get(url, headers=bearer("sbt_not-a-real-token")), 401)
    ana, token = make_agent("ana")
    assert api.get(url, headers=bearer(token)).status_code == 200
    with pool.connection() as conn:
        agents.revoke_token(conn, token, actor="test")
    _problem(api.get(url, headers=bearer(token)), 401)
    _, token2 = make_agent("ben")
    with pool.connection() as conn:
        agents.disable_agent(conn, "ben", actor="test")
    _problem(api.post("/v1/handoff/claim-next", headers=bearer(token2)), 401)


def test_403_outside_your_teams(api, make_agent, open_ticket):
    _, bill = make_agent("bill", teams=("billing",))
    _, sue = make_agent("sue", role="supervisor")
    care = open_ticket(team="care")
    _problem(api.get(f"/v1/handoff/tickets/{care['id']}", headers=bearer(bill)), 403)
    _problem(api.post(f"/v1/handoff/tickets/{care['id']}/claim", headers=bearer(bill)), 403)
    _problem(api.get("/v1/handoff/tickets", params={"team": "care"}, headers=bearer(bill)), 403)
    _problem(api.post("/v1/handoff/claim-next", json={"team": "care"}, headers=bearer(bill)), 403)
    assert api.post("/v1/handoff/claim-next", headers=bearer(bill)).status_code == 204
    assert api.get("/v1/handoff/tickets", headers=bearer(bill)).json()["items"] == []
    r = api.post("/v1/handoff/claim-next", headers=bearer(sue))
    assert r.status_code == 200 and r.json()["id"] == care["id"]


def test_404_409_422_are_problems_never_500(api, make_agent, open_ticket):
    _, ana = make_agent("ana")
    _, ben = make_agent("ben")
    h = bearer(ana)
    _problem(api.get("/v1/handoff/tickets/00000000-0000-0000-0000-000000000000", headers=h), 404)
    _problem(api.get("/v1/handoff/tickets/not-a-uuid", headers=h), 422)
    _problem(api.get("/v1/handoff/tickets", params={"status": "lost"}, headers=h), 422)
    _problem(api.get("/v1/handoff/tickets", params={"cursor": "garbage!"}, headers=h), 422)
    t = open_ticket()
    assert api.post(f"/v1/handoff/tickets/{t['id']}/claim", headers=h).status_code == 200
    body = _problem(api.post(f"/v1/handoff/tickets/{t['id']}/claim", headers=bearer(ben)), 409)
    assert body["status_now"] == "claimed"
    _problem(api.post(f"/v1/handoff/tickets/{t['id']}/heartbeat", headers=bearer(ben)), 409)
    _problem(api.post(f"/v1/handoff/tickets/{t['id']}/transfer", json={}, headers=h), 422)
    _problem(api.post(f"/v1/handoff/tickets/{t['id']}/resolve", json={"outcome": "Not A Word"}, headers=h), 422)
    _problem(api.post(f"/v1/handoff/tickets/{t['id']}/messages", json={"text": "x", "extra": 1}, headers=h), 422)
    _problem(api.post(f"/v1/handoff/tickets/{t['id']}/messages", json={"text": "字" * 4001}, headers=h), 413)
    _problem(api.post(f"/v1/handoff/tickets/{t['id']}/approve", headers=h), 409)   # no draft on this ticket
    _problem(api.post(f"/v1/handoff/tickets/{t['id']}/cancel", json={"reason": "x"}, headers=h), 403)


def test_list_pages_with_a_cursor_in_queue_order(api, make_agent, open_ticket):
    _, sue = make_agent("sue", role="supervisor")
    made = [open_ticket(priority=p, kind=k)
            for p, k in [("low", "handoff"), ("urgent", "assist"), ("normal", "handoff"), ("high", "handoff"),
                         ("urgent", "handoff"), ("normal", "assist"), ("low", "assist")]]
    full = api.get("/v1/handoff/tickets", params={"limit": 100}, headers=bearer(sue)).json()
    assert full["next_cursor"] is None and len(full["items"]) == 7
    ranks = ["urgent", "high", "normal", "low"]
    keys = [(ranks.index(i["priority"]), i["sla_due_at"], i["created_at"]) for i in full["items"]]
    assert keys == sorted(keys)
    assert "context" not in full["items"][0]                    # lists stay light
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = api.get("/v1/handoff/tickets", params=params, headers=bearer(sue)).json()
        seen += [i["id"] for i in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and seen == [i["id"] for i in full["items"]]
    assert sorted(seen) == sorted(t["id"] for t in made)
    assist_urgent = api.get("/v1/handoff/tickets", params=[("kind", "assist"), ("priority", "urgent")],
                            headers=bearer(sue)).json()["items"]
    assert [i["id"] for i in assist_urgent] == [made[1]["id"]]
    both = api.get("/v1/handoff/tickets", params=[("priority", "low"), ("priority", "high")],
                   headers=bearer(sue)).json()["items"]
    assert {i["priority"] for i in both} == {"low", "high"} and len(both) == 3


def _outbox(pool, conversation_id) -> list[dict]:
    with pool.connection() as conn:
        return conn.execute(
            "SELECT o.kind, o.status, o.payload, m.sender, m.direction, m.text FROM outbox o "
            "JOIN messages m ON m.id = o.message_id WHERE o.conversation_id = %s ORDER BY o.id",
            (conversation_id,),
        ).fetchall()


def test_agent_message_is_stored_and_queued_once_per_idempotency_key(api, pool, make_agent, open_ticket,
                                                                     conversation):
    ana, token = make_agent("ana")
    conv = conversation()
    t = open_ticket(conversation_id=conv)
    h = bearer(token)
    claimed = api.post("/v1/handoff/claim-next", headers=h).json()
    assert claimed["id"] == t["id"] and claimed["context"]["transcript"]
    assert conversation_state(pool, conv) == "l3_connected"
    url = f"/v1/handoff/tickets/{t['id']}/messages"
    hello = {"text": "您好，我是客服小安，马上为您处理。"}
    r1 = api.post(url, json=hello, headers={**h, "Idempotency-Key": "m-1"})
    assert r1.status_code == 200 and r1.json()["replayed"] is False
    r2 = api.post(url, json=hello, headers={**h, "Idempotency-Key": "m-1"})
    assert r2.status_code == 200 and r2.headers["idempotent-replayed"] == "true"
    assert r2.json()["delivery"] == r1.json()["delivery"]
    rows = _outbox(pool, conv)
    assert len(rows) == 1
    assert rows[0]["kind"] == "agent_message" and rows[0]["status"] == "pending"
    assert rows[0]["sender"] == "agent" and rows[0]["direction"] == "out" and rows[0]["text"].startswith("您好")
    assert rows[0]["payload"]["agent_id"] == ana.id
    hb = api.post(f"/v1/handoff/tickets/{t['id']}/heartbeat", headers=h)
    assert hb.status_code == 200 and hb.json()["status"] == "claimed"
    done = api.post(f"/v1/handoff/tickets/{t['id']}/resolve", json={"outcome": "solved"}, headers=h)
    assert done.status_code == 200 and done.json()["status"] == "resolved"
    assert conversation_state(pool, conv) == "feedback_pending"
    _problem(api.post(url, json={"text": "late"}, headers=h), 409)     # the ticket is closed
    trail = api.get(f"/v1/handoff/tickets/{t['id']}/events", headers=h).json()["items"]
    assert [e["action"] for e in trail] == ["opened", "claimed", "agent_message", "resolved"]
    assert trail[2]["agent"] == "ana"


def test_approval_tiers_for_money(api, pool, make_agent, open_ticket, conversation):
    ana, ana_token = make_agent("ana")                                   # approval level: auto (<= 50)
    sue, sue_token = make_agent("sue", role="supervisor")                # supervisor (<= 500)
    conv = conversation(state="l2_assisting")
    draft = {"text": "已为您申请退款 300 元，3-5 个工作日到账。", "action": {"type": "refund", "amount": 300}}
    t = open_ticket(conversation_id=conv, kind="assist", draft=draft, amount=300, currency="CNY",
                    reason="refund_request")
    assert t["approval_level"] == "supervisor"
    base = f"/v1/handoff/tickets/{t['id']}"
    assert api.post(f"{base}/claim", headers=bearer(ana_token)).status_code == 200
    body = _problem(api.post(f"{base}/approve", headers=bearer(ana_token)), 403)
    assert body["required_level"] == "supervisor" and body["your_level"] == "auto"
    assert _outbox(pool, conv) == []                                     # nothing was sent
    r = api.post(f"{base}/transfer", json={"agent": "sue", "note": "needs approval"}, headers=bearer(ana_token))
    assert r.status_code == 200 and r.json()["claimed_by"] == sue.id
    ok = api.post(f"{base}/approve", headers=bearer(sue_token))  # the supervisor may approve 300
    assert ok.status_code == 200
    out = ok.json()
    assert out["ticket"]["status"] == "resolved" and out["ticket"]["approved_by"] == sue.id
    assert out["ticket"]["draft_status"] == "approved" and out["ticket"]["resolved_by"] == sue.id
    assert [r["text"] for r in _outbox(pool, conv)] == [draft["text"]]
    ev = events_of(pool, t["id"])[-1]
    assert ev["action"] == "approved" and ev["actor"] == "agent:sue"
    assert ev["payload"]["required_level"] == "supervisor" and ev["payload"]["action"]["type"] == "refund"
    assert conversation_state(pool, conv) == "feedback_pending"
    _problem(api.post(f"{base}/approve", headers=bearer(sue_token)), 409)   # not twice


def test_director_amounts_need_a_director(api, make_agent, open_ticket):
    _, mgr = make_agent("max", role="supervisor", approval_level="manager")
    _, dora = make_agent("dora", role="admin")                                 # admins default to director
    t = open_ticket(kind="assist", draft={"text": "ok"}, amount=2000.01, reason="refund_request")
    base = f"/v1/handoff/tickets/{t['id']}"
    api.post(f"{base}/claim", headers=bearer(mgr))
    assert _problem(api.post(f"{base}/approve", headers=bearer(mgr)), 403)["required_level"] == "director"
    api.post(f"{base}/transfer", json={"agent": "dora"}, headers=bearer(mgr))
    assert api.post(f"{base}/approve", headers=bearer(dora)).status_code == 200


def test_edit_and_send_and_reject(api, pool, make_agent, open_ticket, conversation):
    _, token = make_agent("ana")
    h = bearer(token)
    conv = conversation(state="l2_assisting")
    t = open_ticket(conversation_id=conv, kind="assist", draft={"text": "Your parcel arrives tomorrow."})
    api.post(f"/v1/handoff/tickets/{t['id']}/claim", headers=h)
    r = api.post(f"/v1/handoff/tickets/{t['id']}/edit-and-send",
                 json={"text": "Your parcel arrives tomorrow before noon."}, headers=h)
    assert r.status_code == 200 and r.json()["ticket"]["draft_status"] == "edited"
    assert r.json()["ticket"]["draft"]["final_text"].endswith("before noon.")
    assert [x["text"] for x in _outbox(pool, conv)] == ["Your parcel arrives tomorrow before noon."]
    ev = events_of(pool, t["id"])[-1]
    assert ev["payload"]["original"] == "Your parcel arrives tomorrow." and ev["action"] == "edited"

    conv2 = conversation(state="l2_assisting")
    t2 = open_ticket(conversation_id=conv2, kind="assist", draft={"text": "wrong answer"})
    base = f"/v1/handoff/tickets/{t2['id']}"
    api.post(f"{base}/claim", headers=h)
    _problem(api.post(f"{base}/reject", json={}, headers=h), 422)                  # a reason is required
    rej = api.post(f"{base}/reject", json={"reason": "cites the wrong policy"}, headers=h)
    assert rej.status_code == 200 and rej.json()["draft_status"] == "rejected" and rej.json()["status"] == "claimed"
    _problem(api.post(f"{base}/approve", headers=h), 409)
    assert _outbox(pool, conv2) == []
    api.post(f"{base}/messages", json={"text": "Here is the right answer."}, headers=h)
    back = api.post(f"{base}/return-to-bot", json={"note": "answered"}, headers=h)
    assert back.status_code == 200 and back.json()["status"] == "returned_to_bot"
    assert [e["payload"].get("reason") for e in events_of(pool, t2["id"]) if e["action"] == "rejected"] == [
        "cites the wrong policy"]


def test_stats_me_and_cancel(api, make_agent, open_ticket):
    _, bill = make_agent("bill", teams=("billing",))
    sue_agent, sue = make_agent("sue", role="supervisor", teams=("billing",))
    open_ticket(team="billing", priority="urgent")
    open_ticket(team="billing", kind="assist", draft={"text": "d"})
    care = open_ticket(team="care")
    me = api.get("/v1/handoff/me", headers=bearer(bill)).json()
    assert me["name"] == "bill" and me["teams"] == ["billing"] and me["role"] == "agent"
    s = api.get("/v1/handoff/stats", headers=bearer(bill)).json()
    assert s["queued"] == 2 and s["teams"] == ["billing"]
    assert s["queued_by_kind"] == {"handoff": 1, "assist": 1} and s["queued_by_team"] == {"billing": 2}
    assert s["oldest_wait_seconds"] >= 0 and s["overdue"] == 0
    all_ = api.get("/v1/handoff/stats", headers=bearer(sue)).json()
    assert all_["queued"] == 3 and all_["teams"] is None
    c = api.post(f"/v1/handoff/tickets/{care['id']}/cancel", json={"reason": "customer left"}, headers=bearer(sue))
    assert c.status_code == 200 and c.json()["status"] == "cancelled" and c.json()["resolved_by"] == sue_agent.id


def test_openapi_documents_the_queue(api, make_agent):
    assert api.get("/openapi.json").status_code == 401        # an agent token (or integration key) reads it
    _, token = make_agent("reader")
    spec = api.get("/openapi.json", headers=bearer(token)).json()
    paths = spec["paths"]
    for p in ("/v1/handoff/tickets", "/v1/handoff/claim-next", "/v1/handoff/tickets/{ticket_id}/approve",
              "/v1/handoff/stats", "/v1/handoff/events"):
        assert p in paths
    assert "AgentToken" in spec["components"]["securitySchemes"]
    assert "403" in paths["/v1/handoff/tickets/{ticket_id}/approve"]["post"]["responses"]


@pytest.mark.parametrize("path", ["/v1/handoff/tickets", "/v1/handoff/stats", "/v1/handoff/me"])
def test_every_read_needs_a_token(api, path):
    _problem(api.get(path), 401)


def test_wired_like_production_counts_in_metrics(services, make_agent, conversation, monkeypatch):
    """wire_handoff: the gateway's conversation port, the sweeper loop, and Prometheus series that move."""
    from fastapi.testclient import TestClient

    from router.app.factory import create_app
    from router.app.composition import wire_handoff

    monkeypatch.setenv("SWITCHBOARD_HANDOFF_SWEEP_INTERVAL_SECONDS", "0")   # sweeps driven by the test
    wire_handoff(services)
    svc = services.handoff
    _, token = make_agent("ana")
    conv = conversation(state="l3_queuing")
    with services.pool.connection() as conn, conn.transaction():
        svc.open_ticket(conn, kind="handoff", conversation_id=conv, channel="web", customer_id="u1",
                        reason="asks_for_human", context={})
        svc.open_ticket(conn, kind="assist", conversation_id=conversation(state="l2_assisting"), channel="web",
                        customer_id="u2", reason="refund_request", priority="high", context={},
                        draft={"text": "d"})
    with TestClient(create_app(services=services)) as client:
        assert svc.run_sweeps()["leader"] is True
        text = client.get("/metrics", headers=bearer(token)).text
        assert 'switchboard_queue_depth{kind="assist",priority="high"} 1.0' in text
        r = client.post("/v1/handoff/claim-next", json={"kind": "handoff"}, headers=bearer(token))
        assert r.status_code == 200
        svc.run_sweeps()
        text = client.get("/metrics", headers=bearer(token)).text
    assert 'switchboard_tickets_total{event="claimed",kind="handoff"} 1.0' in text
    assert 'switchboard_tickets_total{event="opened",kind="assist"} 1.0' in text
    assert 'switchboard_queue_depth{kind="handoff",priority="normal"} 0.0' in text
    with services.pool.connection() as conn:                          # the gateway's port moved the conversation
        assert conn.execute("SELECT state FROM conversations WHERE id = %s", (conv,)).fetchone()["state"] == \
            "l3_connected"
