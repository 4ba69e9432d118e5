"""The desk around a ticket through the real app: internal notes, tags, pending / on hold, macros per language
with variables, and the colleagues a ticket can be assigned to."""

from __future__ import annotations

from handoff_testkit import bearer, events_of

PROBLEM = "application/problem+json"


def _ok(r, status=200):
    assert r.status_code == status, r.text
    return r.json() if status != 204 else None


def test_notes_stay_internal_and_tags_filter_the_queue(api, make_agent, open_ticket, pool):
    _, ana = make_agent("ana")
    t, other = open_ticket(), open_ticket()
    h = bearer(ana)
    out = _ok(api.post(f"/v1/handoff/tickets/{t['id']}/notes", json={"text": "customer is a reseller"}, headers=h))
    assert out["action"] == "note"
    assert [e["payload"]["text"] for e in events_of(pool, t["id"]) if e["action"] == "note"] == [
        "customer is a reseller"]
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM outbox").fetchone()["n"] == 0

    tagged = _ok(api.post(f"/v1/handoff/tickets/{t['id']}/tags", json={"add": ["VIP", "refund", "vip"]}, headers=h))
    assert tagged["tags"] == ["vip", "refund"]
    tagged = _ok(api.post(f"/v1/handoff/tickets/{t['id']}/tags", json={"remove": ["refund"], "add": ["退款"]},
                          headers=h))
    assert tagged["tags"] == ["vip", "退款"]
    items = _ok(api.get("/v1/handoff/tickets", params={"tag": "VIP"}, headers=h))["items"]
    assert [i["id"] for i in items] == [t["id"]] and other["id"] != t["id"]
    assert [e["action"] for e in events_of(pool, t["id"])].count("tagged") == 2
    r = api.post(f"/v1/handoff/tickets/{t['id']}/tags", json={"add": ["no spaces please"]}, headers=h)
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM)
    r = api.post(f"/v1/handoff/tickets/{t['id']}/notes", json={"text": "   "}, headers=h)
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM)


def test_pending_clears_when_the_customer_writes_and_on_hold_filters(api, make_agent, open_ticket, hs, pool):
    _, ana = make_agent("ana")
    _, ben = make_agent("ben")
    t = open_ticket()
    h = bearer(ana)
    r = api.post(f"/v1/handoff/tickets/{t['id']}/hold", json={"hold": "pending"}, headers=h)
    assert r.status_code == 409                                    # claim first
    _ok(api.post(f"/v1/handoff/tickets/{t['id']}/claim", headers=h))
    assert api.post(f"/v1/handoff/tickets/{t['id']}/hold", json={"hold": "pending"},
                    headers=bearer(ben)).status_code == 409       # not the holder
    assert _ok(api.post(f"/v1/handoff/tickets/{t['id']}/hold", json={"hold": "pending"}, headers=h))["hold"] == "pending"
    assert [i["id"] for i in _ok(api.get("/v1/handoff/tickets", params={"hold": "pending"}, headers=h))["items"]] == [
        t["id"]]
    with pool.connection() as conn, conn.transaction():
        hs.add_customer_message(conn, t["id"], "here is the photo")
    assert _ok(api.get(f"/v1/handoff/tickets/{t['id']}", headers=h))["hold"] is None
    assert _ok(api.post(f"/v1/handoff/tickets/{t['id']}/hold", json={"hold": "on_hold"}, headers=h))["hold"] == "on_hold"
    assert _ok(api.get("/v1/handoff/tickets", params={"hold": "open"}, headers=h))["items"] == []
    assert api.post(f"/v1/handoff/tickets/{t['id']}/hold", json={"hold": "sleeping"}, headers=h).status_code == 422


def test_macros_fill_variables_in_the_customers_language(api, make_agent, open_ticket):
    _, ana = make_agent("ana")
    _, sue = make_agent("sue", role="supervisor")
    zh = open_ticket(context={"transcript": [{"sender": "customer", "text": "订单 100271 还没到"}],
                              "customer": {"order_numbers": ["100271"]}, "memory": {"profile": {"name": "王芳"}}})
    en = open_ticket(context={"transcript": [{"sender": "customer", "text": "where is it"}]})
    h = bearer(ana)
    names = {(m["name"], m["language"]) for m in _ok(api.get("/v1/handoff/macros", headers=h))["items"]}
    assert {("greeting", "en"), ("greeting", "zh"), ("ask_order", "zh")} <= names

    out = _ok(api.get(f"/v1/handoff/tickets/{zh['id']}/macros/greeting", headers=h))
    assert out == {"name": "greeting", "language": "zh", "text": "王芳您好，我是ana，正在为您处理。", "missing": []}
    out = _ok(api.get(f"/v1/handoff/tickets/{en['id']}/macros/greeting", headers=h))
    assert out["text"] == "Hello, this is ana. I am looking into this for you now." and out["missing"] == ["customer_name"]

    # a supervisor adds one with the order variable; an agent may not; an unknown variable is refused
    body = {"title": "Order on its way", "body": "{customer_name}，订单 {order} 已发货。"}
    assert api.put("/v1/handoff/macros/shipped/zh", json=body, headers=h).status_code == 403
    _ok(api.put("/v1/handoff/macros/shipped/zh", json=body, headers=bearer(sue)))
    out = _ok(api.get(f"/v1/handoff/tickets/{zh['id']}/macros/shipped", headers=h))
    assert out["text"] == "王芳，订单 100271 已发货。"
    r = api.put("/v1/handoff/macros/bad/en", json={"title": "x", "body": "Hi {password}"}, headers=bearer(sue))
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM)
    assert api.get(f"/v1/handoff/tickets/{en['id']}/macros/shipped", headers=h).status_code == 404   # no en, no zh fallback
    assert api.get(f"/v1/handoff/tickets/{en['id']}/macros/Bad Name", headers=h).status_code == 422
    _ok(api.delete("/v1/handoff/macros/shipped/zh", headers=bearer(sue)), 204)
    assert api.delete("/v1/handoff/macros/shipped/zh", headers=bearer(sue)).status_code == 404


def test_assign_to_a_named_colleague(api, make_agent, open_ticket):
    _, ana = make_agent("ana")
    make_agent("ben")
    make_agent("bea", teams=("billing",))
    t = open_ticket()
    names = [a["name"] for a in _ok(api.get("/v1/handoff/agents", headers=bearer(ana)))["items"]]
    assert names == ["ana", "ben"]
    _ok(api.post(f"/v1/handoff/tickets/{t['id']}/claim", headers=bearer(ana)))
    moved = _ok(api.post(f"/v1/handoff/tickets/{t['id']}/transfer", json={"agent": "ben"}, headers=bearer(ana)))
    assert moved["status"] == "claimed" and moved["claimed_by"] != _ok(api.get("/v1/handoff/me", headers=bearer(ana)))["id"]
