"""A free-text answer is a value only when it says one: a pointer ("马克杯那个", "the blue one") is asked again,
and a slot's ``format`` (an address) is checked beyond its JSON schema; the bundled change_address on the
example shop, through the real gateway and Postgres."""

from __future__ import annotations

import textwrap

import pytest

from automation.tools import Caller
from automation.workflows import understand as U
from automation.workflows.engine import FlowEngine
from automation.workflows.spec import WorkflowConfigError, load_workflows, parse_workflows
from tool_servers import shop_dump

POINTERS = ["马克杯那个", "马克杯的那个", "那个马克杯", "蓝色的那个吧", "这个", "就这个吧", "第一个", "第2个", "最后一个",
            "上面那个", "那个订单", "智能手机 256GB那个",
            "that one", "the mug one", "the blue one please", "the first one", "the last one", "this",
            "yes that one thanks", "the one with the mug", "the 256gb one", "number 2"]
VALUES = ["北京市朝阳区建国路88号", "12 Baker Street, London", "上海 浦东 张江路 100 弄 3 号 502", "上海某某科技有限公司",
          "那个，上海某某科技有限公司", "那个小区3号楼", "the one at 12 Baker Street", "Acme Trading Ltd.", "个人",
          "John Smith", "One Infinite Loop, Cupertino, CA 95014", "Blue Sky Studio LLC"]


@pytest.mark.parametrize("text", POINTERS)
def test_a_pointer_has_no_content_of_a_value(text):
    assert U.is_pointer(text)


@pytest.mark.parametrize("text", VALUES)
def test_addresses_and_titles_are_no_pointers(text):
    assert not U.is_pointer(text)


@pytest.mark.parametrize("text, address", [
    ("北京市朝阳区建国路88号", True), ("上海 浦东 张江路 100 弄 3 号 502", True), ("广州市天河区天河路385号", True),
    ("北京市朝阳区", True), ("12 Baker Street, London", True), ("221B Baker St, London NW1 6XE", True),
    ("742 Evergreen Terrace, Springfield, OR 97403, USA", True), ("Via Montenapoleone 8, 20121 Milano, Italy", True),
    ("Flat 3, 12 King Street, London W1 4AB", True), ("1600 Amphitheatre Pkwy, Mountain View, CA 94043", True),
    ("随便", False), ("asap", False), ("马克杯那个", False), ("the mug one", False), ("我不知道", False),
    ("北京", False), ("any place is fine", False), ("12345", False), ("", False), (None, False),
])
def test_an_address_has_address_features(text, address):
    assert U.looks_like_address(text) is address


WF = """\
workflows:
  ship:
    slots:
      address:
        validate: {schema: {type: string}, format: %s}
        prompt: {zh: 地址, en: Address}
    steps:
      - {id: ask, ask: address}
      - {id: done, reply: {zh: "好", en: "ok"}}
"""


def test_a_slot_format_is_checked_and_an_unknown_one_is_a_spec_error():
    slot = parse_workflows(WF % "address", file="wf.yaml")["ship"].slots["address"]
    assert slot.free_text and slot.check("12 Baker Street, London") and not slot.check("asap")
    with pytest.raises(WorkflowConfigError) as exc:
        parse_workflows(textwrap.dedent(WF % "postal"), file="wf.yaml")
    assert exc.value.errors == [{"file": "wf.yaml", "line": 5, "field": "workflows.ship.slots.address.validate.format",
                                 "message": "unknown format 'postal' (address)"}]


# ---------------------------------------------------------------- the bundled workflows on the example shop

@pytest.fixture
def shop_engine(shop_gateway, approvals):
    return FlowEngine(load_workflows(None, tools=shop_gateway), shop_gateway, approvals)


C1 = Caller(channel="web", customer_id="c1", conversation_id="slot-c1")
C2 = Caller(channel="web", customer_id="c2", conversation_id="slot-c2")


def _address(dsn, order_id):
    return next(o for o in shop_dump(dsn)["orders"] if o["order_id"] == order_id)["address"]


