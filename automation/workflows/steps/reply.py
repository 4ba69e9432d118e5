"""``reply: TEXT``: say something (CEL holes filled) and go on."""

from __future__ import annotations

from automation.workflows.checks import WorkflowChecks
from automation.workflows.model import Step
from automation.workflows.steps.base import Outcome, StepContext, StepKind


class Reply(StepKind):
    name = "reply"
    keys = frozenset({"quick_replies"})

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        ck.text(step.arg, step.raw["_path"] + ("reply",))

    def run(self, ctx: StepContext) -> Outcome:
        run, step = ctx.run, ctx.step
        run.say(run.text(step.arg))
        if step.get("quick_replies"):
            run.quick = list(step.get("quick_replies"))
        return "next"
