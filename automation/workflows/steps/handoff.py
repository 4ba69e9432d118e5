"""``handoff: {tier: L2|L3, reason: TEXT}``: a person takes the conversation over, with the flow's state."""

from __future__ import annotations

from automation.workflows.checks import WorkflowChecks
from automation.workflows.model import Step
from automation.workflows.steps.base import Outcome, StepContext, StepKind


class Handoff(StepKind):
    name = "handoff"
    keys = frozenset({"reply"})

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p, h = step.raw["_path"], step.arg
        if not isinstance(h, dict) or h.get("tier") not in ("L2", "L3") or not isinstance(h.get("reason"), str):
            ck.err(p + ("handoff",), "expected {tier: L2|L3, reason: TEXT}")
        if "reply" in step.raw:
            ck.text(step.raw["reply"], p + ("reply",))

    def run(self, ctx: StepContext) -> Outcome:
        run, step = ctx.run, ctx.step
        say = run.text(step.get("reply")) or None
        run.escalate(step.arg["tier"], step.arg["reason"], say=say)
        return "stop"
