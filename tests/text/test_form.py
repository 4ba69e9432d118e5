"""text.form: a question asks to be told, a request asks for it to be done (zh and en, from the sentence alone)."""

from __future__ import annotations

import pytest

from text.form import asks_why, only_asks, read_form, tells_a_problem

QUESTIONS = ["how do I return an item?", "how do I get an e-invoice", "can I return a shirt that doesn't fit?",
             "is it possible to change the address after paying?", "do I need to pay for return shipping?",
             "I want to know how to return", "what if I want to send it back?", "can I get a VAT invoice as an individual?",
             "who pays the postage when I return something", "when do my points expire",
             "衣服不合适能退吗", "电子发票怎么开", "退货的运费谁来出", "下单后还能改地址吗", "我想问一下怎么退货",
             "东西不想要了 怎么退款", "支持哪些付款方式", "客服几点下班", "可不可以用花呗",
             # asked by its question words alone, no question mark
             "我的台灯到哪了", "快递现在在哪", "哪天能到", "退款什么时候到账", "where is my lamp", "when will my parcel arrive"]
REQUESTS = ["I want to return my shirt", "I'd like a refund", "please refund my order", "cancel my order please",
            "can you cancel the order I placed this morning?", "could you send me an invoice?", "I need an invoice",
            "can I get an invoice for my order", "refund order 100234", "help me change my address",
            "给我开张发票", "帮我取消订单", "我要退货", "我想改一下收货地址", "刚下的单能帮我取消吗", "麻烦开一下发票",
            "衣服太大了想退货", "取消订单100236"]
NEITHER = ["I forgot my password", "忘记登录密码了", "电子发票没收到", "my account was hacked", "", "100234",
           "哪怕晚一点也没关系"]


@pytest.mark.parametrize("text", QUESTIONS)
def test_questions(text):
    assert read_form(text) == "question"


@pytest.mark.parametrize("text", REQUESTS)
def test_requests(text):
    assert read_form(text) == "request"


@pytest.mark.parametrize("text", NEITHER)
def test_statements_are_neither(text):
    assert read_form(text) is None


PROBLEMS = ["my coupon doesn't work", "my discount code is not working", "the code is invalid", "my payment failed",
            "the app keeps crashing", "I can't apply my points", "my card got declined", "优惠券用不了", "积分抵扣不了",
            "验证码收不到", "付款失败了", "页面打不开",
            # something sent that never came: a receive verb negated with a thing, or a thing that never came
            "I didn't get the verification code", "I never got the code", "haven't received the SMS code",
            "I have not received any email from you", "verification code not received", "the reset email never came",
            "the code hasn't arrived yet", "the text isn't coming through",
            "验证码没收到", "一直没收到短信", "邮件没收到", "没有收到验证码", "验证码还没到", "短信一直没来啊",
            # whose the thing is the classifier says (an order's, an invoice's: their lookup or task keeps it)
            "my parcel never arrived", "包裹显示签收了但我没收到", "电子发票没收到"]
NO_PROBLEM = ["I forgot my password", "where is my order", "I want a refund", "it works now, thanks", "not yet",
              "I don't know", "hello", "好的", "100234",
              # not getting what was said, a person not coming, time not come
              "sorry, I didn't get that", "I don't get it", "I didn't get to finish", "I never came back",
              "I have never come across such a thing", "I'm not coming", "优惠券还没到期", "没来得及付款", "他没来"]


@pytest.mark.parametrize("text", PROBLEMS)
def test_problems_told_as_statements(text):
    assert tells_a_problem(text) and read_form(text) is None


@pytest.mark.parametrize("text", NO_PROBLEM)
def test_statements_of_no_problem(text):
    assert not tells_a_problem(text)


@pytest.mark.parametrize("text", ["has my lamp been delivered?", "东西到了吗", "where is my parcel", "has it shipped yet?",
                                  "能不能查一下物流", "is it still in transit?", "订单100230签收了吗"])
def test_a_status_question_only_asks(text):
    assert only_asks(text)


@pytest.mark.parametrize("text", [
    "my package says delivered but I never got it", "where is my parcel? it says delivered but I have nothing",
    "why hasn't my parcel arrived yet?", "is my parcel lost?", "快递显示已签收，但是我没收到", "物流三天没更新了",
    "我的快递怎么还没到", "where's my package? tracking hasn't moved in 4 days", "cancel my order"])
def test_a_message_that_reports_trouble_or_asks_nothing_does_not_only_ask(text):
    assert not only_asks(text)


@pytest.mark.parametrize("text, why", [("why is the amount on my invoice wrong?", True), ("为什么只退了一半", True),
                                       ("how come my refund is so small", True), ("can I return it?", False),
                                       ("毛巾能开个发票吗", False)])
def test_asks_why(text, why):
    assert asks_why(text) is why
