"""``end: completed | cancelled``: the flow ends here (with a last reply, if any)."""

from __future__ import annotations

from automation.workflows.checks import WorkflowChecks
from automation.workflows.model import Step
from automation.workflows.steps.base import Outcome, StepContext, StepKind


class End(StepKind):
    name = "end"
    keys = frozenset({"reply"})

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p = step.raw["_path"]
        if step.arg not in ("completed", "cancelled"):
            ck.err(p + ("end",), "end is 'completed' or 'cancelled'")
        if "reply" in step.raw:
            ck.text(step.raw["reply"], p + ("reply",))

    def run(self, ctx: StepContext) -> Outcome:
        run, step = ctx.run, ctx.step
        run.say(run.text(step.get("reply")))
        run.finish(step.arg, step.arg)
        return "stop"
