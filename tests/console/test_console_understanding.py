"""What the bot understood, one sentence per turn, on real parts: the bundled workflows over the example shop
(MCP stdio), the turns' stored traces and the audited tool calls, served by the console's API and shown in
the ticket's context panel in the agent's language, with the raw decision trail folded away below."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import psycopg
import pytest
from playwright.sync_api import expect

ROUTER_KITS = str(Path(__file__).resolve().parents[1] / "router")   # routing_kit: the routing tests' gateway


def _understood(g, tid, token) -> list[dict]:
    r = httpx.get(f"{g.url}/console/api/tickets/{tid}/understanding", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    return r.json()["items"]


def test_each_turn_in_a_sentence_and_an_action_only_once_the_shop_did_it(shop_gateway):
    g = shop_gateway
    # a refund over the automatic limit: waits for an approval, then the shop refunds
    ticket = g.refund_approval("conv-und-refund")
    sam = g.agent("sam", role="supervisor", approval_level="supervisor")
    items = _understood(g, ticket["id"], sam)
    assert [i["text"]["en"] for i in items] == [
        "asked to get a refund; waiting for the order number",
        "asked to get a refund for order 100230; waiting for the amount",
        "asked to get a refund for order 100230 (200.00 CNY); waiting for confirmation",
        "asked to get a refund for order 100230 (200.00 CNY); waiting for approval",
    ]
    assert items[-1]["text"]["zh"] == "要求退款（订单 100230），金额 200.00 CNY；等待审批"
    assert [i["said"] for i in items] == ["我要退款", "100230", "退200元", "是"]
    assert not any("done" in i["text"]["en"] for i in items)      # nothing ran before the approval

    h = {"Authorization": f"Bearer {sam}"}
    # the approval ticket, opened by the workflow, still shows the customer as the shop knows them (masked)
    r = httpx.get(f"{g.url}/console/api/tickets/{ticket['id']}/customer", headers=h)
    assert r.status_code == 200 and r.json()["source"] == "shop", r.text
    memory = r.json()["memory"]
    assert memory["profile"]["name"] == "王小明" and "****" in memory["profile"]["phone"]
    assert {"order_id": "100230", "status": "delivered"}.items() <= next(
        o for o in memory["orders"] if o["order_id"] == "100230").items()
    assert httpx.post(f"{g.url}/v1/handoff/tickets/{ticket['id']}/claim", headers=h).status_code == 200
    assert httpx.post(f"{g.url}/v1/handoff/tickets/{ticket['id']}/approve", headers=h).status_code == 200
    refund = g.refunds("100230")
    assert [float(r["amount"]) for r in refund] == [200.0]
    with g.pool.connection() as conn:
        record = conn.execute("SELECT output->>'refund_id' AS id FROM tool_calls WHERE tool = 'request_refund'"
                              ).fetchone()["id"]
    last = _understood(g, ticket["id"], sam)[-1]
    assert last["kind"] == "action"
    assert last["text"]["en"] == f"refund of 200.00 CNY on order 100230 done (shop record {record}) (after the approval)"
    assert last["text"]["zh"] == f"订单 100230 退款 200.00 CNY 已完成（商店记录 {record}）（审批通过后）"

    # the refund within the limit runs in the customer's own turn: said done with the shop's record
    for text in ("我要退款", "100230", "退20元"):
        g.customer_says(text, conversation="conv-und-small", customer="c1")
    turn = g.customer_says("是", conversation="conv-und-small", customer="c1")
    assert turn["flow"]["status"] == "completed", turn
    g.customer_says("转人工", conversation="conv-und-small", customer="c1")
    with g.pool.connection() as conn:
        tid = conn.execute("SELECT t.id FROM tickets t JOIN conversations c ON c.id::text = t.conversation_id "
                           "WHERE c.external_id = 'conv-und-small'").fetchone()["id"]
        record = conn.execute("SELECT output->>'refund_id' AS id FROM tool_calls WHERE tool = 'request_refund' "
                              "ORDER BY created_at DESC LIMIT 1").fetchone()["id"]
    texts = [i["text"]["en"] for i in _understood(g, tid, sam)]
    assert f"refund of 20.00 CNY on order 100230 done (shop record {record})" in texts
    assert texts[-1] == "the customer asked for a person: queued for a person"

    # another team's ticket is not readable, and a bad id is a problem document
    outsider = g.agent("olga", teams=("billing",))
    r = httpx.get(f"{g.url}/console/api/tickets/{tid}/understanding", headers={"Authorization": f"Bearer {outsider}"})
    assert r.status_code == 403 and r.headers["content-type"].startswith("application/problem+json")
    r = httpx.get(f"{g.url}/console/api/tickets/nope/understanding", headers=h)
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")


def test_the_panel_shows_the_sentences_in_the_agents_language(shop_console, shop_gateway):
    g = shop_gateway
    g.customer_says("我要修改收货地址", conversation="conv-und-addr", customer="c5")
    g.customer_says("上海市浦东新区世纪大道100号 1201室", conversation="conv-und-addr", customer="c5")
    tid = g.customer_says("转人工", conversation="conv-und-addr", customer="c5")["ticket_id"]
    page = shop_console
    page.set_viewport_size({"width": 1280, "height": 800})
    page.sign_in(g.agent("ann"))
    page.locator(f"#queue-rows li[data-ticket='{tid}']").get_by_role("button", name=f"Open ticket {tid[:8]}").click()
    panel = page.get_by_role("list", name="What the bot understood")
    expect(panel.locator("li")).to_have_count(3)
    expect(panel.locator("li").nth(1)).to_contain_text(
        "asked to change the address of order 100271; waiting for confirmation")
    expect(panel.locator("li").nth(1)).not_to_contain_text("1201")          # the address stays masked
    expect(panel.locator("li").nth(2)).to_contain_text("the customer asked for a person")
    # the raw trail is there, folded
    expect(page.locator("#dec-box")).not_to_have_attribute("open", "")
    expect(page.get_by_role("list", name="Decisions")).to_be_hidden()
    page.get_by_text("Decisions and why", exact=True).click()
    expect(page.get_by_role("list", name="Decisions")).to_be_visible()

    expect(page.locator("#reply-title")).to_have_text("Reply to the customer · 中文")
    expect(page.get_by_label("Reply", exact=True)).to_have_attribute("lang", "zh-CN")
    page.get_by_role("button", name="Language").click()
    expect(page.locator("#und-title")).to_have_text("机器人的理解")
    expect(panel.locator("li").nth(1)).to_contain_text("要求修改收货地址（订单 100271）；等待客户确认")
    expect(page.locator("#facts")).to_contain_text("100271 已付款")            # the shop's order status in words
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280


@pytest.mark.slow
def test_an_answer_from_the_knowledge_base_names_its_article(fresh_db, pg_server, template_dsn, e5_encoder):
    """On the production encoder and the bundled knowledge base (the routing tests' template, indexed once per
    run): an answered question names the article it came from and says it was cited."""
    if ROUTER_KITS not in sys.path:
        sys.path.insert(0, ROUTER_KITS)
    from routing_kit import api_client, kb_template, make_agent, routing_services

    _, uri = pg_server
    name, home, kb_dir = kb_template(uri, psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"], e5_encoder)
    svc = routing_services(fresh_db(name), home, e5_encoder, kb_dir)
    try:
        with api_client(svc) as client:
            for i, text in enumerate(("how long does a refund take to reach my card?", "转人工")):
                r = client.post("/v1/messages", json={"channel": "web", "conversation_id": "kb-1", "customer_id": "u1",
                                                      "message_id": f"kb-m{i}", "text": text})
                assert r.status_code == 200, r.text
            tid = r.json()["ticket_id"]
            _, token = make_agent(svc.pool, "kim")
            r = client.get(f"/console/api/tickets/{tid}/understanding", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        first = r.json()["items"][0]["text"]
        with svc.pool.connection() as conn:
            top = conn.execute(   # the passage the answer ranked first, as the turn's trace stored it
                "SELECT c.doc_id, c.title FROM turns t JOIN kb_chunks c "
                "ON c.chunk_id = t.trace->'rag'->'passages'->0->>'chunk_id' ORDER BY t.created_at LIMIT 1").fetchone()
        assert top["doc_id"] == "refund-timelines-en" and top["title"]
        assert first["en"] == f"answered from ‘{top['title']}’ (cited)", first
        assert first["zh"] == f"根据‘{top['title']}’作答（附引用）"
    finally:
        svc.close()
