"""The bundled workflows (automation/workflows/samples/shop.yaml) on the example shop, through the real gateway."""

from __future__ import annotations

import pytest

from automation.tools import Caller
from automation.workflows.engine import FlowEngine
from automation.workflows.spec import load_workflows
from tool_servers import shop_dump


@pytest.fixture
def shop_engine(shop_gateway, approvals):
    return FlowEngine(load_workflows(None, tools=shop_gateway), shop_gateway, approvals)


C1 = Caller(channel="web", customer_id="c1", conversation_id="shop-c1")
C2 = Caller(channel="web", customer_id="c2", conversation_id="shop-c2")


def _order(dsn, order_id):
    return next(o for o in shop_dump(dsn)["orders"] if o["order_id"] == order_id)


def _refunds(dsn, order_id):
    return [w["result"]["amount"] for w in _order(dsn, order_id)["writes"] if w["tool"] == "request_refund"]


def test_bundled_workflows_load_against_the_example_shop_and_judge_risk(shop_gateway):
    ws = load_workflows(None, tools=shop_gateway)
    assert ws.names() == ["cancel_order", "change_address", "invoice", "order_status", "refund"]
    assert ws["refund"].risk == "money" and ws["order_status"].risk == "read"
    # the read of the order feeds the refund: judged at the refund's risk
    assert ws["refund"].call_risk["load"] == "money" and ws["change_address"].call_risk["load"] == "write"
    assert ws.for_intent("invoice").name == "invoice"


def test_order_status_from_the_tool_in_the_customers_language(shop_engine, turn):
    t = turn(shop_engine.start, "order_status", C1, "我的订单100234到哪了", {}, "zh")
    assert t.status == "completed"
    assert t.reply == "订单 100234 当前状态：已发货，承运商 顺丰速运，运单号 SF1402837465299。"
    t = turn(shop_engine.start, "order_status", C2, "where is my order?", {}, "en")
    assert t.status == "waiting" and t.awaiting == "order_id" and "100241" in t.reply   # recent orders listed
    t = turn(shop_engine.advance, t.instance_id, C2, "the boots", {}, "en")
    assert t.status == "completed" and "Order 100241 is shipped, carrier FedEx, tracking number 794644790138." == t.reply


def test_another_customers_order_reveals_nothing(shop_engine, turn, dsn):
    """Another customer's order is not found: nothing of it is shown, and the customer is asked which of
    their own orders they mean (never one picked for them); the third number the shop does not know ends it."""
    t = turn(shop_engine.start, "refund", C2, "refund 30 for order 100234", {}, "en")
    assert t.status == "waiting" and t.awaiting == "order_id", t
    assert t.reply.startswith("I couldn't find order 100234.\nWhich order should be refunded?") and "100240" in t.reply
    assert "100234" not in t.reply.split("Which order")[1]
    t = turn(shop_engine.advance, t.instance_id, C2, "100299", {}, "en")
    assert t.status == "waiting" and "I couldn't find order 100299." in t.reply
    t = turn(shop_engine.advance, t.instance_id, C2, "100298", {}, "en")
    assert t.status == "completed" and t.outcome == "refused" and t.reply == "I couldn't find order 100298."
    assert _refunds(dsn, "100234") == []


def test_refund_of_30_auto_and_300_at_supervisor_on_the_example_shop(shop_engine, turn, dsn, approvals):
    t = turn(shop_engine.start, "refund", C1, "订单100234退款30元", {}, "zh")
    assert t.awaiting == "confirmation" and t.pending_action["arguments"] == {
        "order_id": "100234", "amount": 30.0, "reason": "customer request"}
    t = turn(shop_engine.advance, t.instance_id, C1, "确认", {}, "zh")
    assert t.status == "completed" and t.reply.startswith("已为订单 100234 退款 30.00 CNY")
    assert _refunds(dsn, "100234") == [30.0]

    t = turn(shop_engine.start, "refund", C1, "refund 300 for order 100234", {}, "en")
    t = turn(shop_engine.advance, t.instance_id, C1, "yes", {}, "en")
    assert t.status == "waiting_approval" and t.approval.tier == "supervisor" and t.approval.currency == "CNY"
    assert _refunds(dsn, "100234") == [30.0]
    t = turn(shop_engine.resolve_approval, t.instance_id, True, "sup", "ok")
    assert t.status == "completed" and "Refunded 300.00 CNY for order 100234 (330.00 refunded in total)." in t.reply
    assert _refunds(dsn, "100234") == [30.0, 300.0]