def test_the_mug_one_at_the_address_question_is_asked_again_with_the_hint(shop_engine, turn, dsn, db):
    """"马克杯那个" to "新的收货地址是？" points at the order in hand: never the new address (the turn does not read
    it as the answer); asked again with what an address looks like, then a real one is confirmed and written."""
    t = turn(shop_engine.start, "change_address", C1, "修改订单100235的地址", {}, "zh")
    assert t.awaiting == "address", t.reply
    before = _address(dsn, "100235")
    with db() as conn:
        inst = shop_engine.active(conn, C1.conversation_id)
        assert shop_engine.read(inst, "马克杯那个") == "unclear" and shop_engine.read(inst, "那个马克杯") == "unclear"
        assert shop_engine.read(inst, "北京市朝阳区建国路88号") == "answer"
    t = turn(shop_engine.advance, t.instance_id, C1, "马克杯那个", {}, "zh")
    assert t.status == "waiting" and t.awaiting == "address", t.reply
    assert "订单 100235 新的收货地址是？" in t.reply and "省市区、街道和门牌号" in t.reply and "马克杯那个" not in t.reply
    t = turn(shop_engine.advance, t.instance_id, C1, "随便", {}, "zh")          # no address either
    assert t.awaiting == "address" and "省市区、街道和门牌号" in t.reply and _address(dsn, "100235") == before
    t = turn(shop_engine.advance, t.instance_id, C1, "上海 浦东 张江路 100 弄 3 号 502", {}, "zh")
    assert t.awaiting == "confirmation" and "上海 浦东 张江路 100 弄 3 号 502" in t.reply, t.reply
    assert t.pending_action["arguments"] == {"order_id": "100235", "address": "上海 浦东 张江路 100 弄 3 号 502"}
    t = turn(shop_engine.advance, t.instance_id, C1, "是的", {}, "zh")
    assert t.status == "completed" and _address(dsn, "100235") == "上海 浦东 张江路 100 弄 3 号 502", t.reply


def test_a_pointer_at_another_order_of_the_list_picks_that_order(shop_engine, turn, dsn):
    """"马克杯那个" at the address question of the tote's order: the customer still thinks of the order, and the
    mug's order (100235) is taken instead; its address is asked."""
    t = turn(shop_engine.start, "change_address", C1, "修改订单100236的地址", {}, "zh")
    assert t.awaiting == "address", t.reply
    t = turn(shop_engine.advance, t.instance_id, C1, "马克杯那个", {}, "zh")
    assert t.awaiting == "address" and t.reply == "订单 100235 新的收货地址是？", t.reply
    t = turn(shop_engine.advance, t.instance_id, C1, "北京市朝阳区建国路88号", {}, "zh")
    assert t.pending_action["arguments"] == {"order_id": "100235", "address": "北京市朝阳区建国路88号"}, t.reply


@pytest.mark.parametrize("pointer", ["the blue one please", "that one", "asap"])
def test_a_pointer_or_no_address_in_english_is_asked_again(shop_engine, turn, dsn, pointer):
    t = turn(shop_engine.start, "change_address", C2, "change the address of order 100242", {}, "en")
    assert t.awaiting == "address", t.reply
    t = turn(shop_engine.advance, t.instance_id, C2, pointer, {}, "en")
    assert t.awaiting == "address" and "house number and street" in t.reply, t.reply
    t = turn(shop_engine.advance, t.instance_id, C2, "12 Baker Street, London", {}, "en")
    assert t.awaiting == "confirmation" and t.pending_action["arguments"]["address"] == "12 Baker Street, London"


def test_a_pointer_is_no_invoice_title_and_a_company_name_is(shop_engine, turn):
    t = turn(shop_engine.start, "invoice", C1, "订单100230开发票", {}, "zh")
    assert t.awaiting == "title", t.reply
    t = turn(shop_engine.advance, t.instance_id, C1, "这个", {}, "zh")
    assert t.awaiting == "title" and "订单 100230 的发票抬头是？" in t.reply, t.reply
    t = turn(shop_engine.advance, t.instance_id, C1, "上海某某科技有限公司", {}, "zh")
    assert t.awaiting == "tax_id", t.reply


@pytest.mark.parametrize("lang, caller, request_text, pointer, thing, pick, order", [
    ("zh", "C1", "我想退款", "不粘锅那个", "不粘锅", "马克杯那个", "100235"),
    ("en", "C2", "I want a refund", "the blender one please", "blender", "the lamp one", "100240"),
])
def test_a_pointer_at_nothing_listed_says_so_and_the_list_stays(shop_engine, turn, lang, caller, request_text,
                                                                pointer, thing, pick, order):
    """"不粘锅那个" where the customer's orders have none: told plainly that it is not among them, the list asked
    again (never "noted", never "didn't catch that"); a pointer at a listed order then picks it."""
    who = {"C1": C1, "C2": C2}[caller]
    t = turn(shop_engine.start, "refund", who, request_text, {}, lang)
    assert t.awaiting == "order_id", t.reply
    t = turn(shop_engine.advance, t.instance_id, who, pointer, {}, lang)
    assert t.status == "waiting" and t.awaiting == "order_id", t.reply
    assert thing in t.reply and order in t.reply, t.reply
    assert not any(w in t.reply for w in ("记下", "noted", "没有听明白", "didn't catch")), t.reply
    t = turn(shop_engine.advance, t.instance_id, who, pick, {}, lang)
    assert t.awaiting == "amount", t.reply


