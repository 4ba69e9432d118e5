"""The ``clear`` step kind (the guide's "add a step kind" example): it forgets slots so a later ask asks again."""

from __future__ import annotations

import pytest

from automation.tools.base import Caller
from automation.workflows import store
from automation.workflows.engine import FlowEngine
from automation.workflows.spec import WorkflowConfigError, parse_workflows

ZOE = Caller(channel="web", customer_id="cus_zoe", conversation_id="conv-zoe-clear")

TWO_SIZES = """\
workflows:
  two_sizes:
    slots:
      size: {validate: {enum: [S, M, L]}, prompt: {zh: "要什么尺码？", en: "Which size?"}}
    steps:
      - {id: first, ask: size}
      - {id: keep, set: {first_size: slots.size}}
      - {id: forget, clear: [size]}
      - {id: second, ask: size}
      - {id: done, reply: {zh: "{{ slots.first_size }} 和 {{ slots.size }}", en: "{{ slots.first_size }} and {{ slots.size }}"}}
"""


def test_a_cleared_slot_is_asked_again_and_the_flow_goes_on(turn, approvals, db):
    engine = FlowEngine(parse_workflows(TWO_SIZES, file="sizes.yaml"), None, approvals)
    t = turn(engine.start, "two_sizes", ZOE, "", {}, "en")
    assert (t.status, t.step, t.reply) == ("waiting", "first", "Which size?")
    t = turn(engine.advance, t.instance_id, ZOE, "M", {}, "en")
    # without the clear the second ask would find the slot filled and be skipped
    assert (t.status, t.step, t.reply) == ("waiting", "second", "Which size?")
    t = turn(engine.advance, t.instance_id, ZOE, "L", {}, "en")
    assert (t.status, t.reply) == ("completed", "M and L")
    with db() as conn:
        inst = store.get(conn, t.instance_id)
    assert inst["slots"] == {"first_size": "M", "size": "L"}
    assert [h["slots"] for h in inst["history"] if h.get("event") == "cleared"] == [["size"]]


@pytest.mark.parametrize("step, field, message", [
    ("{id: forget, clear: []}", "workflows.two_sizes.steps[2].clear", "expected a non-empty list of slots to forget"),
    ("{id: forget, clear: size}", "workflows.two_sizes.steps[2].clear", "expected a non-empty list of slots to forget"),
    ("{id: forget, clear: [size, colour]}", "workflows.two_sizes.steps[2].clear[1]",
     "unknown slot 'colour' (declared: first_size, size)"),
    ("{id: forget, clear: [size], prompt: x}", "workflows.two_sizes.steps[2].prompt",
     "unknown key 'prompt' for a clear step (allowed: goto, next, on_error, on_reject, reset, when)"),
])
def test_a_clear_of_unknown_slots_is_refused_at_load_with_its_line(step, field, message):
    text = TWO_SIZES.replace("{id: forget, clear: [size]}", step)
    with pytest.raises(WorkflowConfigError) as exc:
        parse_workflows(text, file="sizes.yaml")
    assert [(e["line"], e["field"], e["message"]) for e in exc.value.errors] == [(8, field, message)]
