"""``approve: {amount, currency, order, evidence, call: STEP}``: a person approves above the lowest tier."""

from __future__ import annotations

import time
from typing import Any

from automation.workflows.checks import WorkflowChecks
from automation.workflows.expr import evaluate, evaluate_value
from automation.workflows.model import Step, StepSpec
from automation.workflows.runtime import TIER_WORDS, ApprovalRequest, jsonable, t
from automation.workflows.steps.base import Outcome, StepContext, StepKind, spec_of

FIELDS = ("amount", "currency", "order", "evidence", "call")


class ApproveSpec(StepSpec):
    approve: dict[str, Any]                # {amount, currency, order, evidence: CEL, call: STEP}
    waiting: Any = None
    approved: Any = None
    rejected: Any = None


class Approve(StepKind):
    name = "approve"
    spec = ApproveSpec

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p, a = step.raw["_path"], step.arg
        if not isinstance(a, dict) or "amount" not in a:
            ck.err(p + ("approve",), "expected {amount, currency, order, evidence, call: STEP}")
        else:
            for key in ("amount", "currency", "order", "evidence"):
                if key in a:
                    ck.expr(a[key], p + ("approve", key))
            if "call" in a:
                target = a["call"]
                if target not in ck.wf.steps or ck.wf.steps[target].kind != "call":
                    ck.err(p + ("approve", "call"), f"{target!r} is not a call step of this workflow")
            for key in a:
                if key not in FIELDS:
                    ck.err(p + ("approve", key), f"unknown key {key!r} (amount, currency, order, evidence, call)")
        for key in ("waiting", "approved", "rejected"):
            if key in step.raw:
                ck.text(step.raw[key], p + (key,))

    def run(self, ctx: StepContext) -> Outcome:
        run, inst, wf, step = ctx.run, ctx.inst, ctx.wf, ctx.step
        sp = spec_of(step, ApproveSpec)
        spec = sp.approve
        scope = run.scope()
        amount = float(evaluate(spec["amount"], scope))
        tier = wf.tier_for(amount)
        lowest = min(wf.approval_tiers, key=lambda k: wf.approval_tiers[k]) if wf.approval_tiers else None
        currency = evaluate(spec["currency"], scope) if "currency" in spec else None
        if tier == lowest:
            inst["history"].append({"step": step.id, "event": "auto_approved", "amount": amount, "at": time.time()})
            return "next"
        call_step = spec.get("call")
        proposed: dict[str, Any] = {"tool": None, "arguments": {}}
        if call_step:
            target = wf.steps[call_step]
            proposed = {"tool": target.arg, "arguments": jsonable(evaluate_value(target.get("args") or {}, scope))}
        request = ApprovalRequest(
            instance_id=inst["id"], conversation_id=inst["conversation_id"], workflow=wf.name, step=step.id,
            amount=amount, currency=currency, tier=tier,
            order=jsonable(evaluate(spec["order"], scope)) if "order" in spec else None,
            proposed_call=proposed,
            evidence=jsonable(evaluate(spec["evidence"], scope)) if "evidence" in spec else None,
            customer={"channel": inst["caller"].get("channel"), "customer_id": inst["caller"].get("customer_id")},
            lang=inst["lang"])
        ticket = run.services.approvals.open_approval(run.conn, request)
        inst["approval_ticket"] = str(ticket)
        inst["pending"]["approval"] = {"step": step.id, "tier": tier, "amount": amount, "currency": currency,
                                       "proposed_call": proposed, "call_step": call_step, "ticket": str(ticket)}
        inst["status"] = "waiting_approval"
        inst["history"].append({"step": step.id, "event": "approval_requested", "tier": tier, "amount": amount,
                                "ticket": str(ticket), "at": time.time()})
        run.approval = request
        run.say(run.text(sp.waiting)
                or t("waiting_approval", run.lang, amount=f"{amount:.2f}", currency=currency or "",
                     tier=TIER_WORDS.get(run.lang, {}).get(tier, tier)))
        return "stop"
