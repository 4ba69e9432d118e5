"""What agent screens show beyond the ticket row: the customer's language, and handling time per team."""

from __future__ import annotations

from handoff.tickets import customer_language
from handoff_testkit import bearer


def test_language_from_the_package_or_the_customers_latest_message():
    assert customer_language({"language": "ja", "transcript": [{"sender": "customer", "text": "hi"}]}) == "ja"
    assert customer_language({"customer": {"language": "en"}}) == "en"
    assert customer_language({"transcript": [{"sender": "customer", "text": "hello"},
                                             {"sender": "customer", "text": "退款什么时候到"},
                                             {"sender": "bot", "text": "one moment"}]}) == "zh"
    assert customer_language({"transcript": [{"sender": "customer", "text": "转人工"},
                                             {"sender": "customer", "text": "still waiting"}]}) == "en"
    assert customer_language({"transcript": [{"sender": "bot", "text": "你好"}]}) is None
    assert customer_language({}) is None and customer_language(None) is None


def test_listed_and_fetched_tickets_carry_the_language(api, make_agent, open_ticket):
    _, tok = make_agent("lan")
    zh = open_ticket(context={"transcript": [{"sender": "customer", "text": "我要转人工"}]})
    en = open_ticket(context={"transcript": [{"sender": "customer", "text": "a person please"}]})
    none = open_ticket(context={})
    items = {t["id"]: t for t in api.get("/v1/handoff/tickets", headers=bearer(tok)).json()["items"]}
    assert (items[zh["id"]]["language"], items[en["id"]]["language"], items[none["id"]]["language"]) == \
        ("zh", "en", None)
    assert api.get(f"/v1/handoff/tickets/{zh['id']}", headers=bearer(tok)).json()["language"] == "zh"


def test_stats_give_handling_time_per_team_for_closed_tickets(api, pool, make_agent, open_ticket):
    _, ana = make_agent("ana", teams=("general", "billing"))
    _, sue = make_agent("sue", role="supervisor")
    done = [open_ticket(team="billing"), open_ticket(team="billing"), open_ticket(team="general")]
    open_ticket(team="general")                       # still queued: not handled yet
    for t in done:
        assert api.post(f"/v1/handoff/tickets/{t['id']}/claim", headers=bearer(ana)).status_code == 200
    with pool.connection() as conn:                   # handled for 60 s, 120 s and 30 s
        for t, secs in zip(done, (60, 120, 30), strict=True):
            conn.execute("UPDATE tickets SET created_at = now() - make_interval(secs => %s + 10), "
                         "first_claimed_at = now() - make_interval(secs => %s) WHERE id = %s", (secs, secs, t["id"]))
    for t in done:
        r = api.post(f"/v1/handoff/tickets/{t['id']}/resolve", json={"outcome": "solved"}, headers=bearer(ana))
        assert r.status_code == 200
    rows = {r["team"]: r for r in api.get("/v1/handoff/stats", headers=bearer(sue)).json()["handling"]}
    assert set(rows) == {"billing", "general"}
    assert rows["billing"]["closed_24h"] == 2 and rows["general"]["closed_24h"] == 1
    assert 89 <= rows["billing"]["handle_seconds_avg"] <= 95 and 89 <= rows["billing"]["handle_seconds_p50"] <= 95
    assert 29 <= rows["general"]["handle_seconds_avg"] <= 35
    assert 9 <= rows["billing"]["wait_seconds_avg"] <= 11
    # an agent's stats cover their teams only
    _, bob = make_agent("bob", teams=("general",))
    mine = api.get("/v1/handoff/stats", headers=bearer(bob)).json()["handling"]
    assert [r["team"] for r in mine] == ["general"]
