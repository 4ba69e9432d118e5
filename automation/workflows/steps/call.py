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
    repeat: bool = False                   # the same write may be made again in this conversation
    already: Any = None                    # {zh, en} said when it was already done (CEL: earlier.result, ...)


class Call(StepKind):
    name = "call"
    spec = CallSpec

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p = step.raw["_path"]
        ts = ck.tool(step.arg, p + ("call",))
        ck.arguments(ts, step.raw.get("args"), p + ("args",))
        if "repeat" in step.raw and not isinstance(step.raw["repeat"], bool):
            ck.err(p + ("repeat",), "repeat is true (the same write may be made twice in a conversation) or false")
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
        result = run.call_tool(name, args, who, key, repeat=sp.repeat)
        run.tool_status = result.status
        earlier = getattr(result, "earlier", None)
        inst["history"].append({"step": step.id, "event": "call", "tool": name, "status": result.status,
                                "idempotency_key": key, "call_id": result.call_id, "at": time.time(),
                                **({"earlier": earlier} if earlier else {})})
        if result.ok and earlier and earlier.get("via") == "conversation":
            return _already_done(run, step, sp, name, result.output, earlier)
        if not result.ok:
            return run.fail(step, f"{name}: {result.status}" + (f" ({result.error})" if result.error else ""))
        if key is not None:
            run.memo.pop("done", None)   # CEL `done` is read again with this write
            run.wrote(who)
        if approved.get("step") == step.id:
            inst["pending"].pop("approved_call", None)
        inst["pending"].pop("error", None)
        inst["attempts"].pop(step.id, None)
        if sp.bind is not None:
            inst["bindings"][sp.bind] = jsonable(result.output)
        return "next"


_ALREADY = {"zh": "这个操作在本次对话中已经完成，没有再做一次。", "en": "This was already done earlier in this "
            "conversation, so I did not do it again."}


def _already_done(run: Any, step: Step, sp: CallSpec, name: str, output: Any, earlier: dict[str, Any]) -> Outcome:
    """The same write (tool and arguments) succeeded earlier in the conversation: say so, with the shop's
    record, and end the flow without writing again (``repeat: true`` on the step allows a second one)."""
    inst = run.inst
    same = {"tool": name, "result": jsonable(output), "at": earlier.get("at"), "call_id": earlier.get("call_id")}
    inst["bindings"]["earlier"] = same
    if sp.bind is not None:
        inst["bindings"][sp.bind] = same["result"]
    run.say(run.text(sp.already, earlier=same) if sp.already else _ALREADY.get(run.lang, _ALREADY["en"]))
    run.finish("completed", "already_done")
    return "stop"
