"""The README's console screenshots: a live gateway with sample tickets, photographed by chromium.

    python docs/console_screenshots.py   # docs/console-queue.png, console-ticket.png and their -zh twins

At 1280 x 800, English then Chinese; the script fails if the page scrolls sideways.

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

from psycopg.types.json import Jsonb

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "benchmarks"))

import console as bench  # noqa: E402

QUEUE = [  # (kind, priority, channel, text, reason, amount, team, name)
    ("handoff", "urgent", "wechat", "我的账户被盗了，快帮我冻结！", "account-security intent account_security", None, "general", "王磊"),
    ("handoff", "high", "web", "This is the third time my parcel is late. I want to complain.",
     "intent complaint is handled by a person", None, "general", "Emma Clark"),
    ("assist", "normal", "whatsapp", "I want my 800 yuan back for order 2024-5531", "refund of 800 CNY is over 500", 800,
     "general", "Li Na"),
    ("handoff", "normal", "web", "转人工", "the customer asked for a person (转人工)", None, "general", "陈静"),
    ("assist", "normal", "telegram", "How long does a refund to my card take?",
     "L1 could not answer: confidence 0.37 below the answer threshold 0.57", None, "general", None),
    ("assist", "normal", "wechat", "发票抬头写错了，能重开吗？", "intent invoice needs a reviewed answer", None, "billing", "赵敏"),
    ("handoff", "low", "sms", "Please call me back tomorrow about my contract", "2 dissatisfied turns in a row", None,
     "billing", "Tom Baker"),
    ("assist", "low", "web", "Can I pay with Alipay?", "intent payment_methods needs a reviewed answer", 30, "general", None),
]


def context_for(text: str, amount, name=None):
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
        "memory": {"profile": {"name": name, "customer_id": "cust-5531"} if name else None,
                   "orders": [{"order_id": "2024-5531", "status": "delivered", "total": 899.0, "currency": "CNY"}],
                   "outcomes": [{"kind": "flow", "workflow": "order_status", "outcome": "completed"}]},
        "customer": {"customer_id": "cust-5531", "order_numbers": ["2024-5531"],
                     "amounts": [{"value": amount, "currency": "CNY"}] if amount else [], "do_not_contact": False},
    }


def record_turns(conn, conv, channel: str, context: dict, kind: str, reason: str) -> None:
    """The turns the router would have stored for the transcript (decision and trace per customer message), so
    the ticket's "What the bot understood" reads as it does on a live conversation."""
    lines = [m for m in context["transcript"] if m["sender"] == "customer"]
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        msg = conn.execute("INSERT INTO messages (conversation_id, channel, external_id, direction, sender, text, "
                           "received_at) VALUES (%s, %s, %s, 'in', 'customer', %s, now() - interval '2 minutes') "
                           "RETURNING id",
                           (conv, channel, f"m-{uuid.uuid4().hex}", line["text"])).fetchone()["id"]
        if last:
            decision = context["decisions"][-1]["decision"]
            trace = {"ticket": {"kind": kind, "reason": reason, "priority": "normal"}}
            if kind == "assist":
                trace["rag"] = {"answered": False, "confidence": 0.41, "reason": "below the answer threshold",
                                "passages": []}
        else:
            decision = {"intent": "order_query", "tier": "L1", "confidence": 1.0, "channel": "rules"}
            trace = {"workflow": {"workflow": "order_status", "instance_id": None, "status": "waiting",
                                  "step": "ask_order", "awaiting": "order_id"}}
        conn.execute("INSERT INTO turns (conversation_id, message_id, state, decision, response, trace) "
                     "VALUES (%s, %s, %s, %s, '{}', %s)",
                     (conv, msg, "l2_assisting" if last else "l1_resolved", Jsonb(decision), Jsonb(trace)))


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
            for kind, prio, channel, text, reason, amount, team, name in QUEUE:
                with pool.connection() as conn, conn.transaction():
                    conv = conn.execute(
                        "INSERT INTO conversations (channel, external_id, customer_id, state) "
                        "VALUES (%s, %s, 'cust-5531', %s) RETURNING id",
                        (channel, f"shot-{uuid.uuid4().hex[:6]}", "l2_assisting" if kind == "assist" else "l3_queuing"),
                    ).fetchone()["id"]
                    record_turns(conn, conv, channel, context_for(text, amount, name), kind, reason)
                    t = svc.open_ticket(conn, kind=kind, conversation_id=str(conv), channel=channel,
                                        customer_id="cust-5531", reason=reason, priority=prio, team=team,
                                        amount=amount, currency="CNY" if amount else None,
                                        context=context_for(text, amount, name),
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
            for lang, suffix in (("en", ""), ("zh", "-zh")):
                page = browser.new_page(viewport={"width": 1280, "height": 800}, device_scale_factor=1,
                                        locale="zh-CN" if lang == "zh" else "en-GB")
                page.goto(f"{server.url}/console")
                page.evaluate(f"localStorage.setItem('switchboard.console.lang', '{lang}')")
                page.reload()
                page.get_by_label("Agent token").fill(token)
                page.get_by_role("button", name="Sign in").click()
                page.locator("#live[data-state=live]").wait_for()
                page.locator("#team-table tbody tr").first.wait_for()
                page.locator("#queue").scroll_into_view_if_needed()
                _no_sideways_scroll(page)
                page.screenshot(path=str(DOCS / f"console-queue{suffix}.png"), full_page=False)
                if lang == "en":
                    page.get_by_role("button", name=f"Claim ticket {focus[:8]}").click()
                    page.locator(f"#ticket[data-ticket='{focus}'][data-status=claimed]").wait_for()
                    page.get_by_label("Reply", exact=True).fill("Hello Li Na, your refund is being reviewed.")
                    page.get_by_role("button", name="Send").click()
                    page.locator("#outbox-rows tr").first.wait_for()
                    page.get_by_label("New internal note").fill("Order 2024-5531 delivered on time; check the photos.")
                    page.get_by_role("button", name="Add note").click()
                    page.locator("#notes li").first.wait_for()
                else:
                    page.get_by_role("button", name=f"Open ticket {focus[:8]}").click()
                    page.locator(f"#ticket[data-ticket='{focus}']").wait_for()
                page.evaluate("window.scrollTo(0, document.getElementById('ticket').getBoundingClientRect().top"
                              " + window.scrollY - 8)")
                _no_sideways_scroll(page)
                page.screenshot(path=str(DOCS / f"console-ticket{suffix}.png"), full_page=False)
                page.close()
            browser.close()
    finally:
        if server is not None:
            server.stop()
        bench.drop_database(admin, dsn)
        embedded.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {', '.join(str(DOCS / f'console-{v}{s}.png') for s in ('', '-zh') for v in ('queue', 'ticket'))}")


def _no_sideways_scroll(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    if width > 1280:
        raise SystemExit(f"the console scrolls sideways at 1280 px: {width} px wide")


if __name__ == "__main__":
    main()
