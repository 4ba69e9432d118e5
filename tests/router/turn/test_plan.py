"""The decider's routing order (router.turn.plan) over a table of cases: plain facts in, a route out.

No database, no model: each case states what the turn knows of a message (classification, the intent's
declarations, a waiting flow's reading, the escalation rules' verdict) and the route the order gives it. The
turns behind these rows run end to end in test_everyday_decide.py, test_listening*.py and test_routing_set.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from router.turn.plan import (CLAIMED, TIER_STATE, Act, Facts, Thanks, Verdict, after_thanks, choose, frame,
                              target_state)


def facts(**kw) -> Facts:
    base = {"intent": "order_status", "tier": "L1", "decided_by": "embeddings", "identity_reply": True}
    return Facts(**{**base, **kw})


def route(f: Facts, v: Verdict | None = None, task: str | None = None):
    return choose(f, frame(f), v or Verdict(), task=task)


GREETING = ("reply", "greeting")
ESCALATE = Verdict(escalate=True, rule="dissatisfied")


@pytest.mark.parametrize("case, f, v, task, act, expect", [
    # 1. small talk: the template, counters untouched; unless a flow waits, a rule fires or the customer is unhappy
    ("greeting", facts(intent="greeting", served=GREETING), None, None, Act.SMALL_TALK,
     {"template": "greeting", "save_verdict": False}),
    ("greeting while a flow waits: the flow's, the template mid-flow", facts(intent="greeting", served=GREETING,
     reading="answer"), None, None, Act.TIER, {"template": "greeting", "run_flow": True}),
    ("greeting with a rule fired", facts(intent="greeting", served=GREETING), ESCALATE, None, Act.ESCALATE, {}),
    ("'actually, the other one' the embeddings heard as a goodbye: the finished task restarts",
     facts(intent="goodbye", served=("reply", "goodbye"), restart="order_status"), None, None, Act.TIER,
     {"restart": "order_status", "template": "goodbye"}),
    ("'are you a real person?' matched by a small-talk rule", facts(intent="bot_identity", decided_by="rules",
     served=("reply", "bot_identity")), Verdict(escalate=True, rule="human_request"), None, Act.SMALL_TALK,
     {"template": "bot_identity"}),
    ("a person asked for in words the embeddings matched", facts(intent="greeting", served=GREETING),
     Verdict(escalate=True, rule="human_request"), None, Act.ESCALATE, {}),
    ("greeting with a dissatisfied word", facts(intent="greeting", served=GREETING), Verdict(dissatisfied=True),
     None, Act.TIER, {"template": "greeting"}),
    ("the classifier heard 'a person'; it was who is talking", facts(intent="human_agent", tier="L3"),
     Verdict(identity_question=True), None, Act.SMALL_TALK, {"template": "bot_identity"}),
    ("... and the policy has no bot_identity template", facts(intent="human_agent", tier="L3", identity_reply=False),
     Verdict(identity_question=True), None, Act.TIER, {"tier": "L3", "template": None}),
    # a change of mind with nothing waiting: nothing to stop, the task its words name is not started
    ("'算了，不退了' with nothing waiting", facts(intent="refund_request", decided_by="rules", drops_task=True),
     None, "refund", Act.SMALL_TALK, {"template": "never_mind", "save_verdict": False, "run_flow": False}),
    ("... with a rule fired", facts(intent=None, drops_task=True), ESCALATE, None, Act.ESCALATE, {}),
    # a value for the task that just ended refused ("21 Oak Road…" after "can no longer be changed"): why not,
    # never an unclear turn; a rule that only counts such turns never escalates it, a person asked for does
    ("a value for a task just refused", facts(intent=None, reading="ended"), Verdict(low_confidence_streak=2),
     None, Act.SMALL_TALK, {"template": "task_ended", "save_verdict": False}),
    ("... the low-confidence rule fired on it", facts(intent=None, reading="ended"),
     Verdict(escalate=True, rule="low_confidence", low_confidence_streak=2), None, Act.SMALL_TALK,
     {"template": "task_ended"}),
    ("... with a person asked for", facts(intent=None, reading="ended"), Verdict(escalate=True, rule="human_request"),
     None, Act.ESCALATE, {}),
    # a bare "yes" / "好的" with nothing waiting: what can I help with, however often it is said
    ("'yes' with nothing pending, heard as a greeting", facts(intent="greeting", served=GREETING, consents=True),
     None, None, Act.SMALL_TALK, {"template": "consent", "save_verdict": False}),
    ("'是的' out of scope, said again", facts(intent=None, consents=True),
     Verdict(escalate=True, rule="repeated_question", low_confidence_streak=2), None, Act.SMALL_TALK,
     {"template": "consent"}),
    ("'ok' while a flow waits: the flow's", facts(consents=True, reading="answer"), None, None, Act.TIER,
     {"run_flow": True}),
    ("'yes' with a dissatisfied rule fired", facts(intent=None, consents=True), ESCALATE, None, Act.ESCALATE, {}),
    # a question of an intent with topics is answered (L1), never started as its task
    ("a question with topics", facts(intent="return_policy", tier="L2", form="question", topics=True), None, None,
     Act.TIER, {"tier": "L1", "asking": True, "run_flow": False}),
    ("a question about the customer's own order", facts(intent="return_policy", tier="L2", form="question",
     topics=True, own_order=True), None, "return_request", Act.TIER,
     {"tier": "L2", "asking": False, "run_flow": True, "workflow": "return_request"}),
    ("a question without a knowledge base", facts(intent="return_policy", tier="L2", form="question", topics=True,
     knowledge_base=False), None, None, Act.TIER, {"tier": "L2", "asking": False}),
    # a statement of a problem ("my coupon doesn't work") is asked as a question, unless it is about the customer's
    # own data (the lookup answers it) or their account's safety
    ("a problem told as a statement", facts(intent="technical_issue", tier="L2", problem=True, topics=True), None,
     None, Act.TIER, {"tier": "L1", "asking": True, "run_flow": False}),
    ("... of an intent without topics", facts(intent="technical_issue", tier="L2", problem=True), None, None,
     Act.TIER, {"tier": "L2", "asking": False}),
    ("... of a lookup", facts(intent="order_status", tier="L1", problem=True, topics=True,
     served=("workflow", "order_status")), None, None, Act.SERVE_WORKFLOW, {"asking": False}),
    ("... of an account with a sign of a hacked one", facts(intent="account_security", tier="L3", problem=True,
     topics=True, security=True), Verdict(escalate=True, rule="account_security"), None, Act.ESCALATE, {}),
    ("a request of an intent with topics", facts(intent="return_policy", tier="L2", form="request", topics=True),
     None, "return_request", Act.TIER, {"tier": "L2", "asking": False, "workflow": "return_request"}),
    ("an account question without a sign of a hacked account", facts(intent="account_security", tier="L3",
     security=True, topics=True), None, None, Act.TIER, {"tier": "L1", "asking": True, "run_flow": False}),
    ("... with one", facts(intent="account_security", tier="L3", security=True, topics=True),
     Verdict(escalate=True, rule="account_security"), None, Act.ESCALATE, {"asking": False}),
    ("... heard in a waiting flow's answer ('不对，是已签收那个' at a confirmation): the flow's", facts(
     intent="account_security", tier="L3", security=True, topics=True, reading="answer"), None, None, Act.TIER,
     {"asking": False, "run_flow": True}),
    # 2. a corrected task restarts first; when it runs no flow, the rest of the order follows
    ("a correction", facts(intent=None, tier="L2", restart="order_status"), Verdict(low_confidence_streak=1), None,
     Act.CLARIFY, {"restart": "order_status"}),
    ("a correction with a rule fired", facts(restart="order_status"), ESCALATE, None, Act.ESCALATE,
     {"restart": None}),
    # 3. out of scope: clarify once, then the unknown tier (the low-confidence rule fires on its own)
    ("out of scope, first", facts(intent=None, tier="L2"), Verdict(low_confidence_streak=1), None, Act.CLARIFY, {}),
    ("out of scope, second", facts(intent=None, tier="L2"), Verdict(low_confidence_streak=2), None, Act.TIER,
     {"tier": "L2"}),
    ("out of scope, policy escalates at once", facts(intent=None, tier="L2", clarify_unknown=False), None, None,
     Act.TIER, {"tier": "L2"}),
    ("out of scope while a flow waits", facts(intent=None, tier="L2", reading="unclear"), None, None, Act.TIER,
     {"run_flow": True}),
    # 4. `serve: workflow` without an engine to run it
    ("the customer's own data, no engine", facts(served=("workflow", "order_status"), flows=False), None, None,
     Act.SERVE_WORKFLOW, {"workflow": "order_status"}),
    ("the customer's own data, the engine runs it", facts(served=("workflow", "order_status")), None,
     "order_status", Act.TIER, {"workflow": "order_status", "run_flow": True}),
    # a lookup barely preferred to a question with topics: the knowledge base may answer first, the lookup after
    ("a close question, the engine runs the lookup", facts(served=("workflow", "order_status"),
     close_question=True), None, "order_status", Act.TIER,
     {"answer_first": True, "run_flow": True, "workflow": "order_status"}),
    ("a close question, no engine", facts(served=("workflow", "order_status"), flows=False, close_question=True),
     None, None, Act.SERVE_WORKFLOW, {"answer_first": True}),
    ("a close question with a rule fired", facts(served=("workflow", "order_status"), close_question=True),
     ESCALATE, "order_status", Act.ESCALATE, {"answer_first": False}),
    ("a lookup said plainly", facts(served=("workflow", "order_status")), None, "order_status", Act.TIER,
     {"answer_first": False, "run_flow": True}),
    # 5. a digression from a waiting flow
    ("a digression", facts(intent="return_policy", reading="digression"), None, None, Act.DIGRESSION,
     {"template": None}),
    ("small talk as a digression", facts(intent="greeting", served=GREETING, reading="digression"), None, None,
     Act.DIGRESSION, {"template": "greeting"}),
    ("a digression with a rule fired", facts(reading="digression"), ESCALATE, None, Act.ESCALATE, {}),
    ("a question mid-task of an intent with topics and a task: answered, not started as its task",
     facts(intent="shipping", form="question", topics=True, reading="digression"), None, "order_status",
     Act.DIGRESSION, {"asking": True, "tier": "L1"}),
    ("the same about the customer's own order: the lookup", facts(intent="shipping", form="question", topics=True,
     own_order=True, reading="digression"), None, "order_status", Act.DIGRESSION, {"asking": False}),
    # 6./7. an escalation, else the flow engine, then the tier
    ("an L3 intent", facts(intent="complaint", tier="L3"), None, None, Act.TIER, {"tier": "L3", "run_flow": True}),
    ("a tier the order does not know", facts(tier="L9"), None, None, Act.TIER, {"tier": "L2"}),
    ("no engine", facts(flows=False), None, None, Act.TIER, {"tier": "L1", "run_flow": False}),
])
def test_the_routing_order(case, f, v, task, act, expect):
    r = route(f, v, task)
    assert r.act is act, case
    for key, value in expect.items():
        assert getattr(r, key) == value, f"{case}: {key}"


@pytest.mark.parametrize("f, task, target", [
    (facts(), None, "l1_resolving"),
    (facts(tier="L3"), None, "l3_queuing"),
    (facts(tier="L9"), None, "l2_assisting"),
    (facts(intent="greeting", served=GREETING), None, None),          # small talk: no state to enter
    (facts(reading="answer"), None, None),                             # the flow's own answer
    (facts(reading="digression"), None, "l1_resolving"),               # a digression is a new request
    (facts(restart="order_status"), None, None),                       # a corrected task
    (facts(intent=None, drops_task=True), None, None),                 # "never mind": not an unclear turn
    (facts(intent=None, reading="ended"), None, None),                 # about the task just refused
    (facts(intent=None, consents=True), None, None),                   # a bare "yes": not an unclear turn
    (facts(), "order_status", None),                                   # a workflow's turns are normal work
    (facts(tier="L2", form="question", topics=True), "return_request", "l1_resolving"),   # answered, not started
])
def test_the_escalation_rules_see_where_the_message_heads(f, task, target):
    fr = frame(f)
    assert target_state(fr, task=None if fr.asking else task) == target


def test_every_reading_but_a_digression_is_the_flows_own():
    from automation.workflows.listening import CLAIMED as ENGINE_CLAIMED, READINGS

    assert CLAIMED == ENGINE_CLAIMED
    assert set(READINGS) - CLAIMED == {"digression"}
    for reading in READINGS:
        fr = frame(facts(reading=reading))
        assert fr.claimed is (reading != "digression")
        assert not fr.asking


def test_the_tiers_are_the_states_the_conversation_enters():
    from router.turn.state import TRANSITIONS

    assert set(TIER_STATE.values()) <= set(TRANSITIONS["classifying"])


@pytest.mark.parametrize("flow_active, offered, reading, then", [
    (False, False, None, Thanks.CLOSE),                 # "thanks" after an answer
    (True, True, None, Thanks.LAPSE_AND_CLOSE),         # ... an open offer just lapses
    (True, True, "unclear", Thanks.LAPSE_AND_CLOSE),
    (True, True, "cancel", Thanks.ROUTE),               # "no thanks" to "shall I start it?" answers the offer
    (True, True, "answer", Thanks.ROUTE),
    (True, False, None, Thanks.ROUTE),                  # a flow at work gets the message
])
def test_a_thank_you_after_an_answer(flow_active, offered, reading, then):
    assert after_thanks(flow_active=flow_active, offered=offered, offer_reading=reading) is then


def test_a_route_is_a_value():
    """Routes compare by value and cannot be changed on the way (the decider runs what the plan said)."""
    f = facts(form="question", topics=True)
    assert route(f) == route(replace(f))
    with pytest.raises(AttributeError):
        route(f).tier = "L3"  # type: ignore[misc]
