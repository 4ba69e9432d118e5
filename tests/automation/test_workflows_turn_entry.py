"""A turn's one entry into the engine: ``listen`` reads the message once, ``on_message`` acts on that reading."""

from __future__ import annotations

from automation.tools.base import Caller
from automation.workflows.engine import FlowEngine, Listening
from automation.workflows.spec import parse_workflows

WORKFLOWS = """\
workflows:
  sizes:
    intents: [pick_size]
    slots:
      size: {validate: {enum: [S, M, L]}, prompt: {zh: "要什么尺码？", en: "Which size?"}}
    steps:
      - {id: pick, ask: size}
      - {id: done, reply: "Size {{ slots.size }}"}
  orders:
    intents: [order_status, refund_status]
    slots:
      order_id: {validate: {entity: order_id}, prompt: {zh: "订单号？", en: "Which order?"}}
    steps:
      - {id: pick, ask: order_id}
      - {id: refund, when: "intent == 'refund_status'", end: completed, reply: "Refund of {{ slots.order_id }}"}
      - {id: done, reply: "Status of {{ slots.order_id }} ({{ intent == null ? 'no intent' : intent }})"}
  colours:
    slots:
      colour: {validate: {enum: [red, blue]}, prompt: {zh: "什么颜色？", en: "Which colour?"}}
    steps:
      - {id: pick, ask: colour}
      - {id: done, reply: "Colour {{ slots.colour }}"}
"""


def _engine(approvals):
    return FlowEngine(parse_workflows(WORKFLOWS, file="wf.yaml"), None, approvals)


def _listen(engine):
    """The turn's reading: the conversation's active flow (read once per pass) and what it reads the text as."""
    return lambda conn, conversation_id, text: engine.listen(engine.active(conn, conversation_id), text)


def test_no_active_flow_listens_to_nothing_and_the_intent_starts_its_workflow(turn, approvals):
    engine, who = _engine(approvals), Caller("web", "cus_lee", "conv-entry-1")
    assert turn(_listen(engine), "conv-entry-1", "hello") is None
    assert turn(engine.on_message, who, "hello", {}, lang="en") is None          # no workflow, no intent
    t = turn(engine.on_message, who, "I need a size", {}, lang="en", intent="pick_size")
    assert (t.workflow, t.status, t.reply) == ("sizes", "waiting", "Which size?")


def test_the_reading_is_made_once_and_handed_through(turn, approvals):
    engine, who = _engine(approvals), Caller("web", "cus_lee", "conv-entry-2")
    turn(engine.on_message, who, "", {}, lang="en", workflow="sizes")
    heard = turn(_listen(engine), "conv-entry-2", "M")
    assert isinstance(heard, Listening) and heard.reading == "answer"
    # on_message acts on the reading it is given, never reads again: the same "M" taken as a digression is
    # not answered, the question is asked again
    t = turn(engine.on_message, who, "M", {}, lang="en", listening=Listening(heard.instance, "digression"))
    assert t.drift and t.status == "waiting" and t.reply == "Which size?" and t.reading == "digression"
    t = turn(engine.on_message, who, "M", {}, lang="en", listening=turn(_listen(engine), "conv-entry-2", "M"))
    assert (t.status, t.reply, t.reading) == ("completed", "Size M", "answer")


def test_a_flow_suspended_after_listening_lets_the_other_task_start(turn, approvals):
    engine, who = _engine(approvals), Caller("web", "cus_lee", "conv-entry-3")
    turn(engine.on_message, who, "", {}, lang="en", workflow="sizes")
    heard = turn(_listen(engine), "conv-entry-3", "what colours are there?")
    turn(engine.suspend, heard.instance, because="colours")
    t = turn(engine.on_message, who, "what colours are there?", {}, lang="en", listening=heard, workflow="colours")
    assert (t.workflow, t.reply) == ("colours", "Which colour?")
    t = turn(engine.on_message, who, "blue", {}, lang="en", listening=turn(_listen(engine), "conv-entry-3", "blue"))
    assert (t.workflow, t.status) == ("colours", "completed")
    resumed = turn(engine.resume, "conv-entry-3", "en")
    assert (resumed.workflow, resumed.reply) == ("sizes", "Back to your earlier request (sizes):\nWhich size?")


def test_the_intent_that_started_a_flow_is_cel_intent_for_its_whole_life(turn, approvals):
    """One workflow serving two intents answers each: CEL ``intent`` is what the message that started the flow was
    classified as, kept while the flow asks (the answer's own intent does not replace it) and through an offer
    taken up; null when the flow was started by name."""
    engine = _engine(approvals)
    who = Caller("web", "cus_lee", "conv-entry-4")
    t = turn(engine.on_message, who, "where is my refund", {}, lang="en", intent="refund_status")
    assert (t.workflow, t.status, t.reply) == ("orders", "waiting", "Which order?")
    t = turn(engine.on_message, who, "100241", {}, lang="en", intent="order_status", intent_confidence=0.9,
             listening=turn(_listen(engine), "conv-entry-4", "100241"))
    assert (t.status, t.reply) == ("completed", "Refund of 100241")
    who = Caller("web", "cus_lee", "conv-entry-5")
    t = turn(engine.on_message, who, "where is order 100242", {}, lang="en", intent="order_status")
    assert (t.status, t.reply) == ("completed", "Status of 100242 (order_status)")
    who = Caller("web", "cus_lee", "conv-entry-6")
    t = turn(engine.on_message, who, "order 100243", {}, lang="en", workflow="orders")
    assert (t.status, t.reply) == ("completed", "Status of 100243 (no intent)")
    who = Caller("web", "cus_lee", "conv-entry-7")
    offered = turn(engine.offer, "orders", who, "has the refund of 100244 arrived?", {}, lang="en",
                   intent="refund_status")
    assert offered.status == "waiting" and offered.awaiting == "offer"
    t = turn(engine.on_message, who, "yes", {}, lang="en", listening=turn(_listen(engine), "conv-entry-7", "yes"))
    assert (t.status, t.reply) == ("completed", "Refund of 100244")
