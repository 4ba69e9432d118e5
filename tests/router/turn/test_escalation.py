"""The escalation policy: every rule fires by name in zh and en, and stays quiet when it should."""

from __future__ import annotations

import pytest

from router.classify import IntentClassifier
from router.classify.base import Classification
from router.classify.entities import extract_entities
from router.turn.escalation import RULES, EscalationConfig, EscalationPolicy, load_policy
from router.classify.intents import BUNDLED_INTENTS, load_intents


@pytest.fixture(scope="module")
def policy_file():
    return load_policy()


@pytest.fixture(scope="module")
def policy(policy_file):
    return EscalationPolicy(policy_file.escalation, policy_file.feedback)


@pytest.fixture(scope="module")
def classifier():
    """The real classifier (bundled intents, rules channel)."""
    return IntentClassifier.from_config(load_intents(BUNDLED_INTENTS), None)


def unknown(text: str) -> Classification:
    """What the classifier returns for an out-of-scope message: no intent, the unknown tier."""
    return Classification(None, "L2", 0.0, "embeddings", {"channel": "embeddings"}, extract_entities(text))


def known(text: str, intent: str, tier: str = "L1", confidence: float = 0.97) -> Classification:
    return Classification(intent, tier, confidence, "embeddings", {"channel": "embeddings"}, extract_entities(text))


def evaluate(policy, text, c, counters=None, target="l1_resolving"):
    return policy.evaluate(text=text, classification=c, counters=counters or {}, target_state=target)


def test_rule_names_are_the_documented_ones(policy_file):
    assert RULES == ("account_security", "human_request", "refund_amount", "dissatisfied", "repeated_question",
                     "low_confidence", "loop_guard")
    assert set(policy_file.escalation.priorities) == set(RULES)


@pytest.mark.parametrize("text", ["my account was hacked", "我的账号被盗了", "有人异地登录我的账户"])
def test_account_security_is_urgent(policy, classifier, text):
    c = classifier.classify(text)
    v = evaluate(policy, text, c, target="l3_queuing")
    assert v.rule == "account_security" and v.priority == "urgent"
    assert v.checks["account_security"]["fired"] is True and v.checks["account_security"]["intent"] == "account_security"


@pytest.mark.parametrize("text, fires", [("I forgot my password", False), ("密码忘了怎么办", False),
                                         ("how do I turn on two-step verification?", False),
                                         ("my account is frozen, why?", True), ("someone logged in, it wasn't me", True),
                                         ("账号里有陌生订单，不是我下的单", True), ("我的账号好像被黑了", True)])
def test_account_security_needs_a_sign_of_a_hacked_or_frozen_account(policy, text, fires):
    """The embedding channel may place a forgotten password under account_security: self-service, no urgent L3,
    unless the message says the account was taken over or frozen (a security phrase or a rule of the intent)."""
    v = evaluate(policy, text, known(text, "account_security", tier="L3"), target="l3_queuing")
    assert v.checks["account_security"]["fired"] is fires, v.checks["account_security"]
    assert (v.rule == "account_security") is fires


def test_without_security_phrases_the_intent_alone_escalates(classifier):
    policy = EscalationPolicy(EscalationConfig())
    v = evaluate(policy, "I forgot my password", known("I forgot my password", "account_security", tier="L3"))
    assert v.rule == "account_security"


@pytest.mark.parametrize("text", ["转人工", "轉人工", "我要找人工客服", "别用机器人了 我要跟真人说话",
                                  "I want to talk to a real person", "can I speak to an agent", "HUMAN please"])
def test_human_request_by_phrase_or_intent(policy, classifier, text):
    v = evaluate(policy, text, classifier.classify(text))
    assert v.rule == "human_request" and v.priority == "normal"
    assert v.checks["human_request"]["phrase"] or v.checks["human_request"]["intent"]


def test_human_request_by_intent_alone(policy):
    v = evaluate(policy, "get me someone who can actually help", known("x", "human_agent", "L3"))
    assert v.rule == "human_request" and v.checks["human_request"] == {"fired": True, "phrase": None, "intent": True,
                                                                     "identity_question": False}


@pytest.mark.parametrize("text", ["where is my order", "我的订单到哪了", "the humanities book I ordered is late",
                                  "how do I change my password"])
def test_human_request_quiet_on_ordinary_questions(policy, text):
    assert not evaluate(policy, text, known(text, "order_query")).checks["human_request"]["fired"]


