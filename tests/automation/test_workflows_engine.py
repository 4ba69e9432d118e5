"""The flow engine on real parts: Postgres for the instances, the second shop over MCP stdio for the tools."""

from __future__ import annotations

import threading

import psycopg
from psycopg.rows import dict_row

from automation.tools.base import Caller
from automation.workflows import store
from automation.workflows.engine import FlowEngine

AVA = Caller(channel="web", customer_id="cus_ava", conversation_id="conv-ava")
BEN = Caller(channel="web", customer_id="cus_ben", conversation_id="conv-ben")


def writes(shop, tool=None):
    return [w for w in shop.shop("debug_dump")["writes"] if tool is None or w["tool"] == tool]


def returns_of(shop, order_ref):
    return shop.shop("debug_dump")["orders"][order_ref]["returns"]


def test_refund_of_30_executes_once_and_the_reply_states_the_real_result(engine, shop, turn):
    t = turn(engine.start, "return_items", AVA, "I want to return the garden hose from order W1003", {}, "en")
    assert t.status == "waiting" and t.awaiting == "line"      # order prefilled from the text, item asked
    t = turn(engine.advance, t.instance_id, AVA, "the garden hose", {}, "en")
    # the order was paid by card: refund to that card or the gift card
    assert t.awaiting == "refund_to" and len(t.quick_replies) == 2
    t = turn(engine.advance, t.instance_id, AVA, "the visa ending 4242", {}, "en")
    assert t.awaiting == "confirmation"
    assert t.pending_action == {"tool": "return_delivered_order_items",
                                "arguments": {"order_ref": "W1003", "line_ids": ["L2"], "refund_to": "card_visa_4242"},
                                "summary": "return Garden Hose, refund 30.00 USD"}
    assert t.as_response()["pending_action"]["tool"] == "return_delivered_order_items"
    assert writes(shop) == []                                    # nothing changed before the yes
    t = turn(engine.advance, t.instance_id, AVA, "yes", {}, "en")
    assert t.status == "completed" and t.approval is None        # 30 <= 50: auto tier
    assert "30.00 USD goes back to card_visa_4242" in t.reply
    assert [w["result"]["refund_amount"] for w in writes(shop)] == [30.0]
    assert returns_of(shop, "W1003") == [{"line_ids": ["L2"], "amount": 30.0, "refund_to": "card_visa_4242"}]
    # a late duplicate message changes nothing
    t2 = turn(engine.advance, t.instance_id, AVA, "yes", {}, "en")
    assert t2.status == "completed" and len(writes(shop)) == 1


def _to_approval(engine, turn, lang="en"):
    t = turn(engine.start, "return_items", AVA, "return my jacket, order W1004", {}, lang)
    # one item only: still asked, the choice is the customer's
    t = turn(engine.advance, t.instance_id, AVA, "1", {}, lang)
    t = turn(engine.advance, t.instance_id, AVA, "PayPal", {}, lang)
    assert t.awaiting == "confirmation", t.reply
    return turn(engine.advance, t.instance_id, AVA, "yes", {}, lang)