def test_refund_above_what_is_left_is_refused_and_asked_again(shop_engine, turn):
    t = turn(shop_engine.start, "refund", C1, "refund 900 for order 100234", {}, "en")
    assert t.status == "waiting" and t.awaiting == "amount" and "At most 638.00 CNY" in t.reply


@pytest.mark.parametrize("lang, start, whole, says", [
    ("zh", "订单100230要退款", "全部退了吧", "最多可退 256.00 CNY"),
    ("en", "I want a refund for order 100230", "the full amount please", "Up to 256.00 CNY"),
])
def test_all_of_it_is_the_amount_left_to_refund(shop_engine, turn, dsn, lang, start, whole, says):
    """"How much?" - "all of it": the slot's ``whole`` (what is left of the order) is the amount, never a guess
    from the words; after a partial refund it is what remains."""
    first, partial, later = (Caller("web", "c1", f"shop-c1-{i}") for i in range(3))
    t = turn(shop_engine.start, "refund", first, start, {}, lang)
    assert t.awaiting == "amount" and says in t.reply, t.reply
    t = turn(shop_engine.advance, t.instance_id, first, whole, {}, lang)
    assert t.awaiting == "confirmation" and t.pending_action["arguments"]["amount"] == 256.0, t.reply
    t = turn(shop_engine.start, "refund", partial, "refund 6 for order 100230", {}, "en")
    t = turn(shop_engine.advance, t.instance_id, partial, "yes", {}, "en")
    assert _refunds(dsn, "100230") == [6.0], t.reply
    t = turn(shop_engine.start, "refund", later, start, {}, lang)
    t = turn(shop_engine.advance, t.instance_id, later, whole, {}, lang)
    assert t.pending_action["arguments"]["amount"] == 250.0, t.reply
    t = turn(shop_engine.advance, t.instance_id, later, "一半" if lang == "zh" else "half", {}, lang)
    assert _refunds(dsn, "100230") == [6.0]           # a confirmation not given writes nothing


def test_change_address_only_before_shipping_and_with_confirmation(shop_engine, turn, dsn):
    t = turn(shop_engine.start, "change_address", C1, "change the address of 100234", {}, "en")
    assert t.status == "completed" and "already shipped" in t.reply
    t = turn(shop_engine.start, "change_address", C1, "修改订单100235的地址", {}, "zh")
    assert t.awaiting == "address"
    t = turn(shop_engine.advance, t.instance_id, C1, "上海市浦东新区世纪大道100号", {}, "zh")
    assert t.awaiting == "confirmation" and t.pending_action["tool"] == "change_address"
    t = turn(shop_engine.advance, t.instance_id, C1, "是的", {}, "zh")
    assert t.status == "completed" and "上海市浦东新区世纪大道100号" in t.reply
    assert _order(dsn, "100235")["address"] == "上海市浦东新区世纪大道100号"