@pytest.mark.parametrize("lang, caller, start, go_on, question", [
    ("en", "C2", "refund order 100240", "ok then go ahead", "How much should be refunded"),
    ("zh", "C1", "订单100234退款", "好的，继续吧", "要退款多少"),
])
def test_a_go_on_at_a_value_question_gets_the_question_plainly(shop_engine, turn, lang, caller, start, go_on, question):
    """"ok then go ahead" where the amount is asked: the customer lets the bot go on; the question is asked again
    as it was (never "noted", never "didn't catch that"), and the answer then goes on."""
    who = {"C1": C1, "C2": C2}[caller]
    t = turn(shop_engine.start, "refund", who, start, {}, lang)
    assert t.awaiting == "amount", t.reply
    t = turn(shop_engine.advance, t.instance_id, who, go_on, {}, lang)
    assert t.awaiting == "amount" and question in t.reply, t.reply
    assert not any(w in t.reply for w in ("记下", "noted", "没有听明白", "didn't catch")), t.reply
    t = turn(shop_engine.advance, t.instance_id, who, "all of it" if lang == "en" else "全部", {}, lang)
    assert t.awaiting == "confirmation", t.reply



@pytest.mark.parametrize("text", ["hey, I need to return the boots, they're too small", "I need to return the boots"])
def test_an_item_named_in_a_longer_request_still_picks_its_order(shop_engine, turn, text):
    """"they're too small" beside the boots: no word of two letters ("re") matches part of another option's words."""
    t = turn(shop_engine.start, "refund", C2, text, {}, "en")
    assert t.awaiting == "amount" and "100241" in t.reply, t.reply


@pytest.mark.parametrize("text", ["ok", "好的，继续吧", "ok then go ahead"])
def test_a_go_on_is_no_small_talk_at_a_waiting_question(shop_engine, turn, db, text):
    """"ok" at "which order should be refunded?", even when the classifier is sure it is small talk (thanks): not
    another topic ("You're welcome!"), the step's own: its question again, plainly."""
    t = turn(shop_engine.start, "refund", C2, "I want a refund", {}, "en")
    assert t.awaiting == "order_id", t.reply
    with db() as conn:
        inst = shop_engine.active(conn, C2.conversation_id)
        assert shop_engine.read(inst, text, intent="thanks", intent_confidence=0.99) == "unclear"
        assert shop_engine.read(inst, "what payment methods do you accept?", intent="payment_methods",
                                intent_confidence=0.99) == "digression"
    t = turn(shop_engine.advance, t.instance_id, C2, text, {}, "en")
    assert t.awaiting == "order_id" and "Which order should be refunded?" in t.reply, t.reply
    assert not any(w in t.reply for w in ("noted", "didn't catch", "welcome")), t.reply


@pytest.mark.parametrize("lang, correction", [
    ("en", "no wait, the title should be Acme Trading Ltd"), ("zh", "不对，抬头应该是Acme Trading Ltd")])
def test_a_corrected_title_keeps_the_tax_id_said_after_it(shop_engine, turn, lang, correction):
    """At the confirmation, the title corrected: the tax id said after it never depended on it, so it is kept and
    the invoice is confirmed again with both (no question asked again)."""
    t = turn(shop_engine.start, "invoice", C1, "invoice for order 100230" if lang == "en" else "订单100230开发票", {}, lang)
    assert t.awaiting == "title", t.reply
    t = turn(shop_engine.advance, t.instance_id, C1, "Acme Ltd", {}, lang)
    assert t.awaiting == "tax_id", t.reply
    t = turn(shop_engine.advance, t.instance_id, C1, "91310000MA1FL8XX3K", {}, lang)
    assert t.awaiting == "confirmation", t.reply
    t = turn(shop_engine.advance, t.instance_id, C1, correction, {}, lang)
    assert t.awaiting == "confirmation", t.reply
    assert t.pending_action["arguments"] == {"order_id": "100230", "title": "Acme Trading Ltd",
                                             "tax_id": "91310000MA1FL8XX3K"}, t.pending_action
