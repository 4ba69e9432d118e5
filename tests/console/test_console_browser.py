"""The agent console in a real browser against a live gateway: the scenarios an agent's day is made of."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import expect


def test_sign_in_live_queue_claim_transcript_reply_and_resolve(console, gateway):
    token = gateway.agent("ana")
    console.sign_in(token)
    expect(console.locator("#queue-empty")).to_be_visible()

    # a customer asks for a person: the ticket appears without a reload (the live stream)
    turn = gateway.customer_says("转人工", customer="cust-live")
    assert turn["ticket_id"], turn
    row = console.locator(f"#queue-rows li[data-ticket='{turn['ticket_id']}']")
    expect(row).to_be_visible()
    expect(row).to_contain_text("handoff")
    expect(row).to_contain_text("zh")           # the customer's language
    expect(row.locator(".sla")).to_have_text(re.compile(r"^\d+:\d\d"))

    # claim that ticket: its transcript and the decision's explanation (the rule that hit)
    row.get_by_role("button", name=f"Claim ticket {turn['ticket_id'][:8]}").click()
    ticket = console.locator(f"#ticket[data-ticket='{turn['ticket_id']}']")
    expect(ticket).to_be_visible()
    expect(console.get_by_role("list", name="Transcript", exact=True)).to_contain_text("转人工")
    console.get_by_text("Decisions and why").click()      # the raw trail is folded away until asked for
    decisions = console.get_by_role("list", name="Decisions", exact=True)
    expect(decisions).to_contain_text("Rule hit")
    expect(decisions).to_contain_text("human")
    assert gateway.ticket(turn["ticket_id"])["claimed_by"] is not None
    expect(row).to_contain_text("claimed (you)")
    expect(row.locator(".sla")).to_have_text("–")       # picked up: the pick-up deadline no longer runs

    # the lease is renewed while the ticket is on screen (6 s lease here: a heartbeat every 2 s)
    before = gateway.ticket(turn["ticket_id"])["lease_expires_at"]
    console.locator("body[data-heartbeats]").wait_for(state="attached")
    assert gateway.ticket(turn["ticket_id"])["lease_expires_at"] > before

    # a reply leaves through the customer's channel: the outbox row shows on the ticket
    console.get_by_label("Reply", exact=True).fill("您好，我是 Ana，马上为您处理。")
    console.get_by_role("button", name="Send").dblclick()     # both clicks carry one Idempotency-Key: sent once
    outbox = console.get_by_role("table", name="Outbox")
    expect(outbox.locator("tbody tr").filter(has_text="您好，我是 Ana")).to_have_count(1)
    expect(outbox.locator("tbody tr").filter(has_text="您好，我是 Ana")).to_contain_text("agent_message")
    assert [r["text"] for r in gateway.outbox() if r["kind"] == "agent_message"] == ["您好，我是 Ana，马上为您处理。"]
    expect(console.get_by_role("list", name="Transcript", exact=True)).to_contain_text("您好，我是 Ana")

    # the customer writes back while the agent holds the conversation: it shows up live
    gateway.customer_says("谢谢，订单号 12345", conversation=turn["external_conversation_id"], customer="cust-live")
    expect(console.get_by_role("list", name="Transcript", exact=True)).to_contain_text("订单号 12345")

    # resolve with an outcome: the ticket closes and leaves the queue
    console.get_by_label("Outcome").select_option("solved")
    console.get_by_role("button", name="Resolve").click()
    expect(ticket).to_have_attribute("data-status", "resolved")
    expect(row).to_have_count(0)
    closed = gateway.ticket(turn["ticket_id"])
    assert (closed["status"], closed["outcome"]) == ("resolved", "solved")


def test_claim_next_and_approve_an_l2_draft(console, gateway):
    ticket = gateway.open_assist(text="Where is my refund?", draft="Refunds to a card arrive within 5-7 working days.")
    console.sign_in(gateway.agent("ben"))
    expect(console.locator(f"#queue-rows li[data-ticket='{ticket['id']}']")).to_contain_text("assist")
    console.get_by_role("button", name="Claim next").click()
    view = console.locator(f"#ticket[data-ticket='{ticket['id']}']")
    expect(view).to_be_visible()
    expect(console.locator("#draft-text")).to_have_text("Refunds to a card arrive within 5-7 working days.")
    expect(console.get_by_role("list", name="Draft citations", exact=True)).to_contain_text("Refund timelines")
    expect(console.get_by_role("list", name="Evidence", exact=True)).to_contain_text("Card payments")
    console.get_by_text("Decisions and why").click()
    expect(console.get_by_role("list", name="Decisions", exact=True)).to_contain_text("where is my refund")   # a nearest example
    expect(console.get_by_role("list", name="Decisions", exact=True)).to_contain_text("0.880")               # and its score
    expect(console.get_by_label("Flow state")).to_contain_text("await_approval")           # the workflow's step
    expect(console.get_by_label("Flow state")).to_contain_text("issue_refund")             # and its proposed call

    console.get_by_role("button", name="Approve").click()
    expect(view).to_have_attribute("data-status", "resolved")
    expect(console.get_by_role("table", name="Outbox")).to_contain_text("Refunds to a card arrive within 5-7 working days.")
    row = gateway.ticket(ticket["id"])
    assert (row["draft_status"], row["status"]) == ("approved", "resolved")
    assert [r["text"] for r in gateway.outbox()] == ["Refunds to a card arrive within 5-7 working days."]


def test_reject_needs_a_reason_then_edit_and_send_is_refused_and_the_agent_transfers(console, gateway):
    ticket = gateway.open_assist(text="Can I get 30 back?", draft="Yes, 30 CNY will be refunded.", amount=30,
                                 currency="CNY")
    console.sign_in(gateway.agent("cai"))
    console.get_by_role("button", name="Claim next").click()
    expect(console.locator(f"#ticket[data-ticket='{ticket['id']}']")).to_be_visible()
    console.get_by_role("button", name="Reject").click()
    expect(console.get_by_role("alert", name="Notice")).to_contain_text("reason")
    assert gateway.ticket(ticket["id"])["draft_status"] == "pending"
    console.get_by_label("Reason for rejecting").fill("the order was never paid")
    console.get_by_role("button", name="Reject").click()
    expect(console.locator("#draft-status")).to_contain_text("rejected")
    expect(console.get_by_role("button", name="Approve")).to_be_disabled()
    assert gateway.ticket(ticket["id"])["draft_status"] == "rejected"

    gateway.agent("bea", teams=("billing",))            # transfers go only to a team someone works in
    console.get_by_label("Team to transfer to").fill("billing")
    console.get_by_role("button", name="Transfer").click()
    expect(console.locator(f"#queue-rows li[data-ticket='{ticket['id']}']")).to_have_count(0)
    row = gateway.ticket(ticket["id"])
    assert (row["team"], row["status"], row["claimed_by"]) == ("billing", "queued", None)


def test_an_approval_ticket_offers_no_resolve_or_return_to_bot(console, gateway):
    """An approval closes by a decision at its level or a cancel: Resolve and Return to bot are off, a note says
    why, and the server answers 409 to a client that calls them anyway (issue 34: resolve closed the approval
    and left the customer's flow waiting for ever)."""
    import uuid

    with gateway.pool.connection() as conn, conn.transaction():
        conv = conn.execute("INSERT INTO conversations (channel, external_id, customer_id, state) "
                            "VALUES ('web', %s, 'cust-3', 'idle') RETURNING id", (f"c-{uuid.uuid4().hex[:8]}",)
                            ).fetchone()
        ticket = gateway.handoff.open_ticket(
            conn, kind="approval", conversation_id=str(conv["id"]), channel="web", customer_id="cust-3",
            reason="refund: 300 CNY needs supervisor approval", amount=300, currency="CNY",
            context={"approval": {"workflow": "refund", "amount": 300, "currency": "CNY", "tier": "supervisor"}},
            draft={"text": None, "instance_id": str(uuid.uuid4()), "proposed_action": "request_refund 300 CNY"})
    token = gateway.agent("fay")
    console.sign_in(token)
    console.locator(f"#queue-rows li[data-ticket='{ticket['id']}']").get_by_role("button", name=re.compile("^Claim ticket")).click()
    expect(console.locator(f"#ticket[data-ticket='{ticket['id']}']")).to_be_visible()
    expect(console.get_by_role("button", name="Transfer")).to_be_enabled()
    expect(console.get_by_role("button", name="Resolve")).to_be_disabled()
    expect(console.get_by_role("button", name="Return to bot")).to_be_disabled()
    expect(console.locator("#close-approval")).to_be_visible()
    expect(console.locator("#close-approval")).to_contain_text("Approve or Reject")
    r = httpx.post(f"{gateway.url}/v1/handoff/tickets/{ticket['id']}/resolve", json={"outcome": "solved"},
                   headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 409 and r.json()["allowed"] == ["approve", "reject", "cancel"]
    assert gateway.ticket(ticket["id"])["status"] == "claimed"


def test_an_agent_below_the_level_needed_cannot_approve(console, gateway):
    ticket = gateway.open_assist(text="I want my 800 yuan back", draft="We will refund 800 CNY.", amount=800,
                                 currency="CNY", reason="refund above the automatic limit")
    token = gateway.agent("dan")            # an agent approves up to "auto" (<= 50)
    console.sign_in(token)
    row = console.locator(f"#queue-rows li[data-ticket='{ticket['id']}']")
    expect(row).to_contain_text("approval")
    row.get_by_role("button", name=f"Claim ticket {ticket['id'][:8]}").click()
    approval = console.get_by_label("Approval")
    expect(approval).to_contain_text("800")
    expect(approval).to_contain_text("CNY")
    expect(approval).to_contain_text("manager")
    expect(approval).to_contain_text("may not approve")
    expect(console.get_by_role("button", name="Approve")).to_be_disabled()
    expect(console.get_by_role("button", name="Edit", exact=True)).to_be_disabled()
    expect(console.locator("#edit-send")).to_be_disabled()
    # and the server refuses too, whatever a client does
    r = httpx.post(f"{gateway.url}/v1/handoff/tickets/{ticket['id']}/approve",
                   headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403 and r.json()["required_level"] == "manager"
    assert gateway.ticket(ticket["id"])["draft_status"] == "pending" and gateway.outbox() == []

    # a manager may: the same buttons work for them
    console.get_by_role("button", name="Sign out").click()
    console.sign_in(gateway.agent("eve", role="supervisor", approval_level="manager"))
    console.locator(f"#queue-rows li[data-ticket='{ticket['id']}']").get_by_role("button", name=re.compile("^Open ticket")).click()
    console.get_by_role("button", name="Claim", exact=True).click()
    expect(console.get_by_role("button", name="Approve")).to_be_enabled()
    console.get_by_role("button", name="Approve").click()
    expect(console.locator("#ticket")).to_have_attribute("data-status", "resolved")
    assert gateway.ticket(ticket["id"])["draft_status"] == "approved"


def test_return_to_bot_hands_the_conversation_back(console, gateway):
    turn = gateway.customer_says("I want to talk to a human")
    console.sign_in(gateway.agent("fay"))
    console.get_by_role("button", name="Claim next").click()
    view = console.locator(f"#ticket[data-ticket='{turn['ticket_id']}']")
    expect(view).to_be_visible()
    console.get_by_role("button", name="Return to bot").click()
    expect(view).to_have_attribute("data-status", "returned_to_bot")
    with gateway.pool.connection() as conn:
        state = conn.execute("SELECT state FROM conversations WHERE id = %s", (turn["conversation_id"],)).fetchone()
    assert state["state"] == "idle"


def test_a_revoked_token_is_signed_out(console, gateway):
    token = gateway.agent("gus")
    console.sign_in(token)
    assert console.evaluate("sessionStorage.getItem('switchboard.console.token')") == token
    gateway.revoke(token)
    console.get_by_role("button", name="Refresh queue").click()
    expect(console.get_by_label("Agent token")).to_be_visible()
    expect(console.get_by_role("alert", name="Notice")).to_contain_text("revoked")
    expect(console.get_by_role("button", name="Sign out")).to_be_hidden()
    assert console.evaluate("sessionStorage.getItem('switchboard.console.token')") is None
    # and the old token cannot sign in again
    console.get_by_label("Agent token").fill(token)
    console.get_by_role("button", name="Sign in").click()
    expect(console.get_by_role("alert", name="Notice")).to_contain_text("not accepted")


def test_switch_to_chinese_keeps_stable_accessible_names_and_sign_out_clears_the_token(console, gateway):
    console.sign_in(gateway.agent("hui", teams=("general", "care")))
    console.get_by_role("button", name="Claim next").click()             # nothing queued: said, with the teams
    expect(console.get_by_role("alert", name="Notice")).to_contain_text("Nothing to claim in your teams (general, care)")
    console.get_by_role("button", name="Language").click()
    expect(console.locator("html")).to_have_attribute("lang", "zh-CN")
    claim_next = console.get_by_role("button", name="Claim next")
    expect(claim_next).to_have_text("认领下一个")
    expect(console.get_by_role("button", name="Sign out")).to_have_text("退出登录")
    expect(console.get_by_label("Filter by priority")).to_contain_text("全部优先级")
    # the tab keeps the session and the language over a reload
    console.reload()
    expect(console.get_by_role("button", name="Claim next")).to_have_text("认领下一个")
    console.get_by_role("button", name="Sign out").click()
    expect(console.get_by_label("Agent token")).to_be_visible()
    assert console.evaluate("sessionStorage.getItem('switchboard.console.token')") is None
    console.get_by_role("button", name="Language").click()
    expect(console.get_by_role("button", name="Sign in")).to_have_text("Sign in")


def test_supervisors_see_depth_breaches_and_handling_time_per_team(console, gateway):
    gateway.open_assist(text="Where is my refund?", draft="Soon.")
    gateway.customer_says("转人工")
    console.sign_in(gateway.agent("ivy", role="supervisor"))
    panel = console.locator("#supervisor")
    expect(panel).to_be_visible()
    expect(console.locator("#st-queued")).to_have_text("2")
    expect(panel.locator("tr[data-team='general']")).to_contain_text("general")


def test_the_page_runs_under_its_content_security_policy(console, gateway):
    violations = []
    console.on("console", lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None)
    console.sign_in(gateway.agent("jo"))
    expect(console.get_by_role("button", name="Claim next")).to_be_visible()
    assert violations == []


def test_a_dropped_stream_reconnects_with_last_event_id(console, gateway):
    """The first stream ends after one event (as a dropped connection does); the console reconnects to the
    real stream with that event's id, and what happened while it was away still reaches the queue."""
    first = gateway.open_assist(text="Where is my refund?", draft="Soon.")
    with gateway.pool.connection() as conn:
        seen = conn.execute("SELECT max(id) AS id FROM ticket_events").fetchone()["id"]
    streams = []

    def stream(route):
        streams.append(route.request.headers.get("last-event-id"))
        if len(streams) == 1:
            body = (f"retry: 300\nevent: ready\ndata: {{}}\n\nid: {seen}\nevent: ticket\n"
                    f'data: {{"id": {seen}, "ticket_id": "{first["id"]}", "action": "opened"}}\n\n')
            route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body=body)
        else:
            route.continue_()

    console.route("**/v1/handoff/events*", stream)
    token = gateway.agent("kai")
    console.goto(f"{gateway.url}/console")
    console.get_by_label("Agent token").fill(token)
    with console.expect_request(lambda r: "/v1/handoff/events" in r.url and "last-event-id" in r.headers) as again:
        console.get_by_role("button", name="Sign in").click()
    assert streams[0] is None and again.value.headers.get("last-event-id") == str(seen)
    later = gateway.open_assist(text="And my invoice?", draft="Attached.")
    expect(console.locator(f"#queue-rows li[data-ticket='{later['id']}']")).to_be_visible()
    # and the reconnected stream is the live one: a new ticket shows without a reload
    newest = gateway.customer_says("转人工")
    expect(console.locator(f"#queue-rows li[data-ticket='{newest['ticket_id']}']")).to_be_visible()


def test_a_masked_value_is_revealed_for_a_reason_and_logged(console, gateway):
    """The transcript shows 138****5678; a supervisor reveals it for a reason and the ticket log records it.
    An agent without the permission gets no reveal button."""
    turn = gateway.customer_says("转人工，请打我电话 138 1234 5678", customer="cust-reveal")
    assert turn["ticket_id"], turn
    plain = gateway.agent("pat")
    console.sign_in(plain)
    row = console.locator(f"#queue-rows li[data-ticket='{turn['ticket_id']}']")
    row.get_by_role("button", name=f"Claim ticket {turn['ticket_id'][:8]}").click()
    transcript = console.get_by_role("list", name="Transcript", exact=True)
    expect(transcript).to_contain_text("138****5678")
    expect(transcript).not_to_contain_text("138 1234 5678")
    expect(transcript.locator("button.reveal")).to_have_count(0)

    console.get_by_role("button", name="Sign out").click()
    console.sign_in(gateway.agent("sam", role="supervisor"))
    console.locator(f"#queue-rows li[data-ticket='{turn['ticket_id']}']").get_by_role(
        "button", name=f"Open ticket {turn['ticket_id'][:8]}").click()
    transcript = console.get_by_role("list", name="Transcript", exact=True)
    console.once("dialog", lambda d: d.accept("customer asked for a call back"))
    transcript.get_by_role("button", name="Reveal 138****5678").click()
    expect(transcript).to_contain_text("138****5678 = 138 1234 5678")
    console.get_by_text("Ticket log", exact=True).click()
    expect(console.locator("#events")).to_contain_text("pii_revealed")
    expect(console.locator("#events")).to_contain_text("customer asked for a call back")
    expect(console.locator("#events")).not_to_contain_text("138 1234 5678")