@pytest.mark.parametrize("caller, lang, request_, order, address", [
    (C2, "en", "please change the address of the hose order to 12 Baker Street, London NW1 6XE", "100242",
     "12 Baker Street, London NW1 6XE"),
    (C2, "en", "I moved, can you ship order 100242 to 21 Oak Road, Portland, OR 97201 instead?", "100242",
     "21 Oak Road, Portland, OR 97201"),
    (C1, "zh", "把订单100235的地址改成上海市浦东新区世纪大道100号吧", "100235", "上海市浦东新区世纪大道100号"),
])
def test_a_new_address_said_in_the_request_is_not_asked_for_again(shop_engine, turn, dsn, caller, lang, request_,
                                                                  order, address):
    """The customer gives the new address in the request itself: the flow goes straight to confirming that
    address (a later "no" asks for it again), and the change is made with exactly it."""
    caller = Caller(channel="web", customer_id=caller.customer_id, conversation_id=f"said-{order}-{len(request_)}")
    t = turn(shop_engine.start, "change_address", caller, request_, {}, lang)
    assert t.awaiting == "confirmation", t.reply
    assert t.pending_action["arguments"] == {"order_id": order, "address": address}, t.pending_action
    t = turn(shop_engine.advance, t.instance_id, caller, "yes" if lang == "en" else "是的", {}, lang)
    assert t.status == "completed" and _order(dsn, order)["address"] == address


def test_an_address_change_without_an_address_still_asks_for_it(shop_engine, turn):
    for n, request_ in enumerate(("can you change the address on order 100242",
                                  "I need to change the address for 2 items", "change my address from 12 Baker Street",
                                  "please change my address to 5 Lamp Street, Springfield, IL 62701")):
        who = Caller(channel="web", customer_id="c2", conversation_id=f"unsaid-{n}")
        t = turn(shop_engine.start, "change_address", who, request_, {}, "en")
        assert t.awaiting in ("address", "confirmation"), t.reply
        if t.awaiting == "confirmation":     # an address said, even the old one: confirmed before anything changes
            assert t.pending_action["arguments"]["address"] in ("12 Baker Street", "5 Lamp Street, Springfield, IL 62701")
            assert t.pending_action["arguments"]["order_id"] == "100242"      # a "Lamp Street" names no lamp order
    t = turn(shop_engine.start, "change_address", Caller(channel="web", customer_id="c1", conversation_id="unsaid-zh"),
             "我想把订单100235的地址改一下", {}, "zh")
    assert t.awaiting == "address"


@pytest.mark.parametrize("request_", ["我买的不粘锅涂层掉了，想退一部分钱", "不粘锅坏了，退款", "帮我退不粘锅那单"])
def test_an_item_whose_name_opens_with_a_negation_character_is_named_not_denied(shop_engine, turn, request_):
    """"不粘锅" (a non-stick pan) opens with 不: the request names that order; it is no "粘锅" denied."""
    who = Caller(channel="web", customer_id="c5", conversation_id=f"pan-{len(request_)}")
    t = turn(shop_engine.start, "refund", who, request_, {}, "zh")
    assert t.awaiting == "amount" and "100270" in t.reply, t.reply


def test_an_invoice_title_and_tax_id_said_in_the_request_are_not_asked_for_again(shop_engine, turn, dsn):
    """The title (and the tax id) named in the request ("company name ...", "抬头是…，税号…") fill their slots: the
    flow asks only what is still missing, and the invoice carries exactly those words."""
    who = Caller(channel="web", customer_id="c1", conversation_id="named-zh")
    t = turn(shop_engine.start, "invoice", who, "订单100230开发票，抬头是杭州某某科技有限公司，税号91330100MA2XXXXX1A", {}, "zh")
    assert t.awaiting == "confirmation" and "杭州某某科技有限公司" in t.reply and "91330100MA2XXXXX1A" in t.reply, t.reply
    t = turn(shop_engine.advance, t.instance_id, who, "好的", {}, "zh")
    assert t.status == "completed" and "杭州某某科技有限公司" in t.reply
    who = Caller(channel="web", customer_id="c2", conversation_id="named-en")
    t = turn(shop_engine.start, "invoice", who, "I need an invoice for the lamp order, company name Acme Trading Ltd",
             {}, "en")
    assert t.awaiting == "tax_id", t.reply                 # the title is in hand: only the tax id is asked
    t = turn(shop_engine.advance, t.instance_id, who, "none", {}, "en")
    assert t.awaiting == "confirmation" and "Acme Trading Ltd" in t.reply, t.reply
    who = Caller(channel="web", customer_id="c1", conversation_id="named-none")
    t = turn(shop_engine.start, "invoice", who, "订单100234开发票，要公司抬头的", {}, "zh")
    assert t.awaiting == "title", t.reply                  # named, but nothing said after it: asked


