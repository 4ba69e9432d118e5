"""``split: SLOT``: several requests in one message, each an item of the slot's list (kind, item, change...)."""

from __future__ import annotations

import time
from typing import Any

from automation.workflows import requests as R
from automation.workflows.checks import WorkflowChecks
from automation.workflows.expr import evaluate
from automation.workflows.model import ID, Step, StepSpec, Workflow
from automation.workflows.runtime import FlowRun
from automation.workflows.steps.base import Outcome, StepContext, StepKind


def kind_words(step: Step) -> dict[str, list[str]]:
    kinds = step.raw.get("kinds") or {}
    return {k: list(v) if isinstance(v, list) else [w for ws in v.values() for w in ws] for k, v in kinds.items()}


class SplitSpec(StepSpec):
    split: str                             # the slot that gets the list of requests
    kinds: dict[str, Any]                  # request kind -> its words ({zh: [...], en: [...]} or a list)
    prompt: Any = None
    text: str | None = None                # CEL: the words to split (default: the customer's message)


class Split(StepKind):
    name = "split"
    spec = SplitSpec
    waits = True

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p = step.raw["_path"]
        ck.slot(step.arg, p + ("split",))
        kinds = step.raw.get("kinds")
        if not isinstance(kinds, dict) or not kinds:
            ck.err(p + ("kinds",), "expected a mapping of request kind to its words ({zh: [...], en: [...]} or a list)")
        else:
            for kind, words in kinds.items():
                flat = words if isinstance(words, list) else [w for v in words.values() for w in v] \
                    if isinstance(words, dict) and all(isinstance(v, list) for v in words.values()) else None
                if not ID.match(str(kind)) or not flat or not all(isinstance(w, str) for w in flat):
                    ck.err(p + ("kinds", kind), "a kind is a lower case name with a non-empty list of words")
        ck.text(step.raw.get("prompt"), p + ("prompt",))
        if "text" in step.raw:
            ck.expr(step.raw["text"], p + ("text",))

    def asks_for(self, step: Step) -> str | None:
        return str(step.arg)

    def run(self, ctx: StepContext) -> Outcome:
        run, inst, step, text = ctx.run, ctx.inst, ctx.step, ctx.text
        name = step.arg
        if text is None and name in inst["slots"]:
            return "next"
        if text is not None:
            source = text
        elif "text" in step.raw:
            source = str(evaluate(step.raw["text"], run.scope()) or "")
        else:
            source = inst["pending"].get("message") or ""
        found = R.split(source, kind_words(step))
        if not found:
            if text is None:
                run.prompt(step, again=False)
                return "wait"
            return run.retry(step, f"no request of {', '.join(step.raw['kinds'])} in the answer")
        inst["slots"][name] = found
        inst["attempts"].pop(step.id, None)
        inst["history"].append({"step": step.id, "event": "split", "kinds": [r["kind"] for r in found],
                                "at": time.time()})
        return "next"

    def prompt(self, run: FlowRun, step: Step, *, with_prompt: bool = True) -> None:
        slot = run.wf.slots[step.arg]
        run.say(run.text(step.get("prompt") or slot.prompt))
        run.quick = list(slot.quick_replies)
        run.awaiting = step.arg

    def strength(self, run: FlowRun, step: Step, text: str, entities: dict[str, Any]) -> str | None:
        return "strong" if R.split(text, kind_words(step)) else None

    def free_text(self, wf: Workflow, step: Step) -> bool:
        return step.arg in wf.slots and wf.slots[step.arg].free_text
