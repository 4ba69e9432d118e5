"""A question whether something may be done, read from its form (router.classify.asking), in English and Chinese."""

from __future__ import annotations

import pytest

from router.classify.asking import asks_leave


@pytest.mark.parametrize("text", [
    "can I add something to my order?", "could we merge two orders?", "is it possible to change the colour after paying",
    "am I allowed to swap the item for another colour?", "can items be added to a paid order?", "can i return underwear",
    "订单能加东西吗", "能往订单里加一件吗", "订单付款了还能改数量吗", "能不能把两个订单合并", "下单后可以换颜色吗", "优惠券能叠加吗"])
def test_a_question_of_leave(text):
    assert asks_leave(text)


@pytest.mark.parametrize("text", [
    # lookups: the state of the customer's own things, or asking to look
    "where is my order", "can I check my order?", "can i track my parcel", "may I ask where my parcel is",
    "is my order confirmed", "has my refund been processed", "能查一下我的订单吗", "电饭煲什么时候能到", "今天下单明天能到吗",
    "我的订单能发货了吗", "什么时候能开始发货", "退款什么时候能到账",
    # requests and statements are not questions
    "can I get a refund?", "can you cancel my order", "帮我改地址", "我想退货", "I can't change my address",
    # 能 inside a word
    "有什么功能"])
def test_not_a_question_of_leave(text):
    assert not asks_leave(text)
