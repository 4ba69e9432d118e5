"""``call: TOOL``: call a tool through the gateway (a write with its idempotency key) and bind its result."""

from __future__ import annotations

import time
from typing import Any

from automation.tools.base import Caller
from automation.workflows.checks import WorkflowChecks
from automation.workflows.expr import evaluate_value
from automation.workflows.model import ID, RISK_ORDER, Step, StepSpec
from automation.workflows.runtime import jsonable
from automation.workflows.steps.base import Outcome, StepContext, StepKind, spec_of


class CallSpec(StepSpec):
    call: str                              # the tool
    args: dict[str, Any] | None = None     # argument -> CEL (lists and nested maps allowed)
    bind: str | None = None                # the name its result is bound to


class Call(StepKind):
    name = "call"
    spec = CallSpec

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p = step.raw["_path"]
        ts = ck.tool(step.arg, p + ("call",))
        ck.arguments(ts, step.raw.get("args"), p + ("args",))
        if "bind" in step.raw and (not isinstance(step.raw["bind"], str) or not ID.match(step.raw["bind"])):
            ck.err(p + ("bind",), "bind names the result (lower case letters, digits and _)")
        risk = getattr(ts, "risk", "read") if ts is not None else "read"
        if risk not in RISK_ORDER:
            ck.err(p + ("call",), f"tool {step.arg!r} has an unknown risk {risk!r}")
            risk = "money"
        ck.risk_of[step.id] = risk

    def run(self, ctx: StepContext) -> Outcome:
        run, inst, wf, step = ctx.run, ctx.inst, ctx.wf, ctx.step
        sp = spec_of(step, CallSpec)
        name = sp.call
        tools = run.services.tools
        approved = inst["pending"].get("approved_call") or {}
        if approved.get("step") == step.id:
            args = approved["arguments"]
        else:
            args = evaluate_value(sp.args or {}, run.scope())
        risk = getattr(tools.spec(name), "risk", "read")
        key = run.idempotency_key(step) if RISK_ORDER.get(risk, 2) > 0 else None
        caller = run.caller
        assert caller is not None, "a flow's step runs for a caller"
        who = Caller(channel=caller.channel, customer_id=caller.customer_id,
                     conversation_id=caller.conversation_id or inst["conversation_id"],
                     turn_id=caller.turn_id, purpose=wf.name)
        result = run.call_tool(name, args, who, key)
        run.tool_status = result.status
        inst["history"].append({"step": step.id, "event": "call", "tool": name, "status": result.status,
                                "idempotency_key": key, "call_id": result.call_id, "at": time.time()})
        if not result.ok:
            return run.fail(step, f"{name}: {result.status}" + (f" ({result.error})" if result.error else ""))
        if approved.get("step") == step.id:
            inst["pending"].pop("approved_call", None)
        inst["pending"].pop("error", None)
        inst["attempts"].pop(step.id, None)
        if sp.bind is not None:
            inst["bindings"][sp.bind] = jsonable(result.output)
        return "next"