def test_300_waits_for_a_supervisor_survives_a_restart_and_resumes_exactly_once(
        second_shop_workflows, shop, approvals, turn, db):
    engine = FlowEngine(second_shop_workflows, shop.gateway, approvals)
    t = _to_approval(engine, turn)
    assert t.status == "waiting_approval"
    assert t.approval.tier == "supervisor" and t.approval.amount == 300.0 and t.approval.currency == "USD"
    assert t.approval.proposed_call == {"tool": "return_delivered_order_items",
                                        "arguments": {"order_ref": "W1004", "line_ids": ["L1"], "refund_to": "paypal_ava"}}
    assert t.approval.order == "W1004" and t.approval.evidence == {"items": ["Down Jacket"], "paid": 300.0}
    assert "supervisor review" in t.reply and writes(shop) == []
    ticket = approvals.requests[0][0]
    with db() as conn:
        assert store.by_ticket(conn, ticket)["status"] == "waiting_approval"

    # a restart: a new engine over freshly loaded workflows; the customer writes meanwhile
    restarted = FlowEngine(second_shop_workflows, shop.gateway, approvals)
    t2 = turn(restarted.advance, t.instance_id, AVA, "any news?", {}, "en")
    assert t2.status == "waiting_approval" and "still being reviewed" in t2.reply and writes(shop) == []

    # the approver and the customer act at the same moment; two approver clicks
    results, barrier = [], threading.Barrier(3)

    def approve():
        barrier.wait()
        results.append(turn(restarted.resolve_approval, t.instance_id, True, "sup-1", "ok"))

    def customer():
        barrier.wait()
        results.append(turn(restarted.advance, t.instance_id, AVA, "hello?", {}, "en"))

    threads = [threading.Thread(target=approve), threading.Thread(target=approve), threading.Thread(target=customer)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(writes(shop, "return_delivered_order_items")) == 1
    assert returns_of(shop, "W1004")[0]["amount"] == 300.0
    done = [r for r in results if r.status == "completed" and "300.00 USD goes back to paypal_ava" in r.reply]
    assert len(done) == 1
    assert sorted(r.outcome or "" for r in results if r is not done[0]).count("already_resolved") >= 1
    with db() as conn:
        row = store.get(conn, t.instance_id)
    assert row["status"] == "completed"
    assert [h["event"] for h in row["history"] if h.get("event") == "approval"] == ["approval"]


def test_a_rejection_follows_on_reject_with_reset(engine, shop, approvals, turn, db):
    t = _to_approval(engine, turn, lang="zh")
    assert t.status == "waiting_approval" and "审核" in t.reply
    r = turn(engine.resolve_approval, t.instance_id, False, "sup-1", "超出退货期")
    assert r.status == "waiting" and r.step == "pick_line" and r.awaiting == "line"
    assert "未通过审核（超出退货期）" in r.reply
    with db() as conn:
        row = store.get(conn, t.instance_id)
    assert "line" not in row["slots"] and "refund_to" not in row["slots"] and row["slots"]["order_ref"] == "W1004"
    assert writes(shop) == []
    # a second decision on the same ticket changes nothing
    again = turn(engine.resolve_approval, t.instance_id, True, "sup-2", "")
    assert again.outcome == "already_resolved" and writes(shop) == []


def test_a_tool_failure_never_yields_a_success_reply_and_the_key_is_stable_across_retries(engine, shop, turn):
    t = turn(engine.start, "return_items", AVA, "return the lamp from W1003", {}, "en")
    t = turn(engine.advance, t.instance_id, AVA, "desk lamp", {}, "en")
    t = turn(engine.advance, t.instance_id, AVA, "gift card", {}, "en")
    shop.shop("debug_fail", tool="return_delivered_order_items", times=2)
    t = turn(engine.advance, t.instance_id, AVA, "yes", {}, "en")
    assert t.status == "waiting" and "couldn't complete" in t.reply and "goes back" not in t.reply
    assert t.trace[-1].tool_status == "error"
    t = turn(engine.advance, t.instance_id, AVA, "please try again", {}, "en")
    assert t.status == "waiting" and "goes back" not in t.reply
    assert writes(shop) == []
    t = turn(engine.advance, t.instance_id, AVA, "again", {}, "en")
    assert t.status == "completed" and "45.00 USD goes back to gift_ava" in t.reply
    keys = [c["idempotency_key"] for c in shop.calls if c["tool"] == "return_delivered_order_items"]
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0] == f"flow:{t.instance_id}:do_return"
    assert len(writes(shop)) == 1


def test_three_failures_go_to_a_human_with_the_flow_state(engine, shop, turn):
    t = turn(engine.start, "return_items", AVA, "return the lamp from W1003", {}, "en")
    t = turn(engine.advance, t.instance_id, AVA, "desk lamp", {}, "en")
    t = turn(engine.advance, t.instance_id, AVA, "gift card", {}, "en")
    shop.shop("debug_fail", tool="return_delivered_order_items", times=5)
    for text in ("yes", "retry", "retry"):
        t = turn(engine.advance, t.instance_id, AVA, text, {}, "en")
    assert t.status == "escalated" and t.handoff.tier == "L2"
    assert "do_return failed 3 time(s)" in t.handoff.reason
    assert t.handoff.flow_state["slots"]["order_ref"] == "W1003" and t.handoff.flow_state["step"] == "do_return"
    assert "goes back" not in t.reply and writes(shop) == []


