"""Everyday turns through the real pipeline, decider, handoff queue and Postgres, with a rules-only
classifier written here (so no outcome depends on where a model happens to put a message):
small talk from reply templates, clarify-then-escalate, customer-data intents and reply language."""

from __future__ import annotations

import itertools

import pytest

from router.classify import IntentClassifier
from router.turn.decider import Decider
from router.turn.escalation import load_policy
from router.classify.intents import parse_intents
from router.turn.pipeline import Pipeline
from router.schemas import InboundMessage

INTENTS = r"""
version: 1
threshold: 0.5
unknown_tier: L2
intents:
  - name: greeting
    tier: L1
    serve: reply greeting
    rules: [{type: regex, pattern: '^\W*(?:hello|hi|你好|在吗)\W*$', priority: 40}]
  - name: bot_identity
    tier: L1
    serve: reply bot_identity
    rules: [{type: regex, pattern: '^\W*(?:are you a (?:bot|real person)|你是真人吗)\W*$', priority: 40}]
  - name: order_query
    tier: L1
    serve: workflow order_status
    rules: [{type: regex, pattern: 'where is my order|我的订单|NW\d{14}', priority: 10}]
  - name: faq
    tier: L1
    rules: [{type: keywords, any: [return policy, 退货政策], priority: 12}]
  - name: human_agent
    tier: L3
    rules: [{type: keywords, any: [转人工, talk to a human], priority: 28}]
"""

_ids = itertools.count()


@pytest.fixture
def gateway(settings):
    from router.app.composition import wire_handoff
    from router.app.composition import build_services

    svc = build_services(settings, load_models=False)
    svc.classifier = IntentClassifier.from_config(parse_intents(INTENTS), None)
    wire_handoff(svc)

    def make(**policy_changes):
        policy = load_policy().model_copy(update=policy_changes)
        return Pipeline(svc.pool, svc.metrics, Decider(policy=policy, classifier=svc.classifier, handoff=svc.handoff,
                                                      metrics=svc.metrics))
    yield svc, make
    svc.close()


def say(pipe, text, conv="c-1"):
    msg = InboundMessage(channel="web", conversation_external_id=conv, customer_id=f"u-{conv}",
                         message_external_id=f"m-{next(_ids)}", text=text)
    return pipe.handle(msg)[0]


def tickets(svc) -> list[dict]:
    with svc.pool.connection() as conn:
        return conn.execute("SELECT kind, reason FROM tickets ORDER BY created_at").fetchall()


def transitions(svc) -> int:
    with svc.pool.connection() as conn:
        return conn.execute("SELECT count(*) AS n FROM conversation_transitions").fetchone()["n"]


@pytest.mark.parametrize("text,lang", [("hello", "en"), ("Hi!", "en"), ("你好", "zh"), ("在吗？", "zh")])
def test_a_greeting_is_answered_from_the_template_without_a_ticket_or_a_state_change(gateway, text, lang):
    svc, make = gateway
    policy = load_policy()
    out = say(make(), text)
    assert out["reply"]["text"] == policy.reply("greeting", lang)
    assert out["lang"] == out["reply"]["lang"] == lang
    assert out["ticket_id"] is None and out["state"] == "idle" and tickets(svc) == []
    assert out["decision"]["tier"] == "L1" and out["decision"]["explanation"]["served"] == "reply greeting"
    assert transitions(svc) == 0


def test_while_a_person_holds_the_conversation_small_talk_goes_to_the_ticket(gateway):
    svc, make = gateway
    pipe = make()
    held = say(pipe, "转人工")
    hello = say(pipe, "你好")
    assert hello["state"] == "l3_queuing" and hello["reply"] is None and hello["ticket_id"] == held["ticket_id"]
    other = say(pipe, "where is my order NW20261015083142", conv="c-2")
    assert other["state"] == "l2_assisting"
    hello = say(pipe, "hello", conv="c-2")                       # while a person reviews: no template reply
    assert hello["reply"] is None and hello["ticket_id"] == other["ticket_id"]
    assert len(tickets(svc)) == 2


def _counters(svc, conv):
    with svc.pool.connection() as conn:
        return conn.execute("SELECT k.* FROM conversation_counters k JOIN conversations c ON c.id = k.conversation_id "
                            "WHERE c.external_id = %s", (conv,)).fetchone()


def test_small_talk_leaves_the_counters_of_a_run_alone(gateway):
    svc, make = gateway
    pipe = make()
    first = say(pipe, "blorp quux")                  # matches nothing: clarified, streak 1
    assert first["decision"]["explanation"]["clarify"] is True
    say(pipe, "hello")
    say(pipe, "hello")                              # the same greeting twice is not a "repeated question"
    assert tickets(svc) == []
    assert _counters(svc, "c-1")["low_confidence_streak"] == 1


