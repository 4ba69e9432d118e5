"""Deciding a refund approval from the console, on real parts: the bundled refund workflow asked for as a
customer does, the example shop over MCP stdio (its records in this test's database), the handoff queue,
and the page in Debian's chromium. The approval ticket has no draft text: the panel shows what is being
approved and the decision buttons follow the agent's approval level, not a draft."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect


def open_and_claim(page, ticket_id: str):
    row = page.locator(f"#queue-rows li[data-ticket='{ticket_id}']")
    row.get_by_role("button", name=f"Claim ticket {ticket_id[:8]}").click()
    expect(page.locator(f"#ticket[data-ticket='{ticket_id}'][data-status=claimed]")).to_be_visible()


def test_a_supervisor_approves_a_refund_and_the_shop_refunds_once(shop_console, shop_gateway):
    ticket = shop_gateway.refund_approval("conv-approve")
    assert (ticket["reason"], ticket["draft"]["text"]) == ("refund: 200 CNY needs supervisor approval", None)
    shop_console.sign_in(shop_gateway.agent("sam", role="supervisor", approval_level="supervisor"))
    open_and_claim(shop_console, str(ticket["id"]))

    # what is being approved: amount, order, the proposed call, the level, and what the customer asked
    panel = shop_console.get_by_label("Approval", exact=True)
    expect(panel.locator("#ap-amount")).to_have_text("Amount: 200 CNY")
    expect(panel.locator("#ap-level")).to_have_text("supervisor")
    details = shop_console.get_by_label("What is being approved")
    expect(details).to_contain_text("100230")
    expect(details).to_contain_text("request_refund(amount=200, reason=customer request, order_id=100230)")
    expect(details).to_contain_text("total 256 · status delivered · refunded so far 0")
    expect(details).to_contain_text("“我要退款” · “100230” · “退200元” · “是”")
    # the customer as the shop knows them, though the workflow opened this ticket without a package
    expect(shop_console.locator("#facts")).to_contain_text("王小明")
    expect(shop_console.locator("#facts")).to_contain_text("100230 delivered")
    # the transcript shows the request itself, not only the final "是"
    transcript = shop_console.get_by_role("list", name="Transcript", exact=True)
    expect(transcript).to_contain_text("我要退款")
    expect(transcript).to_contain_text("退200元")
    # the reason reads as a sentence, in the API too (reason_text) and in Chinese
    expect(shop_console.locator("#t-reason")).to_have_text("refund of 200 CNY needs supervisor approval")
    expect(shop_console.locator("#draft-box")).to_be_hidden()          # no empty draft with a dead button
    expect(shop_console.locator("#ap-refuse")).to_be_hidden()

    approve = shop_console.get_by_role("button", name="Approve")
    expect(approve).to_be_enabled()
    approve.dblclick()                      # one Idempotency-Key for both clicks: decided once
    expect(shop_console.locator("#ticket")).to_have_attribute("data-status", "resolved")
    expect(shop_console.get_by_role("alert", name="Notice")).to_contain_text("Approved")
    expect(shop_console.get_by_role("status", name="Decision")).to_contain_text("Approved by you")
    expect(shop_console.get_by_role("status", name="Decision")).to_contain_text("completed")
    expect(approve).to_be_hidden()

    refunds = shop_gateway.refunds("100230")
    assert [float(r["amount"]) for r in refunds] == [200.0], refunds
    row = shop_gateway.ticket(ticket["id"])
    assert (row["status"], row["draft_status"]) == ("resolved", "approved")
    assert shop_gateway.flow(ticket["id"])["status"] == "completed"
    # the customer is told through the outbox, and the agent sees that row on the ticket
    expect(shop_console.get_by_role("table", name="Outbox")).to_contain_text("200")


def test_below_the_level_the_buttons_say_why_and_a_supervisor_rejects(shop_console, shop_gateway):
    ticket = shop_gateway.refund_approval("conv-reject")
    tid = str(ticket["id"])

    # an agent (approval level auto) holds it: both buttons off, and the page says why, in both languages
    ana = shop_gateway.agent("ana")
    shop_console.sign_in(ana)
    open_and_claim(shop_console, tid)
    approve, reject = (shop_console.get_by_role("button", name=n, exact=True) for n in ("Approve", "Reject"))
    expect(approve).to_be_disabled()
    expect(reject).to_be_disabled()
    refuse = shop_console.locator("#ap-refuse")
    expect(refuse).to_be_visible()
    expect(refuse).to_contain_text("Needs a supervisor: your approval level is auto")
    expect(approve).to_have_accessible_description("Needs a supervisor: your approval level is auto. "
                                                   "Transfer the ticket to someone who may decide it.")
    shop_console.get_by_role("button", name="Language").click()
    expect(refuse).to_contain_text("需要主管审批：您的审批级别是 自动")
    expect(approve).to_have_text("批准")
    expect(shop_console.locator("#ap-level")).to_have_text("主管")
    expect(shop_console.get_by_label("What is being approved")).to_contain_text("拟调用工具")
    shop_console.get_by_role("button", name="Language").click()
    r = httpx.post(f"{shop_gateway.url}/v1/handoff/tickets/{tid}/release", headers={"Authorization": f"Bearer {ana}"})
    assert r.status_code == 200, r.text

    # a supervisor claims it and rejects, with a reason: nothing runs in the shop, the flow ends
    shop_console.get_by_role("button", name="Sign out").click()
    shop_console.sign_in(shop_gateway.agent("sam", role="supervisor", approval_level="supervisor"))
    open_and_claim(shop_console, tid)
    expect(reject).to_be_enabled()
    shop_console.get_by_label("Why reject (optional)").fill("已超过退款期限")
    reject.click()
    expect(shop_console.locator("#ticket")).to_have_attribute("data-status", "resolved")
    expect(shop_console.get_by_role("status", name="Decision")).to_contain_text("Rejected by you (已超过退款期限)")

    assert shop_gateway.refunds("100230") == []
    row = shop_gateway.ticket(tid)
    assert (row["status"], row["draft_status"], row["outcome"]) == ("resolved", "rejected", "rejected")
    flow = shop_gateway.flow(tid)
    # the refund workflow's answer to a rejection: the approval is recorded as refused, the amount is dropped
    # and the customer is told and asked again (shop.yaml: on_reject goto ask_amount)
    decision = [h for h in flow["history"] if h.get("event") == "approval"]
    assert [(h["approved"], h["reason"]) for h in decision] == [(False, "已超过退款期限")]
    assert (flow["status"], flow["step"], flow["slots"]) == ("waiting", "ask_amount", {"order_id": "100230"})
    assert shop_gateway.outbox()[-1]["text"].startswith("很抱歉，您的请求未通过审核。")
    expect(shop_console.get_by_role("status", name="Decision")).to_contain_text("waiting, ask_amount")
    expect(shop_console.get_by_role("table", name="Outbox")).to_contain_text("未通过审核")