def test_a_replayed_turn_sends_the_same_key_and_the_shop_does_not_repeat(engine, shop, db, dsn):
    """A crash after the tool call but before the commit: the turn is run again from the saved state."""
    with db() as conn:
        t = engine.start(conn, "return_items", AVA, "return the hose from W1003", {}, "en")
        t = engine.advance(conn, t.instance_id, AVA, "hose", {}, "en")
        t = engine.advance(conn, t.instance_id, AVA, "visa", {}, "en")
        conn.commit()
    conn = psycopg.connect(dsn, row_factory=dict_row)
    engine.advance(conn, t.instance_id, AVA, "yes", {}, "en")
    conn.rollback()          # the turn died before its commit
    conn.close()
    with db() as conn2:
        t = engine.advance(conn2, t.instance_id, AVA, "yes", {}, "en")
        conn2.commit()
    assert t.status == "completed"
    keys = [c["idempotency_key"] for c in shop.calls if c["tool"] == "return_delivered_order_items"]
    assert len(keys) == 2 and keys[0] == keys[1]
    assert len(writes(shop, "return_delivered_order_items")) == 1
    assert returns_of(shop, "W1003") == [{"line_ids": ["L2"], "amount": 30.0, "refund_to": "card_visa_4242"}]


def test_drift_answers_elsewhere_and_asks_again_and_cancel_ends_politely(engine, shop, turn, db):
    t = turn(engine.start, "return_items", AVA, "I want to return something", {}, "en")
    assert t.awaiting == "order_ref" and "W1003" in t.reply and "W1004" in t.reply
    d = turn(engine.advance, t.instance_id, AVA, "what are your opening hours?", {}, "en",
             intent="faq_opening_hours", intent_confidence=0.92)
    assert d.drift and d.status == "waiting" and d.awaiting == "order_ref" and "Which order" in d.reply
    assert d.reasks == 1
    # a confident intent that still answers the question is not drift
    ok = turn(engine.advance, t.instance_id, AVA, "the one with the boots", {}, "en",
              intent="faq_shipping", intent_confidence=0.9)
    assert not ok.drift and ok.awaiting == "line"
    c = turn(engine.advance, t.instance_id, AVA, "算了", {}, "zh")
    assert c.status == "cancelled" and "已停止办理" in c.reply
    with db() as conn:
        assert engine.active(conn, AVA.conversation_id) is None
    assert writes(shop) == []


def test_an_ask_accepts_a_correction_of_an_earlier_answer(engine, shop, turn, db):
    t = turn(engine.start, "exchange_item", AVA, "exchange something", {}, "en")
    assert t.awaiting == "order_ref"          # W1003 and W1004 are both delivered
    t = turn(engine.advance, t.instance_id, AVA, "W1004", {}, "en")
    assert t.awaiting == "line" and "Down Jacket" in t.reply
    t = turn(engine.advance, t.instance_id, AVA, "不是这个，是W1003", {}, "zh")
    assert t.status == "waiting" and t.awaiting == "line" and "Hiking Boots" in t.reply
    with db() as conn:
        assert store.get(conn, t.instance_id)["slots"]["order_ref"] == "W1003"


def test_correction_of_a_filled_slot_at_the_confirmation_changes_the_plan_not_the_shop(engine, shop, turn):
    t = turn(engine.start, "return_items", AVA, "return the jacket from W1004", {}, "en")
    t = turn(engine.advance, t.instance_id, AVA, "jacket", {}, "en")
    t = turn(engine.advance, t.instance_id, AVA, "paypal", {}, "en")
    assert t.awaiting == "confirmation" and "W1004" in t.reply
    t = turn(engine.advance, t.instance_id, AVA, "no, not that order, I meant W1003", {}, "en")
    assert writes(shop) == []
    assert t.status == "waiting" and t.awaiting == "line" and "Garden Hose" in t.reply   # re-planned on W1003


