"""``ask: SLOT``: ask the customer for a slot's value and read it (its validator, or "the same as last time")."""

from __future__ import annotations

import time
from typing import Any

from automation.workflows import memory as M
from automation.workflows import understand as U
from automation.workflows.checks import WorkflowChecks
from automation.workflows.expr import ExpressionError, evaluate
from automation.workflows.model import Step, StepSpec, Workflow
from automation.workflows.runtime import FlowRun, t
from automation.workflows.steps import answers as A
from automation.workflows.steps.base import Outcome, StepContext, StepKind, ask_step_of


class AskSpec(StepSpec):
    ask: str                               # the slot
    prompt: Any = None                     # {zh, en} (default: the slot's prompt)
    quick_replies: Any = None


class Ask(StepKind):
    name = "ask"
    pure = True
    spec = AskSpec
    waits = True

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p = step.raw["_path"]
        ck.slot(step.arg, p + ("ask",))
        if step.arg in ck.wf.slots and not ck.wf.slots[step.arg].prompt and "prompt" not in step.raw:
            ck.err(p + ("ask",), f"the slot {step.arg!r} has no prompt to ask with")
        ck.template(step.raw.get("prompt"), p + ("prompt",))

    def asks_for(self, step: Step) -> str | None:
        return str(step.arg)

    def run(self, ctx: StepContext) -> Outcome:
        run, inst, wf, step, text = ctx.run, ctx.inst, ctx.wf, ctx.step, ctx.text
        name = step.arg
        if text is None:
            if name in inst["slots"]:
                return "next"
            run.prompt(step, again=False)
            return "wait"
        fix = A.fix(inst, wf, step, text, ctx.entities, run)
        if fix:
            return fix
        slot = wf.slots[name]
        if slot.free_text and not U.is_free_value(text):
            # only an order number at a free-text question (a title, an address) is no title: another order called
            # so ("order 100235", "订单100235") names that order, the one in hand said again is asked again
            # (without "sorry, I didn't catch that"); a bare other number may be the value (a tax id)
            changed = A.correction(inst, wf, text, ctx.entities, skip=name) if U.calls_it_an_order(text) else None
            if changed is not None:
                A.apply_correction(inst, wf, step, *changed)
                back = ask_step_of(wf, changed[0])
                return back.id if back is not None else step.id
            if A.restated(inst, wf, text, ctx.entities) is not None:
                return run.retry(step, f"a value in hand restated, not a {name}", quiet=True)
        if slot.recall and M.is_recall(text):
            # "the same address as last time": the value from memory, or say there is none and ask again
            value = M.recall(slot.recall, run.scope()["memory"], inst["slots"])
            if value is None or not slot.check(value):
                run.say(t("no_recall", run.lang))
                return run.retry(step, f"no remembered {name}", quiet=True)
            inst["history"].append({"step": step.id, "event": "recalled", "slot": name, "at": time.time()})
        elif slot.whole is not None and U.is_whole(text):
            # "all of it": the value the slot's ``whole`` names now (the amount left to refund)
            try:
                value = evaluate(slot.whole, run.scope())
            except ExpressionError:
                value = None
            if value is None or not slot.check(value):
                return run.retry(step, f"no whole {name}")
            inst["history"].append({"step": step.id, "event": "whole", "slot": name, "at": time.time()})
        else:
            value = A.parse_slot(wf, name, text, ctx.entities)
        if value is None:
            picked = A.repick(run, step, text, bare=True)   # "不粘锅那个" at the amount question: that order instead
            if picked is not None:
                return picked
            if A.restated(inst, wf, text, ctx.entities) is not None or (U.is_pointer(text) and A.names_pick(run, step, text)):
                # "100260" at the amount question of order 100260, "毛巾那个" at the address of the towels' order: the
                # order in hand said again, so the question again without "sorry, I didn't catch that" (still
                # counted, as at a confirmation)
                return run.retry(step, f"a value in hand restated, not a {name}", quiet=True)
            if slot.free_text and U.is_pointer(text):
                # "马克杯那个" at the address question, naming nothing to pick again: asked again with the hint,
                # never kept as something the customer told
                return run.retry(step, f"a pointer, not a {name}")
            return run.retry(step, f"no valid {name} in the answer", told=text)
        inst["slots"][name] = value
        inst["attempts"].pop(step.id, None)
        return "next"

    def prompt(self, run: FlowRun, step: Step, *, with_prompt: bool = True) -> None:
        slot = run.wf.slots[step.arg]
        run.say(run.text(step.get("prompt") or slot.prompt))
        run.quick = list(slot.quick_replies)
        run.awaiting = step.arg

    def strength(self, run: FlowRun, step: Step, text: str, entities: dict[str, Any]) -> str | None:
        slot = run.wf.slots[step.arg]
        if slot.recall and M.is_recall(text):
            return "weak" if slot.free_text else "strong"
        if slot.whole is not None and U.is_whole(text):
            return "strong"
        if slot.optional and U.is_decline(text):
            return "strong"   # "不用了" to a question one may decline (a tax id): its answer, not a change of mind
        if slot.free_text and (U.is_bare_cancel(text) or U.is_question(text)):
            return None   # "never mind" or an FAQ question is not an address or a title
        if A.parse_slot(run.wf, step.arg, text, entities) is None:
            return None
        return "weak" if slot.free_text else "strong"

    def free_text(self, wf: Workflow, step: Step) -> bool:
        return step.arg in wf.slots and wf.slots[step.arg].free_text