def test_invoice_with_optional_tax_id(shop_engine, turn, dsn):
    t = turn(shop_engine.start, "invoice", C1, "订单100230开发票", {}, "zh")
    t = turn(shop_engine.advance, t.instance_id, C1, "杭州某某科技有限公司", {}, "zh")
    t = turn(shop_engine.advance, t.instance_id, C1, "12345", {}, "zh")          # not a tax id: asked again
    assert t.awaiting == "tax_id" and "15 到 20 位" in t.reply
    t = turn(shop_engine.advance, t.instance_id, C1, "91330100MA2XXXXX1A", {}, "zh")
    assert t.awaiting == "confirmation" and "税号 91330100MA2XXXXX1A" in t.reply
    t = turn(shop_engine.advance, t.instance_id, C1, "好的", {}, "zh")
    assert t.status == "completed" and "杭州某某科技有限公司" in t.reply and "256.00 CNY" in t.reply


def test_cancel_only_before_shipping(shop_engine, turn, dsn):
    t = turn(shop_engine.start, "cancel_order", C2, "cancel order 100241", {}, "en")
    assert t.outcome == "refused" and "can no longer be cancelled" in t.reply
    t = turn(shop_engine.start, "cancel_order", C2, "cancel order 100242", {}, "en")
    t = turn(shop_engine.advance, t.instance_id, C2, "yes please", {}, "en")
    assert t.status == "completed" and "34.95 USD will be refunded" in t.reply
    assert _order(dsn, "100242")["status"] == "cancelled"


@pytest.mark.parametrize("caller, lang, request_, said", [
    (C2, "en", "cancel the kettle order please", "100243 is already cancelled"),
    (C2, "en", "can you cancel my boots?", "100241 is already shipped"),
    (C1, "zh", "帮我把耳机那单取消了", "100234 当前状态为已发货"),
])
def test_an_order_named_that_cannot_be_cancelled_is_never_swapped_for_the_one_that_can(shop_engine, turn, dsn,
                                                                                      caller, lang, request_, said):
    """The customer names an order the cancellation cannot take (cancelled or shipped) while exactly one other
    can be: the flow says why theirs cannot be cancelled, never offers to cancel the other order instead."""
    t = turn(shop_engine.start, "cancel_order", caller, request_, {}, lang)
    assert t.outcome == "refused" and said in t.reply, t.reply
    assert t.pending_action is None
    t = turn(shop_engine.start, "cancel_order", caller, {"en": "please cancel my order", "zh": "取消订单"}[lang],
             {}, lang)
    assert t.awaiting in ("confirmation", "order_id"), t     # naming nothing still offers the one that can be


def test_a_write_makes_the_remembered_orders_stale_in_every_conversation(shop_engine, turn, dsn):
    """Session memory is kept per customer (the shop is not asked again for 30 minutes); a cancellation the
    customer just made changes their orders, so the next conversation's flow asks the shop again and never
    lists the cancelled order as one that can be refunded."""
    look = Caller(channel="web", customer_id="c2", conversation_id="shop-c2-look")
    t = turn(shop_engine.start, "refund", look, "I want a refund", {}, "en")
    assert t.awaiting == "order_id" and "100242" in t.reply, t.reply        # paid: it can be refunded
    first = Caller(channel="web", customer_id="c2", conversation_id="shop-c2-first")
    t = turn(shop_engine.start, "cancel_order", first, "please cancel my order", {}, "en")
    assert t.awaiting == "confirmation" and t.pending_action["arguments"]["order_id"] == "100242", t
    t = turn(shop_engine.advance, t.instance_id, first, "yes", {}, "en")
    assert t.status == "completed" and _order(dsn, "100242")["status"] == "cancelled"

    later = Caller(channel="web", customer_id="c2", conversation_id="shop-c2-later")
    t = turn(shop_engine.start, "refund", later, "I want a refund", {}, "en")
    assert t.awaiting == "order_id" and "100241" in t.reply and "100242" not in t.reply, t.reply