def test_ask_accepts_a_correction_and_gives_up_after_three_tries(engine, shop, turn, db):
    t = turn(engine.start, "cancel_pending", BEN, "取消我所有待处理的订单", {}, "zh")
    assert t.awaiting == "reason" and "取消原因" in t.reply and t.quick_replies == ["no longer needed", "ordered by mistake"]
    t = turn(engine.advance, t.instance_id, BEN, "ordered by mistake, no wait, actually no longer needed", {}, "en")
    assert t.awaiting == "confirmation"
    with db() as conn:
        assert store.get(conn, t.instance_id)["slots"]["reason"] == "no longer needed"
    t2 = turn(engine.start, "cancel_pending", AVA, "cancel my pending orders", {}, "en")
    for text in ("hmm", "because", "dunno"):
        t2 = turn(engine.advance, t2.instance_id, AVA, text, {}, "en")
    assert t2.status == "escalated" and "reason" in t2.handoff.reason


def test_foreach_cancels_every_pending_order_after_one_summary_confirmation(engine, shop, turn):
    t = turn(engine.start, "cancel_pending", AVA, "cancel all my pending orders, I no longer need them", {}, "en")
    t = turn(engine.advance, t.instance_id, AVA, "no longer needed", {}, "en")
    assert t.awaiting == "confirmation" and "2 orders" in t.reply
    assert t.pending_action["arguments"] == {"order_ref": ["W1002", "W1001"], "reason": "no longer needed"}
    t = turn(engine.advance, t.instance_id, AVA, "yes", {}, "en")
    assert t.status == "completed"
    assert "Cancelled W1002, W1001; 395.00 USD will be refunded." in t.reply
    dump = shop.shop("debug_dump")
    assert dump["orders"]["W1001"]["status"] == "cancelled" and dump["orders"]["W1002"]["status"] == "cancelled"
    assert dump["orders"]["W1005"]["status"] == "processed"            # not pending: untouched
    keys = sorted(w["op_token"] for w in dump["writes"])
    assert keys == sorted([f"flow:{t.instance_id}:cancel_one:0", f"flow:{t.instance_id}:cancel_one:1"])


def test_foreach_with_one_confirmation_per_item(engine, shop, turn):
    t = turn(engine.start, "readdress_pending", AVA, "send my pending orders to my office", {}, "en")
    assert t.awaiting == "address"
    t = turn(engine.advance, t.instance_id, AVA, "office", {}, "en")
    assert t.awaiting == "confirmation" and "W1001" in t.reply    # W1002 already goes to the office
    t = turn(engine.advance, t.instance_id, AVA, "yes", {}, "en")
    assert t.status == "completed" and "Orders now going to San Francisco: W1001." in t.reply
    dump = shop.shop("debug_dump")
    assert dump["orders"]["W1001"]["ship_to"]["line2"] == "Suite 100"
    assert [w["tool"] for w in dump["writes"]] == ["modify_pending_order_address"]


def test_foreach_per_item_no_skips_that_item(engine, shop, turn):
    t = turn(engine.start, "readdress_pending", AVA, "change address", {}, "en")
    t = turn(engine.advance, t.instance_id, AVA, "1", {}, "en")     # home: Los Angeles
    assert "W1002" in t.reply
    t = turn(engine.advance, t.instance_id, AVA, "no", {}, "en")
    assert t.status == "completed" and t.reply == "OK, no order was changed."
    assert writes(shop) == []


def test_choose_by_number_id_and_description_and_ask_again_when_two_match(engine, shop, turn):
    t = turn(engine.start, "return_items", AVA, "return", {}, "en")
    by_desc = turn(engine.advance, t.instance_id, AVA, "the order with the boots", {}, "en")
    assert by_desc.awaiting == "line" and "Hiking Boots" in by_desc.reply
    c = turn(engine.cancel, t.instance_id, "en")
    assert c.status == "cancelled" and writes(shop) == []

    t = turn(engine.start, "exchange_item", AVA, "exchange", {}, "en")
    t = turn(engine.advance, t.instance_id, AVA, "W1003", {}, "en")          # by id
    assert t.awaiting == "line"
    t = turn(engine.advance, t.instance_id, AVA, "the boots", {}, "en")      # by description
    assert t.awaiting == "variant"
    t = turn(engine.advance, t.instance_id, AVA, "waterproof", {}, "en")     # two waterproof variants: ask again
    assert t.awaiting == "variant" and "Several match" in t.reply and "size 11" in t.reply and "size 12" in t.reply
    assert len(t.quick_replies) == 2 and t.reply.count("\n1. ") == 1 and "\n2. " in t.reply
    t = turn(engine.advance, t.instance_id, AVA, "size 12", {}, "en")
    assert t.awaiting == "pm_id"
    t = turn(engine.advance, t.instance_id, AVA, "2", {}, "en")              # by number: PayPal
    assert t.awaiting == "confirmation" and "15.00 USD" in t.reply
    assert t.pending_action["arguments"]["swaps"] == [{"line_id": "L1", "new_variant_id": "v_boots_waterproof_12"}]
    t = turn(engine.advance, t.instance_id, AVA, "yes", {}, "en")
    assert t.status == "completed" and "price difference 15.00 USD" in t.reply


