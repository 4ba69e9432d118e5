"""The README's console screenshots: a live gateway with sample tickets, photographed by chromium.

    python docs/console_screenshots.py          # writes docs/console-queue.png and docs/console-ticket.png

The gateway is the benchmark's (``benchmarks/console.py``: the app with the queue wired as in production,
in its own process, on a scratch embedded Postgres); the tickets are opened through the service with the
context packages the router builds (transcript, decisions with their explanations, evidence, customer facts).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import uuid
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "benchmarks"))

import console as bench  # noqa: E402

QUEUE = [  # (kind, priority, channel, text, reason, amount, team)
    ("handoff", "urgent", "wechat", "我的账户被盗了，快帮我冻结！", "account_security", None, "general"),
    ("handoff", "high", "web", "This is the third time my parcel is late. I want to complain.", "complaint", None, "general"),
    ("assist", "normal", "whatsapp", "I want my 800 yuan back for order 2024-5531", "refund above the automatic limit", 800, "general"),
    ("handoff", "normal", "web", "转人工", "intent human_agent is handled by a person", None, "general"),
    ("assist", "normal", "telegram", "How long does a refund to my card take?", "intent refund_status needs a reviewed answer", None, "general"),
    ("assist", "normal", "wechat", "发票抬头写错了，能重开吗？", "L1 could not answer: no confident answer", None, "billing"),
    ("handoff", "low", "sms", "Please call me back tomorrow about my contract", "intent callback is handled by a person", None, "billing"),
    ("assist", "low", "web", "Can I pay with Alipay?", "intent payment_methods needs a reviewed answer", 30, "general"),
]


def context_for(text: str, amount):
    decision = {"intent": "refund_request", "tier": "L2", "confidence": 0.87, "channel": "embeddings",
                "explanation": {"method": "head", "candidate": "refund_request", "score": 0.87, "threshold": 0.55,
                                "runner_up": "order_status", "margin": 0.61, "nearest": [
                                    {"intent": "refund_request", "example": "I want my money back", "score": 0.912},
                                    {"intent": "refund_request", "example": "退款什么时候到账", "score": 0.874},
                                    {"intent": "order_status", "example": "where is my order", "score": 0.702}]},
                "escalation": {"rule": "amount_over_auto", "reason": "an amount above 50 needs approval",
                               "priority": "normal"}}
    if "转人工" in text or "盗" in text:
        decision = {"intent": "human_agent", "tier": "L3", "confidence": 1.0, "channel": "rules",
                    "explanation": {"channel": "rules", "rule": {"name": "human_agent", "pattern": "转人工|人工客服",
                                                                  "matched": "转人工"}},
                    "escalation": {"rule": "asks_for_human", "reason": "the customer asked for a person",
                                   "priority": "normal"}}
    return {
        "transcript": [{"direction": "in", "sender": "customer", "text": "Hi, I ordered a coat last week"},
                       {"direction": "out", "sender": "bot", "text": "Hello! How can I help with your order?"},
                       {"direction": "in", "sender": "customer", "text": text}],
        "decisions": [{"turn_id": None, "state": "l2_assisting", "decision": decision}],
        "evidence": [{"chunk_id": "refund-timelines-en#2", "doc_id": "refund-timelines-en", "score": 0.8123,
                      "title": "Refund timelines", "section": "Refunds above the automatic limit",
                      "source": "refund-timelines-en.md",
                      "text": "Refunds above 50 CNY are reviewed by a manager and paid back to the original payment "
                              "method within 5-7 working days."},
                     {"chunk_id": "return-process-en#0", "doc_id": "return-process-en", "score": 0.7411,
                      "title": "Returns", "section": "Starting a return", "source": "return-process-en.md",
                      "text": "Start a return from the order page within 30 days of delivery."}],
        "customer": {"customer_id": "cust-5531", "order_numbers": ["2024-5531"],
                     "amounts": [{"value": amount, "currency": "CNY"}] if amount else [], "do_not_contact": False},
    }


def main() -> None:
    from handoff import agents
    from router.db import EmbeddedPostgres, open_pool

    tmp = Path(tempfile.mkdtemp(prefix="sbshots-"))
    embedded = EmbeddedPostgres(tmp / "pg")
    admin = embedded.start()
    dsn = bench.fresh_database(admin)
    server = None
    try:
        with open_pool(dsn, min_size=1, max_size=2) as pool:
            svc = bench.handoff_service(pool)
            focus = None
            for kind, prio, channel, text, reason, amount, team in QUEUE:
                with pool.connection() as conn, conn.transaction():
                    conv = conn.execute(
                        "INSERT INTO conversations (channel, external_id, customer_id, state) "
                        "VALUES (%s, %s, 'cust-5531', %s) RETURNING id",
                        (channel, f"shot-{uuid.uuid4().hex[:6]}", "l2_assisting" if kind == "assist" else "l3_queuing"),
                    ).fetchone()["id"]
                    t = svc.open_ticket(conn, kind=kind, conversation_id=str(conv), channel=channel,
                                        customer_id="cust-5531", reason=reason, priority=prio, team=team,
                                        amount=amount, currency="CNY" if amount else None,
                                        context=context_for(text, amount),
                                        draft={"text": "We have approved a refund of 800 CNY to your original payment "
                                                       "method; it arrives within 5-7 working days.",
                                               "citations": [{"doc_id": "refund-timelines-en", "title": "Refund timelines",
                                                              "section": "Refunds above the automatic limit",
                                                              "score": 0.8123}],
                                               "proposed_action": "refund 800 CNY on order 2024-5531"}
                                        if kind == "assist" else None)
                if amount == 800:
                    focus = t["id"]
            with pool.connection() as conn, conn.transaction():
                agents.add_agent(conn, "mei", role="supervisor", teams=("general", "billing"), approval_level="supervisor",
                                 display_name="Mei Lin", actor="docs")
                token = agents.issue_token(conn, "mei", actor="docs")[0]
        server = bench.Server(dsn)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=bench.CHROMIUM, args=bench.CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1360, "height": 820}, device_scale_factor=1)
            page.goto(f"{server.url}/console")
            page.get_by_label("Agent token").fill(token)
            page.get_by_role("button", name="Sign in").click()
            page.locator("#live[data-state=live]").wait_for()
            page.locator("#team-table tbody tr").first.wait_for()
            page.screenshot(path=str(DOCS / "console-queue.png"), full_page=False)
            page.get_by_role("button", name=f"Claim ticket {focus[:8]}").click()
            page.locator(f"#ticket[data-ticket='{focus}']").wait_for()
            page.get_by_label("Reply", exact=True).fill("您好，退款已在审核中。")
            page.get_by_role("button", name="Send").click()
            page.locator("#outbox-rows tr").first.wait_for()
            page.locator("#ticket").scroll_into_view_if_needed()
            page.locator("#ticket").screenshot(path=str(DOCS / "console-ticket.png"))
            browser.close()
    finally:
        if server is not None:
            server.stop()
        bench.drop_database(admin, dsn)
        embedded.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {DOCS / 'console-queue.png'} and {DOCS / 'console-ticket.png'}")


if __name__ == "__main__":
    main()
