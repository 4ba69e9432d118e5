"""The rules channel: zh and en hits with the rule as the reason, priority order, text folding."""

from __future__ import annotations

import textwrap

import pytest

from router.classify import IntentClassifier
from router.classify.rules import RuleMatcher
from router.classify.intents import load_intents, parse_intents

RULES = parse_intents(textwrap.dedent("""\
    version: 1
    threshold: 0.5
    unknown_tier: L2
    intents:
      - name: refund
        tier: L2
        rules:
          - {type: regex, pattern: "退款|\\\\brefund\\\\b", priority: 10}
      - name: human_agent
        tier: L3
        rules:
          - {type: keywords, any: [转人工, 人工客服, real person, human], priority: 20}
      - name: complaint
        tier: L3
        rules:
          - {type: keywords, any: [投诉, complaint], priority: 20}
      - name: order_status
        tier: L1
        rules:
          - {type: keywords, any: [订单, order status], priority: 1}
    """))


@pytest.fixture(scope="module")
def clf():
    return IntentClassifier.from_config(RULES, None)


@pytest.mark.parametrize(
    ("text", "intent", "tier", "matched"),
    [
        ("我要退款", "refund", "L2", "退款"),
        ("I want a refund now", "refund", "L2", "refund"),
        ("转人工", "human_agent", "L3", "转人工"),
        ("Can I talk to a real person?", "human_agent", "L3", "real person"),
        ("what is my order status", "order_status", "L1", "order status"),
    ],
)
def test_rule_hits_in_zh_and_en_with_the_rule_as_reason(clf, text, intent, tier, matched):
    c = clf.classify(text)
    assert (c.intent, c.tier, c.decided_by, c.confidence) == (intent, tier, "rules", 1.0)
    rule = c.explanation["rule"]
    assert rule["intent"] == intent and rule["matched"].casefold() == matched.casefold()
    assert ("pattern" in rule) == (rule["type"] == "regex") and ("keywords" in rule) == (rule["type"] == "keywords")
    assert isinstance(rule["priority"], int)


def test_higher_priority_wins_whatever_the_order_in_the_file(clf):
    c = clf.classify("订单退款")  # order_status (1) and refund (10) both hit
    assert c.intent == "refund" and c.explanation["rule"]["priority"] == 10
    c = clf.classify("我要退款，转人工")  # refund (10) and human_agent (20)
    assert c.intent == "human_agent"


def test_equal_priority_keeps_file_order(clf):
    # human_agent and complaint both have priority 20; human_agent comes first in the file
    c = clf.classify("投诉，转人工")
    assert c.intent == "human_agent"
    hits = RuleMatcher(RULES).all_matches("投诉，转人工")
    assert [h["intent"] for h in hits] == ["human_agent", "complaint"]


def test_folding_full_width_traditional_and_case(clf):
    assert clf.classify("我要退款").intent == "refund"
    assert clf.classify("轉人工").intent == "human_agent"          # traditional characters
    assert clf.classify("ＲＥＦＵＮＤ please").intent == "refund"   # full-width Latin
    assert clf.classify("HUMAN please").intent == "human_agent"


def test_latin_keywords_match_whole_words_only(clf):
    c = clf.classify("that was inhuman treatment")
    assert c.intent is None


def test_no_hit_and_no_embedding_channel_is_unknown_with_the_unknown_tier(clf):
    c = clf.classify("hello there")
    assert c.intent is None and c.tier == "L2" and c.decided_by == "rules"
    assert c.explanation["rule"] is None and "reason" in c.explanation


def test_entities_ride_along_with_a_rule_decision(clf):
    c = clf.classify("订单号 2024110512345 我要退款 ¥600")
    assert c.intent == "refund"
    assert c.entities["order_numbers"] == ["2024110512345"]
    assert c.entities["amounts"][0]["value"] == 600.0 and c.entities["amounts"][0]["currency"] == "CNY"


def test_classify_batch_matches_single_calls(clf):
    texts = ["我要退款", "hello", "转人工", "order status?"]
    assert [c.intent for c in clf.classify_batch(texts)] == [clf.classify(t).intent for t in texts]


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("转人工", "human_agent"),
        ("transfer me to a human", "human_agent"),
        ("我的账号被盗了", "account_security"),
        ("my account was hacked", "account_security"),
        ("我要投诉你们的快递员", "complaint"),
    ],
)
def test_bundled_sample_rules(text, intent):
    clf = IntentClassifier.from_config(load_intents(), None)
    c = clf.classify(text)
    assert c.intent == intent and c.decided_by == "rules"
    assert c.tier == clf.tier_of(intent) == "L3"


def test_tier_of_unknown_intent_uses_unknown_tier(clf):
    assert clf.tier_of(None) == "L2" and clf.tier_of("refund") == "L2" and clf.tier_of("human_agent") == "L3"
