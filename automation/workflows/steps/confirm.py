"""``confirm: TEXT``: state the action (its summary) and read yes, no, or a corrected value."""

from __future__ import annotations

import re
from typing import Any

from automation.workflows import understand as U
from automation.workflows.checks import WorkflowChecks
from automation.workflows.expr import evaluate_bool, evaluate_value
from automation.workflows.model import RISK_ORDER, Step, StepSpec
from automation.workflows.runtime import FlowRun, jsonable, t
from automation.workflows.steps import answers as A
from automation.workflows.steps.base import Outcome, StepContext, StepKind, ask_step_of


def pending_action(run: FlowRun, step: Step) -> dict[str, Any] | None:
    """The action(s) the customer is asked to confirm, with their arguments, as the channel shows them."""
    pa = step.get("pending_action")
    if not pa:
        return None
    scope = run.scope()
    if isinstance(pa, list):   # several actions confirmed together: each that applies, in order
        actions = [{"tool": e["tool"], "arguments": jsonable(evaluate_value(e.get("arguments") or {}, scope)),
                    "summary": run.text(e.get("summary"))}
                   for e in pa if "when" not in e or evaluate_bool(e["when"], scope)]
        return {"actions": actions, "summary": "; ".join(a["summary"] for a in actions if a["summary"])}
    return {"tool": pa["tool"], "arguments": evaluate_value(pa.get("arguments") or {}, scope),
            "summary": run.text(pa.get("summary"))}


def action_slots(step: Step) -> dict[str, str]:
    """The action's arguments taken straight from a slot (``slots.address``): argument -> slot. These are
    the values a person may correct before confirming for the customer; the others are computed."""
    pa = step.get("pending_action")
    spec = (pa.get("arguments") if isinstance(pa, dict) else None) or {}
    out: dict[str, str] = {}
    for arg, expr in spec.items():
        m = re.fullmatch(r"\s*slots\.([A-Za-z_]\w*)\s*", str(expr))
        if m:
            out[str(arg)] = m.group(1)
    return out


class ConfirmSpec(StepSpec):
    confirm: Any                           # the question, {zh, en}
    pending_action: Any = None             # {tool, arguments, summary} or a list of them (each with `when`)


class Confirm(StepKind):
    name = "confirm"
    spec = ConfirmSpec
    waits = True

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p = step.raw["_path"]
        ck.text(step.arg, p + ("confirm",))
        pa = step.raw.get("pending_action")
        entries = [(pa, p + ("pending_action",))] if not isinstance(pa, list) else \
            [(e, p + ("pending_action", j)) for j, e in enumerate(pa)]   # several actions confirmed together
        for entry, ep in entries if pa is not None else []:
            if not isinstance(entry, dict):
                ck.err(ep, "expected {tool, arguments, summary} (or a list of them, each with an optional when)")
                continue
            ts = ck.tool(entry.get("tool"), ep + ("tool",))
            ck.arguments(ts, entry.get("arguments"), ep + ("arguments",))
            ck.text(entry.get("summary"), ep + ("summary",))
            if "when" in entry:
                ck.expr(entry["when"], ep + ("when",))
            if ts is not None:
                r = getattr(ts, "risk", "read")
                if RISK_ORDER.get(r, 2) >= RISK_ORDER.get(ck.risk_of.get(step.id, "read"), 0):
                    ck.risk_of[step.id] = r

    def run(self, ctx: StepContext) -> Outcome:
        run, inst, wf, step, text = ctx.run, ctx.inst, ctx.wf, ctx.step, ctx.text
        if text is None:
            run.prompt(step, again=False)
            return "wait"
        answer = U.yes_no(text, ctx.entities)
        if answer is not True:
            fix = A.free_correction(inst, wf, step, text) or A.correction(inst, wf, text, ctx.entities)
            if fix is not None and (answer is False or U.is_correction(text) or answer is None):
                slot, value = fix
                A.apply_correction(inst, wf, step, slot, value)
                ask = ask_step_of(wf, slot)
                return ask.id if ask is not None else step.id
            # "no, the other one": the earlier pick, taken again (neither yes nor no: the other option named alone)
            back = A.repick(run, step, text, bare=answer is None)
            if back is not None:
                inst["pending"].pop("action", None)
                return back
        if answer is True:
            inst["pending"].pop("action", None)
            inst["attempts"].pop(step.id, None)
            return "next"
        if answer is False:
            inst["pending"].pop("action", None)
            target = step.get("on_reject")
            if isinstance(target, dict):
                run.jump(target)
                return str(target["goto"])
            run.cancel()
            return "stop"
        if answer is None and A.restated(inst, wf, text, ctx.entities) is not None:
            # the value shown, said again: the question again without "sorry, I didn't catch that" (still counted,
            # so a customer who never says yes or no reaches a person as before)
            return run.retry(step, "the value shown was restated, no yes or no", quiet=True)
        return run.retry(step, "no yes or no in the answer", told=text)

    def prompt(self, run: FlowRun, step: Step, *, with_prompt: bool = True) -> None:
        run.inst["pending"]["action"] = pending_action(run, step)
        run.say(run.text(step.arg))
        run.quick = [t("confirm_yes", run.lang), t("confirm_no", run.lang)]
        run.awaiting = "confirmation"

    def strength(self, run: FlowRun, step: Step, text: str, entities: dict[str, Any]) -> str | None:
        return "strong" if U.yes_no(text, entities) is not None else None
