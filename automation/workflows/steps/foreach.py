"""``foreach: CEL, as: NAME, steps: [...]``: run the body once per item of a list."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from automation.workflows.checks import WorkflowChecks
from automation.workflows.expr import ExpressionError, evaluate
from automation.workflows.model import Step, StepSpec
from automation.workflows.runtime import jsonable
from automation.workflows.steps.base import Outcome, StepContext, StepKind, spec_of


class ForeachSpec(StepSpec):
    foreach: str                           # CEL: the list
    as_: str = Field(alias="as")           # the loop variable
    steps: list[Any]                       # the body (its steps are steps of the workflow)


class Foreach(StepKind):
    name = "foreach"
    spec = ForeachSpec

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        ck.expr(step.arg, step.raw["_path"] + ("foreach",))

    def run(self, ctx: StepContext) -> Outcome:
        run, inst, step = ctx.run, ctx.inst, ctx.step
        sp = spec_of(step, ForeachSpec)
        lp = inst["loops"].get(step.id)
        if lp is None:
            items = evaluate(sp.foreach, run.scope())
            if not isinstance(items, list):
                raise ExpressionError(f"{sp.foreach}: foreach needs a list")
            lp = {"items": jsonable(items), "index": 0}
            inst["loops"][step.id] = lp
        else:
            lp["index"] += 1
        for name in sp.reset or []:   # each item starts from these slots unfilled
            inst["slots"].pop(name, None)
        if lp["index"] >= len(lp["items"]):
            inst["loops"].pop(step.id)
            return run.after(step)
        return step.body[0]
