"""``end: completed | cancelled``: the flow ends here (with a last reply, if any)."""

from __future__ import annotations

from typing import Any

from automation.workflows.checks import WorkflowChecks
from automation.workflows.model import Step, StepSpec
from automation.workflows.steps.base import Outcome, StepContext, StepKind, spec_of


class EndSpec(StepSpec):
    end: str                               # completed | cancelled
    reply: Any = None


class End(StepKind):
    name = "end"
    spec = EndSpec

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p = step.raw["_path"]
        if step.arg not in ("completed", "cancelled"):
            ck.err(p + ("end",), "end is 'completed' or 'cancelled'")
        if "reply" in step.raw:
            ck.text(step.raw["reply"], p + ("reply",))

    def run(self, ctx: StepContext) -> Outcome:
        run, sp = ctx.run, spec_of(ctx.step, EndSpec)
        run.say(run.text(sp.reply))
        run.finish(sp.end, sp.end)
        return "stop"
