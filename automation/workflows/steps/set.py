"""``set: {SLOT: CEL}``: compute slots from what the flow knows (in order: a later one reads an earlier one)."""

from __future__ import annotations

from automation.workflows.checks import WorkflowChecks
from automation.workflows.expr import evaluate
from automation.workflows.model import ID, Step, StepSpec
from automation.workflows.runtime import jsonable
from automation.workflows.steps.base import Outcome, StepContext, StepKind, spec_of


class SetSpec(StepSpec):
    set: dict[str, str]                    # slot -> CEL, in order


class Set(StepKind):
    name = "set"
    pure = True
    spec = SetSpec

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p = step.raw["_path"]
        if not isinstance(step.arg, dict) or not step.arg:
            ck.err(p + ("set",), "expected a mapping of slot name to a CEL expression")
            return
        for name, src in step.arg.items():
            if not isinstance(name, str) or not ID.match(name):
                ck.err(p + ("set", name), "a slot name is lower case letters, digits and _")
            ck.expr(src, p + ("set", name))

    def writes(self, step: Step) -> list[str]:
        return list(step.arg)

    def run(self, ctx: StepContext) -> Outcome:
        inst = ctx.inst
        scope = ctx.run.scope()
        for name, source in spec_of(ctx.step, SetSpec).set.items():
            inst["slots"][name] = jsonable(evaluate(source, scope))
            scope["slots"] = {**scope["slots"], **inst["slots"]}
        return "next"
