"""``clear: [SLOT, ...]``: forget slots, so the ask or choose steps after it ask them again (another item)."""

from __future__ import annotations

import time

from automation.workflows.checks import WorkflowChecks
from automation.workflows.model import Step, StepSpec
from automation.workflows.steps.base import Outcome, StepContext, StepKind, spec_of


class ClearSpec(StepSpec):
    clear: list[str]                       # the slots to forget


class Clear(StepKind):
    name = "clear"
    pure = True
    spec = ClearSpec

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p = step.raw["_path"]
        if not isinstance(step.arg, list) or not step.arg:
            ck.err(p + ("clear",), "expected a non-empty list of slots to forget")
            return
        for j, name in enumerate(step.arg):
            ck.slot(name, p + ("clear", j))

    def run(self, ctx: StepContext) -> Outcome:
        forgotten = [name for name in spec_of(ctx.step, ClearSpec).clear
                     if ctx.inst["slots"].pop(name, None) is not None]
        ctx.inst["history"].append({"step": ctx.step.id, "event": "cleared", "slots": forgotten, "at": time.time()})
        return "next"