@pytest.mark.parametrize("text,fires", [
    ("我要退款600元", True), ("please refund me ¥600", True), ("I want a refund of 1,200 dollars", True),
    ("申请退款 金额八百块", True),
    ("我要退款300元", False), ("I want a refund of 500 dollars", False), ("I paid 900 dollars for this blender", False),
])
def test_refund_amount_over_limit(policy, classifier, text, fires):
    c = classifier.classify(text)
    v = evaluate(policy, text, c, target="l2_assisting")
    assert v.checks["refund_amount"]["fired"] is fires, v.checks["refund_amount"]
    if fires:
        assert v.rule == "refund_amount" and v.priority == "high"
        assert v.checks["refund_amount"]["amount"]["value"] > 500


def test_refund_limit_is_configurable(policy_file):
    cfg = policy_file.escalation.model_copy(update={"refund_amount_over": 200})
    p = EscalationPolicy(cfg, policy_file.feedback)
    text = "我要退款300元"
    assert evaluate(p, text, known(text, "refund_request", "L2")).rule == "refund_amount"


@pytest.mark.parametrize("first,second", [("这个回答没用", "还是没解决，太差了"),
                                          ("that was not helpful", "this is useless, I'm so frustrated")])
def test_two_consecutive_dissatisfied_turns(policy, first, second):
    v1 = evaluate(policy, first, unknown(first))
    assert not v1.checks["dissatisfied"]["fired"] and v1.counters["dissatisfied_streak"] == 1
    v2 = evaluate(policy, second, unknown(second), counters=v1.counters)
    assert v2.rule == "dissatisfied" and v2.priority == "high" and v2.checks["dissatisfied"]["streak"] == 2


def test_dissatisfied_streak_resets_on_a_calm_turn(policy):
    v1 = evaluate(policy, "没用", unknown("没用"))
    v2 = evaluate(policy, "我的订单到哪了", known("我的订单到哪了", "order_query"), counters=v1.counters)
    assert v2.counters["dissatisfied_streak"] == 0
    v3 = evaluate(policy, "太差了", unknown("太差了"), counters=v2.counters)
    assert not v3.checks["dissatisfied"]["fired"]


def test_complaint_intent_counts_as_dissatisfied(policy):
    c = known("I wish to lodge a formal complaint", "complaint", "L3")
    v = evaluate(policy, c.entities and "I wish to lodge a formal complaint", c, counters={"dissatisfied_streak": 1})
    assert v.checks["dissatisfied"]["signal"] in ("complaint", "intent:complaint") and v.rule == "dissatisfied"


@pytest.mark.parametrize("first,again", [("我的订单到哪了", "我的订单到哪了？"), ("Where is my order", "where is my order!!"),
                                         ("我的訂單到哪了", "我的订单到哪了")])
def test_same_question_twice_by_text(policy, first, again):
    v1 = evaluate(policy, first, known(first, "order_query"))
    assert v1.counters["repeat_count"] == 1 and not v1.checks["repeated_question"]["fired"]
    v2 = evaluate(policy, again, known(again, "order_query"), counters=v1.counters)
    assert v2.rule == "repeated_question" and v2.checks["repeated_question"]["by"] == "text"


def test_same_question_by_embedding(policy_file, minilm_encoder):
    p = EscalationPolicy(policy_file.escalation, policy_file.feedback, minilm_encoder)
    a, b = "how do I reset my password", "how can i reset my password"
    v = evaluate(p, b, known(b, "faq"), counters={"last_question": a, "repeat_count": 1})
    chk = v.checks["repeated_question"]
    assert chk["by"] == "embedding" and chk["cosine"] >= 0.95 and v.rule == "repeated_question"
    c = "what payment methods do you accept"
    v = evaluate(p, c, known(c, "faq"), counters={"last_question": a, "repeat_count": 1})
    assert not v.checks["repeated_question"]["fired"] and v.checks["repeated_question"]["cosine"] < 0.95
    assert v.counters["repeat_count"] == 1


@pytest.mark.slow
def test_same_question_by_embedding_multilingual(policy_file, e5_encoder):
    p = EscalationPolicy(policy_file.escalation, policy_file.feedback, e5_encoder)
    same = evaluate(p, "订单到哪里了", known("x", "order_query"), counters={"last_question": "我的订单到哪了", "repeat_count": 1})
    assert same.rule == "repeated_question" and same.checks["repeated_question"]["by"] == "embedding"
    other = evaluate(p, "我的退款到哪了", known("x", "refund_request"), counters={"last_question": "我的订单到哪了"})
    assert not other.checks["repeated_question"]["fired"]


