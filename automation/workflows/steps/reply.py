"""``reply: TEXT``: say something (CEL holes filled) and go on."""

from __future__ import annotations

from typing import Any

from automation.workflows.checks import WorkflowChecks
from automation.workflows.model import Step, StepSpec
from automation.workflows.steps.base import Outcome, StepContext, StepKind, spec_of


class ReplySpec(StepSpec):
    reply: Any                             # {zh, en} or one text, a template
    quick_replies: Any = None


class Reply(StepKind):
    name = "reply"
    pure = True
    spec = ReplySpec

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        ck.text(step.arg, step.raw["_path"] + ("reply",))

    def run(self, ctx: StepContext) -> Outcome:
        run, sp = ctx.run, spec_of(ctx.step, ReplySpec)
        run.say(run.text(sp.reply))
        if sp.quick_replies:
            run.quick = list(sp.quick_replies)
        return "next"