@pytest.mark.parametrize("caller, lang, question, task, answers, lapses, defers", [
    (C1, "zh", "发票能开吗？要公司抬头的", "invoice",
     ("龙井那个", "100230", "耳机那个订单", "托特包那个"),
     ("那个快递员态度很差", "我妹妹帮我买的", "我上周已经寄回去了", "你们的客服态度真好"),
     ("我再想想", "好的，我考虑一下", "我先问问我老婆", "回头再说吧", "改天吧")),
    (C2, "en", "how long do refunds take?", "refund",
     ("the lamp one", "100241", "the boots", "the kettle one"),
     ("my sister bought it for me", "I already returned it last week", "the courier was really rude",
      "the box was damaged when it arrived"),
     ("ok I will think about it", "maybe later", "let me ask my wife first", "not now, thanks")),
])
def test_an_offer_is_taken_only_by_what_the_task_would_ask_first(shop_engine, turn, db, caller, lang, question, task,
                                                                  answers, lapses, defers):
    """To "shall I start it?" a statement is a yes only when it gives what the task would ask first: one of the
    customer's orders by its item (one the list leaves out too: the task then says why), or an order number. A
    statement that gives nothing the task asks lets the offer lapse; putting it off declines it. Nothing runs."""
    t = turn(shop_engine.offer, task, caller, question, {}, lang)
    assert t.awaiting == "offer"
    with db() as conn:
        inst = shop_engine.active(conn, caller.conversation_id)
    for text in answers:
        assert shop_engine.read(inst, text) == "answer", text
    for text in lapses:
        assert shop_engine.read(inst, text) == "digression", text
    for text in defers:
        assert shop_engine.read(inst, text) == "cancel", text
    # the reading lapses the offer: nothing started, nothing asked
    n = turn(shop_engine.advance, t.instance_id, caller, lapses[0], {}, lang, reading="digression")
    assert n.status == "cancelled" and n.outcome == "lapsed" and n.reply == ""
    t = turn(shop_engine.offer, task, caller, question, {}, lang)
    d = turn(shop_engine.advance, t.instance_id, caller, defers[0], {}, lang)
    assert d.status == "cancelled" and d.outcome == "declined" and d.reply in (
        "好的，先不办理。还有什么可以帮您的吗？", "All right, I won't start it. Anything else I can help with?")
    # an item named starts the task with that order taken; a yes starts it at its first question
    t = turn(shop_engine.offer, task, caller, question, {}, lang)
    a = turn(shop_engine.advance, t.instance_id, caller, answers[0], {}, lang)
    assert a.status == "waiting" and a.awaiting not in ("order_id", "offer"), a.reply
    turn(shop_engine.cancel, a.instance_id, lang)
    t = turn(shop_engine.offer, task, caller, question, {}, lang)
    y = turn(shop_engine.advance, t.instance_id, caller, "是的" if lang == "zh" else "yes", {}, lang)
    assert y.status == "waiting" and y.awaiting == "order_id", y.reply


def test_an_offer_for_the_single_order_is_taken_by_its_first_question_or_by_that_order(shop_engine, turn, db):
    """The customer's only refundable order is taken for them, so the refund would ask the amount first: an amount,
    the order's number or its item takes the offer; a statement about something else does not."""
    c6 = Caller(channel="web", customer_id="c6", conversation_id="shop-c6")
    t = turn(shop_engine.offer, "refund", c6, "how long do refunds take?", {}, "en")
    with db() as conn:
        inst = shop_engine.active(conn, c6.conversation_id)
    for text in ("30", "100280", "the scarf"):
        assert shop_engine.read(inst, text) == "answer", text
    for text in ("my sister bought it for me", "the courier was really rude"):
        assert shop_engine.read(inst, text) == "digression", text
    a = turn(shop_engine.advance, t.instance_id, c6, "30", {}, "en")
    assert a.awaiting == "confirmation" and a.pending_action["arguments"]["amount"] == 30.0, a.reply