def test_low_confidence_twice_in_a_row(policy):
    v1 = evaluate(policy, "asdf qwer", unknown("asdf qwer"))
    assert not v1.checks["low_confidence"]["fired"] and v1.counters["low_confidence_streak"] == 1
    v2 = evaluate(policy, "嗯嗯那个东西", unknown("嗯嗯那个东西"), counters=v1.counters)
    assert v2.rule == "low_confidence" and v2.checks["low_confidence"]["unknown"]
    v3 = evaluate(policy, "where is my order", known("where is my order", "order_query"), counters=v1.counters)
    assert v3.counters["low_confidence_streak"] == 0 and not v3.checks["low_confidence"]["fired"]


def test_low_confidence_score_threshold_is_configurable(policy_file):
    cfg = policy_file.escalation.model_copy(update={"low_confidence_below": 0.9})
    p = EscalationPolicy(cfg, policy_file.feedback)
    v = evaluate(p, "x", known("x", "faq", confidence=0.85), counters={"low_confidence_streak": 1})
    assert v.rule == "low_confidence" and v.checks["low_confidence"]["confidence"] == 0.85


def test_loop_guard_on_the_same_state_entered_again(policy):
    v = evaluate(policy, "and what about coupons", known("x", "faq"), counters={"state_entries": {"l1_resolving": 3}})
    assert v.rule == "loop_guard" and v.checks["loop_guard"]["entries"] == 3
    v = evaluate(policy, "and what about coupons", known("x", "faq"), counters={"state_entries": {"l1_resolving": 2}})
    assert v.rule is None
    v = evaluate(policy, "x", known("x", "complaint", "L3"), counters={"state_entries": {"l3_queuing": 5}},
                 target="l3_queuing")
    assert not v.checks["loop_guard"]["fired"]          # only the configured states are guarded
    v = evaluate(policy, "x", known("x", "faq"), counters={"state_entries": {"l2_assisting": 9}}, target=None)
    assert not v.checks["loop_guard"]["fired"]          # staying in a state is not re-entering it


def test_first_rule_in_order_wins_and_all_checks_are_reported(policy, classifier):
    text = "转人工！！我的账号被盗了，还要退款800元"
    c = known(text, "account_security", "L3")
    v = evaluate(policy, text, c, counters={"dissatisfied_streak": 0})
    assert v.rule == "account_security" and v.priority == "urgent"
    fired = {name for name, chk in v.checks.items() if chk["fired"]}
    assert {"account_security", "human_request", "refund_amount"} <= fired
    assert set(v.checks) == set(RULES)


def test_nothing_fires_on_a_plain_first_question(policy):
    v = evaluate(policy, "怎么开发票", known("怎么开发票", "invoice"))
    assert v.rule is None and not any(c["fired"] for c in v.checks.values())
    assert v.counters == {"dissatisfied_streak": 0, "low_confidence_streak": 0, "repeat_count": 1,
                          "last_question": "怎么开发票"}


@pytest.mark.parametrize("text,positive", [
    ("谢谢", True), ("好的，明白了，谢谢！", True), ("thanks!", True), ("Thank you, that helped", True),
    ("thanks, but where is my refund", False), ("谢谢 退款到了吗", False), ("谢谢，还是没解决", False),
    ("thank you for nothing, useless", False),
    ("谢谢" * 30, False),
])
def test_positive_feedback(policy, text, positive):
    assert policy.is_positive_feedback(text) is positive


def test_defaults_are_safe_without_a_file():
    p = EscalationPolicy(EscalationConfig())
    assert evaluate(p, "转人工", unknown("转人工")).rule == "human_request"


# -- turns a waiting workflow claimed (an answer, a correction, a change of mind, a re-ask) ----------------------

def claimed(policy, text, c, counters=None):
    return policy.evaluate(text=text, classification=c, counters=counters or {}, target_state=None, claimed=True)


def test_answers_to_the_bots_own_question_are_never_unclear_turns(policy):
    """"100270" then "50" while a refund waits: two unplaced messages by the classifier, two answers to the flow."""
    v1 = claimed(policy, "100270", unknown("100270"))
    v2 = claimed(policy, "50", unknown("50"), counters=v1.counters)
    assert v1.rule is None and v2.rule is None
    assert v2.counters["low_confidence_streak"] == 0 and v2.checks["low_confidence"]["claimed_by_workflow"]
    # the same two messages outside a flow: the second is the second unclear turn in a row
    u1 = evaluate(policy, "100270", unknown("100270"))
    assert evaluate(policy, "50", unknown("50"), counters=u1.counters).rule == "low_confidence"


