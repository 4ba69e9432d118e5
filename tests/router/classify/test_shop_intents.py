"""The bundled intents start the bundled workflows: the first message of every scripted shop conversation
(tests/automation/shop_conversations.jsonl) is classified with the bundled classifier (e5), and the workflow
serving that intent must be the conversation's; the FAQ questions asked mid-flow must be another intent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from automation.workflows.spec import load_workflows
from routing_kit import classifier_for

pytestmark = pytest.mark.slow

CASES = [json.loads(line) for line in (Path(__file__).resolve().parents[2] / "automation" / "shop_conversations.jsonl")
         .read_text(encoding="utf-8").splitlines() if line.strip()]


def test_every_first_message_starts_its_workflow_and_drift_is_another_intent(e5_encoder, tmp_path):
    clf = classifier_for(e5_encoder, tmp_path)   # the bundled intents on e5, fitted once per run (routing tests too)
    workflows = load_workflows(None)
    missed, per_workflow = [], {}
    for case in CASES:
        text = case["turns"][0]
        c = clf.classify(text)
        wf = workflows.for_intent(c.intent) if c.intent else None
        row = per_workflow.setdefault(case["workflow"], [0, 0])
        row[1] += 1
        if wf is not None and wf.name == case["workflow"]:
            row[0] += 1
        else:
            missed.append((text, c.intent, round(c.confidence, 2)))
    drift = [t for case in CASES for t in case["turns"] if isinstance(t, dict) and t.get("intent") == "faq"]
    wrong_drift = []
    for t in drift:
        c = clf.classify(t["text"])
        if c.intent is not None and workflows.for_intent(c.intent) is not None:
            wrong_drift.append((t["text"], c.intent))
    print({wf: f"{a}/{n}" for wf, (a, n) in per_workflow.items()}, missed)
    assert all(a == n for a, n in per_workflow.values()), missed
    assert drift and wrong_drift == []


# an order named by what is in it (the sample shop's items; the intents' examples name other things)
NAMED_BY_ITEM = ["我的不粘锅到了吗", "我的不粘锅什么时候到的？", "where's my lamp?", "when will my boots arrive",
                 "毛巾发货了没有", "我的台灯到哪了", "has my hose shipped"]


def test_an_order_named_by_its_item_is_an_order_question(e5_encoder, tmp_path):
    clf = classifier_for(e5_encoder, tmp_path)
    workflows = load_workflows(None)
    wrong = []
    for text in NAMED_BY_ITEM:
        c = clf.classify(text)
        wf = workflows.for_intent(c.intent) if c.intent else None
        if wf is None or wf.name != "order_status":
            wrong.append((text, c.intent, round(c.confidence, 2)))
    assert not wrong, wrong


def test_intents_that_lead_to_one_workflow_pool_their_evidence(e5_encoder, tmp_path):
    clf = classifier_for(e5_encoder, tmp_path)
    workflows = load_workflows(None)
    pools = [wf.intents for wf in workflows.workflows.values() if len(wf.intents) > 1]
    # said alone, the evidence splits between order_query and shipping_status (both the order lookup): no intent
    split = ["where is my lamp now?", "我的大米到哪了？", "我的大米到哪了"]
    assert all(clf.classify(t).intent is None for t in split), [(t, clf.classify(t).confidence) for t in split]
    wrong = []
    for text in split:
        c = clf.classify(text, pools=pools)
        wf = workflows.for_intent(c.intent) if c.intent else None
        if wf is None or wf.name != "order_status" or not c.explanation.get("pooled"):
            wrong.append((text, c.intent, round(c.confidence, 2)))
    assert not wrong, wrong
    # what no task pools keeps its intent, out of scope stays out
    for text, intent in [("how long do refunds take?", "faq"), ("cancel it", "cancel_order"),
                         ("what's the weather", None), ("the lamp one", None)]:
        assert clf.classify(text, pools=pools).intent == intent, text