def test_guard_refuses_by_policy_with_data_from_several_calls(engine, shop, turn):
    t = turn(engine.start, "exchange_item", AVA, "exchange the boots in W1003", {}, "en")
    t = turn(engine.advance, t.instance_id, AVA, "boots", {}, "en")
    t = turn(engine.advance, t.instance_id, AVA, "waterproof size 11", {}, "en")
    assert t.awaiting == "pm_id"
    shop_before = shop.shop("debug_dump")
    t = turn(engine.advance, t.instance_id, AVA, "gift card", {}, "en")   # balance 40 covers the 15 difference
    assert t.awaiting == "confirmation" and "15.00 USD" in t.reply
    assert shop.shop("debug_dump") == shop_before                          # nothing changed before the yes


def test_a_customer_cannot_touch_another_customers_order(engine, shop, turn):
    t = turn(engine.start, "return_items", BEN, "退货 W1003", {}, "zh")
    # W1003 is Ava's: it is not among Ben's orders, and the shop answers "not found" for it
    assert t.status in ("waiting", "escalated")
    assert "W1003" not in t.reply and "Hiking Boots" not in t.reply
    assert writes(shop) == []


def test_one_active_flow_per_conversation(engine, shop, turn):
    turn(engine.start, "cancel_pending", AVA, "cancel", {}, "en")
    try:
        turn(engine.start, "return_items", AVA, "return", {}, "en")
    except psycopg.errors.UniqueViolation:
        pass
    else:
        raise AssertionError("a second active flow was started")


BRANCHING = """
workflows:
  where_to:
    slots:
      order_ref: {validate: {entity: order_id, regex: "^W[0-9]{4}$"}, prompt: {zh: 订单号, en: Order number}}
    steps:
      - {id: ask_order, ask: order_ref}
      - id: load
        call: get_order_details
        args: {order_ref: slots.order_ref}
        bind: order
        next:
          - {when: 'order.status == "pending"', goto: pending}
          - {when: 'order.ship_to.city.startsWith("Los")', goto: la}
          - {goto: other}
      - {id: pending, reply: {zh: 待处理, en: "{{ order.order_ref }} is still pending"}, goto: finish}
      - {id: la, reply: {zh: 洛杉矶, en: "{{ order.order_ref }} went to {{ order.ship_to.city }}"}, goto: finish}
      - {id: other, reply: {zh: 其他, en: "{{ order.order_ref }} went elsewhere"}}
      - id: finish
        reply: {zh: 完, en: "{{ size(order.items) }} item(s)"}
        when: size(order.items) > 1
      - end: completed
"""


def test_transitions_and_step_conditions_in_cel(shop, approvals, turn):
    from automation.workflows.spec import parse_workflows

    engine = FlowEngine(parse_workflows(BRANCHING, file="branching.yaml", tools=shop.gateway), shop.gateway, approvals)
    assert turn(engine.start, "where_to", AVA, "W1001", {}, "en").reply == "W1001 is still pending\n2 item(s)"
    assert turn(engine.start, "where_to", Caller("web", "cus_ava", conversation_id="c2"), "W1004", {}, "en").reply \
        == "W1004 went to Los Angeles"
    assert turn(engine.start, "where_to", BEN, "W2001", {}, "en").reply == "W2001 went elsewhere"