def test_a_claimed_turn_resets_the_unclear_streak(policy):
    first = evaluate(policy, "asdf qwer", unknown("asdf qwer"))
    assert first.counters["low_confidence_streak"] == 1
    answer = claimed(policy, "是的", unknown("是的"), counters=first.counters)
    after = evaluate(policy, "嗯嗯那个东西", unknown("嗯嗯那个东西"), counters=answer.counters)
    assert answer.counters["low_confidence_streak"] == 0 and after.rule is None


def test_two_confirmations_are_not_a_repeated_question(policy):
    v1 = claimed(policy, "yes", known("yes", "greeting"))
    v2 = claimed(policy, "yes", known("yes", "greeting"), counters=v1.counters)
    assert v2.rule is None and not v2.checks["repeated_question"]["fired"] and v2.counters["last_question"] is None
    # outside a flow the same question twice still fires
    q1 = evaluate(policy, "how do refunds work", known("how do refunds work", "faq"))
    assert evaluate(policy, "how do refunds work", known("how do refunds work", "faq"),
                    counters=q1.counters).rule == "repeated_question"


def test_a_guess_about_an_answer_is_not_a_request_for_a_person(policy):
    """"个人" as an invoice title, classified human_agent by the embeddings: the flow's answer, no handoff."""
    assert claimed(policy, "个人", known("个人", "human_agent", tier="L3")).rule is None
    assert claimed(policy, "personal", known("personal", "account_security", tier="L3")).rule is None


@pytest.mark.parametrize("text,rule", [("转人工", "human_request"), ("I want to talk to a real person", "human_request"),
                                       ("太差了，没用", "dissatisfied")])
def test_what_the_customer_says_outright_still_escalates_in_a_flow(policy, text, rule):
    counters = {"dissatisfied_streak": 1}
    assert claimed(policy, text, unknown(text), counters=counters).rule == rule


def test_a_refund_over_the_limit_still_escalates_in_a_flow(policy):
    text = "我要退款800元"
    assert claimed(policy, text, unknown(text)).rule == "refund_amount"


def test_rule_matched_intents_still_count_in_a_flow(policy):
    c = Classification("account_security", "L3", 1.0, "rules", {"channel": "rules"}, extract_entities("x"))
    assert claimed(policy, "my account was hacked", c).rule == "account_security"


def test_the_loop_guard_counts_only_rounds_that_got_nowhere(policy):
    """Four questions answered in one session are normal work; three rounds that ended unresolved are a loop."""
    q = "and what about coupons"
    answered = {"state_entries": {"l1_resolving": 3, "l1_resolved": 3}}
    assert evaluate(policy, q, known(q, "faq"), counters=answered).rule is None
    once = {"state_entries": {"l1_resolving": 4, "l1_resolved": 1}}
    v = evaluate(policy, q, known(q, "faq"), counters=once)
    assert v.rule == "loop_guard" and v.checks["loop_guard"]["entries"] == 3
    drafts = {"state_entries": {"l2_assisting": 3, "l2_resolved": 2}}
    assert not evaluate(policy, "x", known("x", "faq"), counters=drafts, target="l2_assisting").checks[
        "loop_guard"]["fired"]


def test_the_loop_guard_counts_no_workflow_turns(policy):
    """A fourth task in one session: workflow turns pass no target state, so the guard has nothing to count."""
    counters = {"state_entries": {"l1_resolving": 5}}
    assert claimed(policy, "100241", unknown("100241"), counters=counters).rule is None
    assert evaluate(policy, "what is the return policy", known("what is the return policy", "faq"),
                    counters=counters).rule == "loop_guard"


@pytest.mark.parametrize("text", ["are you actually a person", "tell me if you are a human or a computer",
                                  "are you a real person?", "你到底是不是真人", "is this a bot or a human"])
def test_questions_about_the_bot_are_not_requests_for_a_person(policy, text):
    v = evaluate(policy, text, known(text, "human_agent", tier="L3"))
    assert v.rule is None and v.checks["human_request"]["identity_question"]


@pytest.mark.parametrize("text", ["I want to talk to a real person", "let me speak to a human", "转人工",
                                  "你是机器人吗 我要找人工"])
def test_requests_for_a_person_are_still_requests(policy, text):
    assert evaluate(policy, text, unknown(text)).rule == "human_request"
