"""Why a flow failed is in the log (WARNING, masked) and in the turn (``FlowTurn.failure``, which the router
puts in the trace and ``switchboard trace`` prints), not only in ``flow_instances.history``: a tool that fails
(the second shop's own refusal, over real MCP) and a CEL error at run time."""

from __future__ import annotations

import logging

from automation.tools import Caller

BROKEN_CEL = """
version: 1
workflows:
  broken_cel:
    description: {zh: 坏表达式, en: a broken expression}
    slots:
      n: {}
    steps:
      - id: load_profile
        call: get_customer_profile
        bind: profile
      - id: count
        set: {n: "int(profile.email)"}
      - id: done
        reply: {zh: "好了", en: "done {{ slots.n }}"}
      - end: completed
"""


def test_a_failed_tool_and_a_cel_error_are_logged_masked_and_returned_with_the_turn(engine, shop, turn, caplog,
                                                                                   tmp_path):
    from automation.workflows.engine import FlowEngine
    from automation.workflows.spec import load_workflows
    from flow_testkit import RecordingApprovals

    caller = Caller("web", "cus_ava", conversation_id="conv-failure")
    shop.shop("debug_reset")
    shop.shop("debug_fail", tool="cancel_pending_order", times=1)
    t = turn(engine.start, "cancel_pending", caller, "cancel all pending", {}, "en")
    t = turn(engine.advance, t.instance_id, caller, "no longer needed", {}, "en")
    with caplog.at_level(logging.WARNING, logger="automation.workflows"):
        t = turn(engine.advance, t.instance_id, caller, "yes", {}, "en")
    assert t.failure and "cancel_pending_order: error" in t.failure and "temporarily unavailable" in t.failure
    logged = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "automation.workflows"]
    assert logged and "cancel_pending" in logged[-1].getMessage() and "temporarily unavailable" in logged[-1].getMessage()

    (tmp_path / "w.yaml").write_text(BROKEN_CEL, encoding="utf-8")
    broken = FlowEngine(load_workflows(tmp_path / "w.yaml", tools=shop.gateway), shop.gateway, RecordingApprovals())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="automation.workflows"):
        t = turn(broken.start, "broken_cel", Caller("web", "cus_ava", conversation_id="conv-cel"), "go", {}, "en")
    assert t.status == "escalated" and t.failure and "expression failed" in t.failure
    message = " ".join(r.getMessage() for r in caplog.records if r.name == "automation.workflows")
    assert "expression failed" in message
    assert "@" not in message and "@" not in t.failure   # the customer's e-mail the CEL error quotes is masked


def test_switchboard_trace_prints_the_flow_failure():
    from router.cli.trace import render

    turn_ = {"at": "2026-12-03T10:00:00", "session_no": 1, "inbound": {"text": "yes"}, "decision": {},
             "classification": {}, "flow": {"workflow": "cancel_pending", "status": "waiting",
                                            "failure": "step cancel_one failed (attempt 1): cancel_pending_order: "
                                                       "error"},
             "state_after": "l1_resolving", "outbound": [], "events_after": []}
    text = render({"conversation": {"external_id": "c", "channel": "web", "customer_id": "x", "id": "1",
                                    "state": "l1_resolving", "session_no": 1}, "turns": [turn_], "sessions": []})
    assert "! flow failure: step cancel_one failed (attempt 1): cancel_pending_order: error" in text
