"""``check: CEL``: a condition the flow needs (the order is still pending); when it fails, a refusal, and with
``on_reject`` the customer is asked again (a number the shop does not know), the third failure ends it."""

from __future__ import annotations

import time
from typing import Any

from automation.workflows.checks import WorkflowChecks
from automation.workflows.expr import evaluate_bool
from automation.workflows.model import Step, StepSpec
from automation.workflows.runtime import MAX_ATTEMPTS
from automation.workflows.steps.base import Outcome, StepContext, StepKind, spec_of


class CheckSpec(StepSpec):
    check: str                             # CEL: the condition
    refuse: Any = None                     # {zh, en}: said when it fails


class Check(StepKind):
    name = "check"
    pure = True
    spec = CheckSpec

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p, raw = step.raw["_path"], step.raw
        ck.expr(step.arg, p + ("check",))
        if "refuse" not in raw and "next" not in raw and "goto" not in raw and "on_reject" not in raw:
            ck.err(p + ("refuse",), "a check needs a refusal text (zh, en) for when it fails")
        if "refuse" in raw:
            ck.text(raw["refuse"], p + ("refuse",))

    def run(self, ctx: StepContext) -> Outcome:
        run, step = ctx.run, ctx.step
        sp = spec_of(step, CheckSpec)
        if evaluate_bool(sp.check, run.scope()):
            return "next"
        history = ctx.inst["history"]
        history.append({"step": step.id, "event": "check_failed", "at": time.time()})
        if sp.refuse:
            run.say(run.text(sp.refuse))
        target = sp.on_reject
        failed = sum(1 for h in history if h.get("step") == step.id and h.get("event") == "check_failed")
        if isinstance(target, dict) and failed < MAX_ATTEMPTS:   # asked again, but not without end
            run.jump(target)
            return str(target["goto"])
        if "next" in step.raw or "goto" in step.raw:
            return run.after(step)
        run.finish("completed", "refused")
        return "stop"
