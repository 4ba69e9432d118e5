"""``handoff: {tier: L2|L3, reason: TEXT}``: a person takes the conversation over, with the flow's state."""

from __future__ import annotations

from typing import Any

from automation.workflows.checks import WorkflowChecks
from automation.workflows.model import Step, StepSpec
from automation.workflows.steps.base import Outcome, StepContext, StepKind, spec_of


class HandoffSpec(StepSpec):
    handoff: dict[str, Any]                # {tier: L2|L3, reason}
    reply: Any = None


class Handoff(StepKind):
    name = "handoff"
    spec = HandoffSpec

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p, h = step.raw["_path"], step.arg
        if not isinstance(h, dict) or h.get("tier") not in ("L2", "L3") or not isinstance(h.get("reason"), str):
            ck.err(p + ("handoff",), "expected {tier: L2|L3, reason: TEXT}")
        if "reply" in step.raw:
            ck.text(step.raw["reply"], p + ("reply",))

    def run(self, ctx: StepContext) -> Outcome:
        run, sp = ctx.run, spec_of(ctx.step, HandoffSpec)
        say = run.text(sp.reply) or None
        run.escalate(sp.handoff["tier"], sp.handoff["reason"], say=say)
        return "stop"
