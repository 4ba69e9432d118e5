"""A question about a refund's progress ("where is my refund?", "退款到账了吗", the classifier's refund_status) is
answered with the refund facts of the shop's own record, not with the shipping status alone: the amount refunded
so far when there is one, and when there is none, that no refund has been issued yet, with the order's status and
the way to ask for one. The intent that started the task holds for its whole life (asked "which order?" first, or
offered after an answer). Walked end to end (real Postgres, MCP shop, model), in English and Chinese; never a
ticket."""

from __future__ import annotations

import pytest

from routing_kit import rows
from test_listening_misses import pack, talk_pack, tickets  # noqa: F401 - fixtures: the whole bundled pack

pytestmark = pytest.mark.slow


def test_a_refund_question_gets_the_refund_facts_of_the_order_in_english(talk_pack, pack):
    # c2: 100241 boots shipped, 100240 lamp delivered, nothing refunded on either
    boots = talk_pack("c2", ["I returned the boots a week ago and still no refund", "I want a refund for it"])
    (_, said, flow, _), (_, then, after, _) = boots
    assert said.startswith("No refund has been issued for order 100241 yet; it is shipped."), said
    assert "tracking number" not in said and flow["workflow"] == "order_status", said
    # the way to ask for one, taken at its word: the refund of that order asks how much
    assert 'say "I want a refund for it"' in said, said
    assert after["workflow"] == "refund" and after["awaiting"] == "amount" and "100241" in then, then
    (_, lamp, flow, _), = talk_pack("c2", ["where is my refund for the lamp?"])
    assert lamp.startswith("No refund has been issued for order 100240 yet; it is delivered."), lamp
    # asked which order first: the answer still gets the refund facts
    which = talk_pack("c2", ["where is my refund", "the boots"])
    assert which[0][2]["awaiting"] == "order_id", which[0][1]
    assert which[1][1].startswith("No refund has been issued for order 100241 yet"), which[1][1]
    # a cancelled order cannot be refunded again: no offer of a refund, the refund times instead
    (_, kettle, _, _), (_, times, _, _) = talk_pack("c2", ["has my refund for order 100243 been processed",
                                                         "how long do refunds take?"])
    assert kettle.startswith("No refund has been issued for order 100243 yet; it is cancelled."), kettle
    assert "how long do refunds take" in kettle and "I want a refund" not in kettle, kettle
    assert "business days" in times and "100243" not in times, times   # the knowledge base's refund timelines
    # part of the lamp refunded: the amount of the record, of the order's total
    talk_pack("c2", ["I want a refund for order 100240", "20", "yes"])
    (_, part, _, _), = talk_pack("c2", ["where is my refund for the lamp?"])
    assert part.startswith("Order 100240: 20.00 USD of 62.99 USD has been refunded (status: delivered)."), part
    for reply in (said, lamp, which[1][1], kettle, part):
        assert "carrier" not in reply, reply
    # a plain status question still gets the shipping status, and no refund talk
    (_, plain, _, _), = talk_pack("c2", ["where is my order 100241"])
    assert plain == "Order 100241 is shipped, carrier FedEx, tracking number 794644790138.", plain
    assert tickets(pack) == 0
    refunds = rows(pack.pool, "SELECT order_id, amount FROM shop.writes WHERE tool = 'request_refund'")
    assert [(r["order_id"], float(r["amount"])) for r in refunds] == [("100240", 20.0)]


def test_a_refund_question_gets_the_refund_facts_of_the_order_in_chinese(talk_pack, pack):
    # c3: 100250 running shoes, refunded
    shoes = talk_pack("c3", ["退款到账了吗", "跑步鞋那个"])
    assert shoes[0][2]["awaiting"] == "order_id", shoes[0][1]
    (_, said, flow, _) = shoes[1]
    assert said.startswith("订单 100250 已退款 459.00 CNY，当前状态：已退款。"), said
    assert "运单号" not in said and "承运商" not in said and flow["status"] == "completed", said
    (_, times, _, _), = talk_pack("c3", ["退款多久能到账？"])      # the question the reply suggests: the refund timelines
    assert "工作日" in times, times
    # a question answered from the knowledge base, then the status check offered: taken, it keeps the question
    asked = talk_pack("c3", ["我的跑步鞋退款到账了吗", "是"])
    assert asked[0][2].get("awaiting") == "offer", asked[0][1]
    assert asked[1][1].startswith("订单 100250 已退款 459.00 CNY"), asked[1][1]
    # c5: 100270 pan delivered, nothing refunded: said so, and the refund offered, taken at its word
    pan = talk_pack("c5", ["退款到账了吗", "不粘锅那个", "这个订单我要退款"])
    (_, none, _, _) = pan[1]
    assert none.startswith("订单 100270 还没有退款，当前状态：已签收。"), none
    assert "如需退款" in none and "已退款" not in none and "运单号" not in none, none
    assert pan[2][2]["workflow"] == "refund" and pan[2][2]["awaiting"] == "amount" and "100270" in pan[2][1], pan[2][1]
    assert tickets(pack) == 0