def test_an_offer_waits_for_a_yes_then_runs_and_a_no_or_another_topic_starts_nothing(engine, shop, turn, db):
    """The task offered after an answer: read like any answer to the bot's own question; nothing runs before a yes."""
    t = turn(engine.offer, "return_items", AVA, "can I return the garden hose from order W1003?", {}, "en")
    assert t.status == "waiting" and t.awaiting == "offer" and t.reply == "" and t.quick_replies == ["Yes", "No"]
    with db() as conn:
        inst = engine.active(conn, AVA.conversation_id)
        assert engine.offered(inst) and inst["slots"].get("order_ref") == "W1003"   # the question's values kept
        assert engine.read(inst, "yes please") == "answer" and engine.read(inst, "是的") == "answer"
        assert engine.read(inst, "no thanks") == "cancel" and engine.read(inst, "不用了") == "cancel"
        assert engine.read(inst, "what payment methods do you accept?") == "digression"
        # what the task asks first, said instead of a yes, is a yes all the same; a confident other topic is not
        assert engine.read(inst, "the garden hose one") == "answer" and engine.read(inst, "W1003") == "answer"
        assert engine.read(inst, "my parcel is late", intent="payment_methods", intent_confidence=0.99) == "digression"
        # a cancel word in a question or in a request for another task is that, never a no to the offer; asking
        # for the offered task itself is a yes
        assert engine.read(inst, "can I cancel my order?", intent="cancel_order", intent_confidence=0.99) == "digression"
        assert engine.read(inst, "cancel my pending orders", intent="cancel_order", intent_confidence=0.99) == "digression"
        assert engine.read(inst, "never mind") == "cancel" and engine.read(inst, "算了") == "cancel"
        own = engine.workflows["return_items"].intents[0]
        assert engine.read(inst, "I want to return the garden hose", intent=own, intent_confidence=0.99) == "answer"
    y = turn(engine.advance, t.instance_id, AVA, "yes", {}, "en")
    assert y.status == "waiting" and y.awaiting == "line", y.reply           # the task itself now asks
    assert writes(shop) == []
    turn(engine.cancel, y.instance_id, "en")

    t = turn(engine.offer, "return_items", AVA, "how do returns work?", {}, "en")
    n = turn(engine.advance, t.instance_id, AVA, "no thanks", {}, "en")
    assert n.status == "cancelled" and n.outcome == "declined" and "won't start it" in n.reply

    t = turn(engine.offer, "return_items", AVA, "how do returns work?", {}, "en")
    with db() as conn:
        with conn.transaction():
            engine.lapse(conn, engine.active(conn, AVA.conversation_id))
        assert engine.active(conn, AVA.conversation_id) is None
        assert store.last(conn, AVA.conversation_id)["outcome"] == "lapsed"
    assert writes(shop) == []


def test_the_overview_of_a_conversations_flows_is_what_the_three_reads_give(engine, shop, turn, db):
    """A turn reads a conversation's active flow, its latest flow and their number once (store.overview): each
    part must be what store.active, store.last and a count give, whether the active flow is the latest or not."""

    def three(conn):
        n = conn.execute("SELECT count(*) AS n FROM flow_instances WHERE conversation_id = %s",
                         (AVA.conversation_id,)).fetchone()["n"]
        return store.active(conn, AVA.conversation_id), store.last(conn, AVA.conversation_id), n

    def same(conn):
        got, (active, last, n) = engine.overview(conn, AVA.conversation_id), three(conn)
        assert (got.active, got.last, got.count, got.new) == (active, last, n, False)
        return got

    with db() as conn:
        assert same(conn).count == 0
    first = turn(engine.offer, "return_items", AVA, "how do returns work?", {}, "en")
    with db() as conn:
        got = same(conn)
        assert got.active["id"] == got.last["id"] == first.instance_id and got.active is not got.last
    turn(engine.advance, first.instance_id, AVA, "no thanks", {}, "en")
    turn(engine.offer, "return_items", AVA, "how do returns work?", {}, "en")
    with db() as conn, conn.transaction():
        # the waiting flow made older than the cancelled one: the active flow is no longer the latest
        conn.execute("UPDATE flow_instances SET created_at = created_at - interval '1 hour' WHERE status = 'waiting'")
        got = same(conn)
        assert got.count == 2 and got.active["status"] == "waiting" and got.last["status"] == "cancelled"
