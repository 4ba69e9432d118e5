"""The queue list as an agent works it: views (mine / unassigned / all), search, filters by language and
channel, and what a row carries (customer name, last message, the reason in words), through the real app."""

from __future__ import annotations

from handoff_testkit import bearer

from handoff.reasons import reason_text

PROBLEM = "application/problem+json"


def _ids(r) -> list[str]:
    assert r.status_code == 200, r.text
    return [t["id"] for t in r.json()["items"]]


def _say(*texts: str) -> dict:
    return {"transcript": [{"sender": "customer", "text": t} for t in texts]}


def test_views_search_and_filters(api, make_agent, open_ticket, conversation):
    _, ana = make_agent("ana")
    _, ben = make_agent("ben")
    zh = open_ticket(context={**_say("我的包裹在哪里"), "memory": {"profile": {"name": "王小明"}}},
                     reason="intent complaint is handled by a person")
    en = open_ticket(context=_say("hello", "where is my parcel 100271?"), customer_id="u-77")
    wx = open_ticket(context=_say("发票"), conversation_id=conversation(channel="wechat"), channel="wechat")
    h = bearer(ana)
    assert api.post(f"/v1/handoff/tickets/{en['id']}/claim", headers=h).status_code == 200
    assert api.post(f"/v1/handoff/tickets/{wx['id']}/claim", headers=bearer(ben)).status_code == 200

    assert set(_ids(api.get("/v1/handoff/tickets", headers=h))) == {zh["id"], en["id"], wx["id"]}
    assert _ids(api.get("/v1/handoff/tickets", params={"view": "mine"}, headers=h)) == [en["id"]]
    assert _ids(api.get("/v1/handoff/tickets", params={"view": "unassigned"}, headers=h)) == [zh["id"]]
    assert _ids(api.get("/v1/handoff/tickets", params={"language": "zh"}, headers=h)) in (
        [zh["id"], wx["id"]], [wx["id"], zh["id"]])
    assert _ids(api.get("/v1/handoff/tickets", params={"language": "en"}, headers=h)) == [en["id"]]
    assert _ids(api.get("/v1/handoff/tickets", params={"channel": "wechat"}, headers=h)) == [wx["id"]]
    # search: the customer's words, the customer's name, the customer id, case-insensitive; % is literal
    assert _ids(api.get("/v1/handoff/tickets", params={"q": "PARCEL 100271"}, headers=h)) == [en["id"]]
    assert _ids(api.get("/v1/handoff/tickets", params={"q": "小明"}, headers=h)) == [zh["id"]]
    assert _ids(api.get("/v1/handoff/tickets", params={"q": "u-77"}, headers=h)) == [en["id"]]
    assert _ids(api.get("/v1/handoff/tickets", params={"q": "%"}, headers=h)) == []

    rows = {t["id"]: t for t in api.get("/v1/handoff/tickets", headers=h).json()["items"]}
    assert rows[zh["id"]]["customer_name"] == "王小明"
    assert rows[en["id"]]["last_message"] == "where is my parcel 100271?"
    assert rows[zh["id"]]["reason_text"] == {"en": "“complaint” requests are handled by a person",
                                             "zh": "“投诉”类请求由人工处理"}
    assert rows[zh["id"]]["reason"] == "intent complaint is handled by a person"   # the raw reason stays


def test_a_message_while_waiting_is_the_last_message(api, make_agent, open_ticket, hs, pool):
    _, ana = make_agent("ana")
    t = open_ticket(context=_say("I want a human"))
    with pool.connection() as conn, conn.transaction():
        hs.add_customer_message(conn, t["id"], "hello? anyone there?")
    row = api.get("/v1/handoff/tickets", headers=bearer(ana)).json()["items"][0]
    assert row["last_message"] == "hello? anyone there?"


def test_bad_query_parameters_are_problems(api, make_agent):
    _, ana = make_agent("ana")
    for params in ({"view": "everything"}, {"language": "Chinese!"}, {"channel": "Web Chat"}, {"q": "x" * 201},
                   {"q": "a\x00b"}, {"kind": "refund"}, {"priority": "asap"}):
        r = api.get("/v1/handoff/tickets", params=params, headers=bearer(ana))
        assert r.status_code == 422, (params, r.text)
        assert r.headers["content-type"].startswith(PROBLEM)


def test_reasons_read_as_sentences_in_both_languages():
    assert reason_text("L1 could not answer: confidence 0.37 below the answer threshold 0.57") == {
        "en": "The knowledge base had no confident answer", "zh": "知识库没有把握回答"}
    assert reason_text("refund: 200 CNY needs supervisor approval") == {
        "en": "refund of 200 CNY needs supervisor approval", "zh": "退款 200 CNY，需要主管审批"}
    assert reason_text("2 dissatisfied turns in a row")["zh"] == "客户连续 2 轮表示不满"
    assert reason_text("workflow change_address: step confirm failed 3 time(s): timeout")["en"] == (
        "The change address workflow got stuck and needs a person")
    assert reason_text("something new") == {"en": "something new", "zh": "something new"}   # honest fallback


def test_queue_position_of_a_waiting_conversation(pool, hs, make_agent, open_ticket, conversation):
    from handoff.queries import queue_position

    agent, _ = make_agent("ana")
    first = open_ticket()
    urgent = open_ticket(priority="urgent")
    mine = conversation()
    last = open_ticket(conversation_id=mine)
    open_ticket(team="billing", priority="urgent")            # another team's queue is not ahead
    with pool.connection() as conn:
        pos = queue_position(conn, mine)
        assert (pos["ticket_id"], pos["position"], pos["ahead"]) == (last["id"], 3, 2)
        assert pos["typical_wait_seconds"] is None             # nobody was picked up yet today
        assert queue_position(conn, urgent["conversation_id"])["position"] == 1
    hs.claim(agent, urgent["id"])
    hs.claim(agent, first["id"])
    with pool.connection() as conn:
        pos = queue_position(conn, mine)
        assert pos["position"] == 1 and pos["typical_wait_seconds"] >= 0
        assert queue_position(conn, urgent["conversation_id"]) is None    # claimed: not waiting in the queue
        assert queue_position(conn, conversation()) is None