def test_are_you_a_real_person_is_answered_not_escalated(gateway):
    svc, make = gateway
    out = say(make(), "are you a real person?")
    assert out["decision"]["explanation"]["served"] == "reply bot_identity" and out["ticket_id"] is None
    assert tickets(svc) == []


@pytest.mark.parametrize("text,lang", [("blorp quux zzz", "en"), ("天王盖地虎", "zh")])
def test_the_first_unknown_message_is_clarified_with_suggestions_the_second_reaches_a_person(gateway, text, lang):
    svc, make = gateway
    policy = load_policy()
    pipe = make()
    first = say(pipe, text)
    assert first["reply"]["text"] == policy.reply("clarify", lang) and first["lang"] == lang
    assert first["reply"]["suggestions"] == policy.suggestions_for(lang) and first["reply"]["suggestions"]
    assert first["ticket_id"] is None and first["state"] == "idle" and tickets(svc) == []
    second = say(pipe, text + " again" if lang == "en" else text + "再来")
    assert second["ticket_id"] and second["decision"]["tier"] == "L3"
    assert second["decision"]["escalation"]["rule"] == "low_confidence"
    assert second["reply"]["text"] == policy.reply("ack_l3", lang)


def test_an_explicit_request_after_a_clarification_goes_to_a_person(gateway):
    svc, make = gateway
    pipe = make()
    say(pipe, "blorp quux")
    out = say(pipe, "talk to a human")
    assert out["decision"]["escalation"]["rule"] == "human_request" and out["state"] == "l3_queuing"


def test_unknown_escalate_keeps_the_original_mapping_to_the_unknown_tier(gateway):
    svc, make = gateway
    out = say(make(unknown="escalate"), "blorp quux zzz")
    assert out["decision"]["tier"] == "L2" and out["state"] == "l2_assisting" and out["ticket_id"]
    assert [t["kind"] for t in tickets(svc)] == ["assist"]


@pytest.mark.parametrize("text,lang", [("where is my order? it has been a week", "en"), ("我的订单到哪了", "zh")])
def test_an_order_question_without_a_number_asks_for_it_in_the_customers_language(gateway, text, lang):
    svc, make = gateway
    out = say(make(), text)
    assert out["reply"]["text"] == load_policy().reply("ask_order_number", lang)
    assert out["reply"]["citations"] == [] and out["ticket_id"] is None
    assert out["decision"]["explanation"]["missing"] == ["order_number"]


def test_an_order_question_with_a_number_goes_to_a_person_without_a_knowledge_base_draft(gateway):
    svc, make = gateway
    pipe = make()
    say(pipe, "where is my order")
    out = say(pipe, "NW20261015083142")
    assert out["decision"]["tier"] == "L2" and out["state"] == "l2_assisting"
    assert out["decision"]["explanation"]["workflow"] == {"name": "order_status", "wired": False}
    [t] = tickets(svc)
    assert t["kind"] == "assist" and "order_status" in t["reason"] and "NW20261015083142" in t["reason"]


def test_short_messages_keep_the_conversations_language(gateway):
    svc, make = gateway
    pipe = make()
    say(pipe, "我想问一下退货政策")
    ok = say(pipe, "ok")
    assert ok["lang"] == "zh"
    fresh = say(pipe, "ok", conv="c-new")
    assert fresh["lang"] == "en"                     # nothing known yet: the policy's default


def test_fixed_replies_are_never_two_languages_in_one_message(gateway):
    svc, make = gateway
    pipe = make()
    en = say(pipe, "talk to a human", conv="c-en")["reply"]["text"]
    zh = say(pipe, "转人工", conv="c-zh")["reply"]["text"]
    assert not any("\u4e00" <= ch <= "\u9fff" for ch in en)
    assert all(ch.isascii() is False for ch in zh if ch.isalpha())


def test_every_reply_template_a_bundled_intent_names_exists_in_the_bundled_policy():
    from router.classify.intents import load_intents

    policy = load_policy()
    named = {i.served_by[1] for i in load_intents().intents if i.served_by and i.served_by[0] == "reply"}
    assert named and named <= policy.replies.names()
    for name in named | {"ack_l2", "ack_l3", "closing", "clarify", "ask_order_number"}:
        assert policy.reply(name, "en") != policy.reply(name, "zh"), name


def test_a_policy_without_a_template_an_intent_needs_is_refused():
    bare = load_policy()
    bare = bare.model_copy(update={"replies": type(bare.replies)()})
    with pytest.raises(ValueError, match="replies.greeting"):
        Decider(policy=bare, classifier=IntentClassifier.from_config(parse_intents(INTENTS), None))
