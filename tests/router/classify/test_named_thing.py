"""A status question about a thing the customer bought is an order question, whatever the thing is called.

Customers name what they bought instead of "my order" ("where are my boots?", "我的茶叶签收了吗", "耳机发货了吗"); the
bundled rules read a status (where, shipped, arrived, delivered, 到哪了, 发货了吗, 签收了吗 …) asked about "my X",
"the X I ordered", "我的X", "我买的X" or a Chinese message's bare X, and place it on the order lookup (order_query or
shipping_status, both the order_status workflow). A thing that is no purchase (a refund, money, a code, an SMS, an
email, an invoice, points, a coupon, an account, a password) keeps its own intent.
"""

from __future__ import annotations

import pytest

from automation.workflows.spec import load_workflows
from router.classify.intents import BUNDLED_INTENTS, load_intents
from router.classify.rules import RuleMatcher
from routing_kit import classifier_for

LOOKUP = {"order_query", "shipping_status"}

# phrasings written apart from the rules (things, tenses and word orders the rules do not list)
EN = ["tell me where my boots are", "has my lamp shipped yet?", "when will my kettle arrive?",
      "did my scarf get delivered?", "where are the shoes I ordered", "any idea where my yoga mat is?",
      "is my air fryer out for delivery", "my desk chair still hasn't arrived", "have my curtains been dispatched",
      "when will the bookshelf I bought get here", "where's my mechanical keyboard", "hey, did my running shoes ship?",
      "my wireless earbuds never came", "has the rug we ordered been delivered yet?", "when does my phone charger ship",
      "were my sunglasses sent out already", "is my winter coat on its way?", "where r my socks",
      "what's the status of my lamp", "Has my new toaster arrived?"]
ZH = ["我的茶叶签收了吗", "耳机发货了吗", "我买的大米到哪了", "我的保温杯到哪了", "我买的台灯发货了没", "我上周买的那双鞋到了吗",
      "我的羽绒服什么时候能到", "蓝牙音箱寄出了吗", "我的洗发水怎么还没到", "我订的窗帘发出来了吗", "拖鞋到哪了",
      "我的键盘已经发货了吗", "请问我拍的那件毛衣到哪里了", "咖啡豆签收了没有", "我家的扫地机器人怎么还没发货", "我买的书到货了吗",
      "我下单的奶粉什么时候到", "你好，充电宝发货了没有", "我的吸尘器到哪儿了？", "我的牙刷寄出来了没"]

# no purchase, or not a status: what the rules placed before (another intent's rule, or none and the embeddings)
NOT_A_PURCHASE = ["where is my refund", "my verification code never came", "has my invoice been sent",
                  "where are my points", "when will my money arrive", "where is my coupon", "my email hasn't arrived",
                  "where is my account", "has my password been reset", "did my payment go through",
                  "where can I find my invoice", "my lamp arrived broken", "did my lamp arrive broken",
                  "can my lamp be shipped to another address", "app wont update on my iphone",
                  "我的退款到哪了", "验证码没收到", "我的发票寄出了吗", "我的积分到了吗", "我的优惠券在哪", "钱什么时候到账",
                  "今天能发货吗", "几天能到北京", "还没发货能取消吗", "我寄回的商品到了吗", "我的账号在哪", "我的短信怎么还没到",
                  "退货寄回去了到了吗", "我的红包到了吗"]


@pytest.fixture(scope="module")
def rules():
    return RuleMatcher(load_intents(BUNDLED_INTENTS))


def _named_thing_rule(rules: RuleMatcher, text: str) -> bool:
    """Whether the rule that places ``text`` is one of the named-thing status rules (priority 11 on the lookup)."""
    hit = rules.match(text)
    return hit is not None and hit[0].intent in LOOKUP and hit[0].priority == 11


@pytest.mark.parametrize("text", EN + ZH)
def test_a_status_asked_about_a_thing_bought_is_the_order_lookup(rules, text):
    hit = rules.match_explained(text)
    assert hit is not None and hit[0] in LOOKUP, (text, hit)
    assert load_workflows(None).for_intent(hit[0]).name == "order_status"


@pytest.mark.parametrize("text", NOT_A_PURCHASE)
def test_a_thing_that_is_no_purchase_or_a_message_that_asks_no_status_is_left_to_its_own_intent(rules, text):
    assert not _named_thing_rule(rules, text), (text, rules.match_explained(text))


@pytest.mark.slow
def test_the_whole_classifier_serves_them_with_the_order_lookup(e5_encoder, tmp_path):
    """Before the rules, "tell me where my boots are" was no intent (0.12) and "我的茶叶签收了吗" none (0.27)."""
    clf = classifier_for(e5_encoder, tmp_path)
    workflows = load_workflows(None)
    wrong = []
    for text in EN + ZH:
        c = clf.classify(text)
        wf = workflows.for_intent(c.intent) if c.intent else None
        if wf is None or wf.name != "order_status" or c.decided_by != "rules":
            wrong.append((text, c.intent, round(c.confidence, 2)))
    assert not wrong, wrong
    kept = {"where is my refund": "refund_status", "我的退款到哪了": "refund_status", "验证码没收到": "password_help",
            "my lamp arrived broken": "damaged_item", "has my invoice been sent": "invoice"}
    assert {t: clf.classify(t).intent for t in kept} == kept
