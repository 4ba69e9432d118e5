"""An agent finishes what the bot could not, from the console, on real parts: the bundled change-address
workflow over the example shop (MCP stdio), stopped at its confirmation when the customer asked for a person;
the agent sees the pending action with its values (the address masked, revealed from the transcript under the
reveal policy and recorded), corrects the address, confirms once, and the shop shows the new address."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect

NEW = "上海市浦东新区世纪大道100号 1202室"


def _stopped_change_of_address(g, conversation: str) -> str:
    g.customer_says("我要修改收货地址", conversation=conversation, customer="c5")
    turn = g.customer_says("上海市浦东新区世纪大道100号 1201室", conversation=conversation, customer="c5")
    assert (turn["flow"] or {}).get("awaiting") == "confirmation", turn
    turn = g.customer_says("转人工", conversation=conversation, customer="c5")
    assert turn["ticket_id"], turn
    return turn["ticket_id"]


def _shop(g, order: str) -> dict:
    with g.pool.connection() as conn:
        return conn.execute("SELECT o.address, (SELECT count(*) FROM shop.writes w WHERE w.order_id = o.order_id "
                            "AND w.tool = 'change_address') AS writes FROM shop.orders o WHERE o.order_id = %s",
                            (order,)).fetchone()


def test_an_agent_completes_an_escalated_change_of_address(shop_console, shop_gateway):
    g = shop_gateway
    tid = _stopped_change_of_address(g, "conv-address")
    before = _shop(g, "100271")
    page = shop_console
    page.sign_in(g.agent("sam", role="supervisor"))
    page.locator(f"#queue-rows li[data-ticket='{tid}']").get_by_role("button", name=f"Claim ticket {tid[:8]}").click()
    expect(page.locator(f"#ticket[data-ticket='{tid}']")).to_have_attribute("data-status", "claimed")

    # the customer as the shop knows them, and the action the bot stopped at, with its values
    expect(page.locator("#facts")).to_contain_text("陈静")
    expect(page.locator("#facts")).to_contain_text("100271")
    form = page.get_by_label("Pending action")
    expect(form).to_be_visible()
    expect(page.get_by_label("change_address order_id")).to_have_value("100271")
    address = page.get_by_label("change_address address")
    expect(address).not_to_have_value("上海市浦东新区世纪大道100号 1201室")      # masked in the agent view
    expect(page.locator("#pa-masked")).to_contain_text("address")

    # the customer's words revealed from the transcript, for a reason, recorded in the ticket log
    transcript = page.get_by_role("list", name="Transcript", exact=True)
    page.once("dialog", lambda d: d.accept("typing the new address into the shop"))
    transcript.get_by_role("button", name="Reveal [address]").first.click()
    expect(transcript).to_contain_text("= 上海市浦东新区世纪大道100号 1201室")
    page.get_by_text("Ticket log", exact=True).click()
    expect(page.locator("#events")).to_contain_text("pii_revealed")

    # the agent corrects the room (the customer said 1202 on the phone) and confirms once (a double click)
    address.fill(NEW)
    page.get_by_role("button", name="Confirm for the customer").dblclick()
    result = page.get_by_role("status", name="Action result")
    expect(result).to_contain_text("do_change ok")
    expect(result).to_contain_text("地址已改为")
    expect(form).to_be_hidden()

    after = _shop(g, "100271")
    assert after["address"] == NEW and after["writes"] == before["writes"] + 1, (before, after)
    with g.pool.connection() as conn:
        call = conn.execute("SELECT turn_id, status FROM tool_calls WHERE tool = 'change_address'").fetchall()
        flow = conn.execute("SELECT status, outcome FROM flow_instances WHERE workflow = 'change_address'").fetchone()
        events = conn.execute("SELECT action, payload FROM ticket_events WHERE ticket_id = %s AND "
                              "action = 'action_completed'", (tid,)).fetchall()
    assert [(c["turn_id"], c["status"]) for c in call] == [("agent:sam", "ok")]      # under the agent's name
    assert (flow["status"], flow["outcome"]) == ("completed", "completed")
    assert len(events) == 1 and events[0]["payload"]["changed"] == ["address"]
    # the customer is told what the shop really did
    assert any("1202" in (r["text"] or "") for r in g.outbox() if r["kind"] == "reply")


def test_confirming_twice_or_a_bad_value_is_refused(shop_gateway):
    g = shop_gateway
    tid = _stopped_change_of_address(g, "conv-address-2")
    h = {"Authorization": f"Bearer {g.agent('ann')}"}
    pending = httpx.get(f"{g.url}/v1/handoff/tickets/{tid}/pending-action", headers=h).json()["pending"]
    assert pending["tool"] == "change_address" and pending["editable"] == ["address", "order_id"]
    assert pending["masked"] == ["address"]
    url = f"{g.url}/v1/handoff/tickets/{tid}/pending-action/confirm"
    body = {"instance_id": pending["instance_id"], "arguments": {}}
    assert httpx.post(url, json=body, headers=h).status_code == 409          # claim first
    assert httpx.post(f"{g.url}/v1/handoff/tickets/{tid}/claim", headers=h).status_code == 200
    bad = httpx.post(url, json={**body, "arguments": {"address": "x"}}, headers=h)
    assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem+json")
    assert httpx.post(url, json={**body, "arguments": {"colour": "red"}}, headers=h).status_code == 422
    assert _shop(g, "100271")["address"] != NEW
    ok = httpx.post(url, json=body, headers={**h, "Idempotency-Key": "k1"})
    assert ok.status_code == 200 and ok.json()["result"]["tools"] == [{"step": "do_change", "status": "ok"}]
    again = httpx.post(url, json=body, headers={**h, "Idempotency-Key": "k1"})
    assert again.status_code == 200 and again.headers.get("idempotent-replayed") == "true"
    assert httpx.post(url, json=body, headers={**h, "Idempotency-Key": "k2"}).status_code == 409
    assert _shop(g, "100271")["address"] == "上海市浦东新区世纪大道100号 1201室"     # the customer's own value kept
    assert httpx.get(f"{g.url}/v1/handoff/tickets/{tid}/pending-action", headers=h).json() == {"pending": None}
