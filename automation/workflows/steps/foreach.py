"""``foreach: CEL, as: NAME, steps: [...]``: run the body once per item of a list."""

from __future__ import annotations

from automation.workflows.checks import WorkflowChecks
from automation.workflows.expr import ExpressionError, evaluate
from automation.workflows.model import Step
from automation.workflows.runtime import jsonable
from automation.workflows.steps.base import Outcome, StepContext, StepKind


class Foreach(StepKind):
    name = "foreach"
    keys = frozenset({"as", "steps"})

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        ck.expr(step.arg, step.raw["_path"] + ("foreach",))

    def run(self, ctx: StepContext) -> Outcome:
        run, inst, step = ctx.run, ctx.inst, ctx.step
        lp = inst["loops"].get(step.id)
        if lp is None:
            items = evaluate(step.arg, run.scope())
            if not isinstance(items, list):
                raise ExpressionError(f"{step.arg}: foreach needs a list")
            lp = {"items": jsonable(items), "index": 0}
            inst["loops"][step.id] = lp
        else:
            lp["index"] += 1
        for name in step.get("reset") or []:   # each item starts from these slots unfilled
            inst["slots"].pop(name, None)
        if lp["index"] >= len(lp["items"]):
            inst["loops"].pop(step.id)
            return run.after(step)
        return step.body[0]
