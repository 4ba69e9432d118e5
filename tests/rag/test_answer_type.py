"""The kind of quantity a question asks for, and the lines that state one (rag/answer_type.py)."""

from __future__ import annotations

import pytest

from rag.answer_type import asked, asking_word, holds


@pytest.mark.parametrize("question, kind", [
    ("how many times can I change an invoice?", "count"), ("发票最多能改几次", "count"),
    ("how long does a refund to Alipay take?", "duration"), ("维修要多久", "duration"),
    ("下单后多长时间内要付款", "duration"), ("what's the minimum order for installments", "money"),
    ("新人券有多少钱", "money"), ("how much is a pickup?", "money"),
    ("how do I use a coupon code?", None), ("能用PayPal付钱吗", None), ("can I return socks?", None),
])
def test_what_a_question_asks_for(question, kind):
    assert asked(question) == kind


@pytest.mark.parametrize("text, kind, says", [
    ("You can change an invoice up to 3 times.", "count", True),
    ("同一张发票最多可修改3次。", "count", True),
    ("Self-service changes are available for 180 days after delivery.", "count", False),
    ("Self-service changes are available for 180 days after delivery.", "duration", True),
    ("维修周期为维修中心收到商品后7–15个工作日。", "duration", True),
    ("请在30分钟内完成付款。", "duration", True),
    ("Installments are available on orders of ¥300 or more.", "money", True),
    ("新人券满69元减15元。", "money", True),
    ("Check the minimum spend, the expiry date and whether the products are excluded.", "money", False),
    ("anything", None, False),
])
def test_which_lines_state_it(text, kind, says):
    assert holds(text, kind) is says


@pytest.mark.parametrize("word, asks", [
    ("几次", True), ("多长时间", True), ("多久", True), ("哪些", True), ("how", True), ("When", True), ("long", True),
    ("发票", False), ("最多", False), ("退款", False), ("invoice", False), ("refund", False),
    # hedges say how often or how sure, never what about; a term that holds one still names something
    ("normally", True), ("Usually", True), ("一般", True), ("请问", True), ("一般纳税人", False), ("normal", False),
])
def test_the_words_that_only_ask(word, asks):
    # they are left out of the share of a question's words the knowledge base never uses: no answer holds them
    assert asking_word(word) is asks


def test_a_part_that_only_asks_stays_with_the_part_before_it():
    """"what can I do?" after a statement asks about it: one question, not a second one answered from any article
    that says what to do; two questions that each name something stay two."""
    from rag.compose import question_parts

    assert question_parts("hey, the lamp arrived broken, what can I do?") == []
    assert question_parts("东西坏了，怎么办？") == []
    assert question_parts("I was charged twice, what should I do?") == []
    assert question_parts("运费谁出？退款多久到账？") == ["运费谁出", "退款多久到账"]
    assert question_parts("how long does a refund take, and which cards do you accept?") == [
        "how long does a refund take", "which cards do you accept"]
