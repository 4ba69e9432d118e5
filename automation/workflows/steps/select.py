"""``select: SLOT``: a set of records (or one) picked by the customer's description, never by a guess.

"all my pending T-shirts", "everything except the tablet", "the laptops I received" across two orders,
"the order with the kettle and the lamp", "the order with three items", "my Boston address, the one on my
other order" are read by ``records.resolve`` against the records' own phrases (``match``); with ``traits``
the records are variants, picked by hard and soft wants and relative targets (``records.variant_pick``).
What the words pick is stored (a list, or one value with ``one: true``); several in question, or words that
name nothing there, are asked among as a numbered list ("1 and 3", "both", "the silver one").
"""

from __future__ import annotations

import time
from typing import Any

from automation.workflows import records as RC
from automation.workflows import requests as R
from automation.workflows import understand as U
from automation.workflows.checks import WorkflowChecks
from automation.workflows.expr import ExpressionError, evaluate, evaluate_columns, format_value, render_each
from automation.workflows.model import Step, StepSpec
from automation.workflows.runtime import FlowRun
from automation.workflows.steps import answers as A
from automation.workflows.steps.base import Outcome, StepContext, StepKind, spec_of

ABSENT = {"zh": "没有找到您说的那一项。", "en": "I could not find that one."}
PICK_FROM = {"zh": "请回复编号（可以多个，如“1和3”），或“全部”。", "en": "Reply with the numbers (several are fine, e.g. \"1 and 3\") or \"all\"."}


class SelectSpec(StepSpec):
    select: str                            # the slot: a list of values (or one with `one: true`)
    options: str                           # CEL: the records to pick from
    label: Any                             # template over `option` ({zh, en} or one text)
    value: str | None = None               # CEL over `option`: what is stored (default: the record)
    option_id: str | None = None           # CEL over `option`: its id (an order number, an item id)
    match: list[str] | None = None         # CEL over `option`: the phrases that name it (names, categories...)
    count: str | None = None               # CEL over `option`: how many things it holds ("the order with 3 items")
    nouns: list[str] | None = None         # vocabulary groups whose words name things (a noun no record has: asked)
    text: str | None = None                # CEL: the words to read (default: the customer's first message)
    one: bool = False                      # exactly one record
    traits: str | None = None              # CEL over `option`: its options {axis: value} (variants)
    keep: str | None = None                # CEL: the current options, kept where possible
    order: dict[str, Any] | None = None    # axis -> [values in order] or {values, words}: "one size smaller"
    prefer: list[str] | None = None        # CEL over `option`: the shop's soft wants (true adds 0.5, a number itself)
    like: str | None = None                # CEL: other records a relative target names ({names, options} each)
    prompt: Any = None
    refuse: Any = None                     # said when there is nothing to pick from
    auto_single: bool = False


def _rows(run: FlowRun, step: Step, opts: list[Any]) -> tuple[list[str], list[list[str]], list[str], list[int] | None]:
    """(ids, phrases, labels in the flow's language, counts) of every record, once per turn."""
    memo = run.memo.setdefault("select_rows", {})
    key = (step.id, id(opts))
    if key in memo and memo[key][0] is opts:
        rows: tuple[list[str], list[list[str]], list[str], list[int] | None] = memo[key][1]
        return rows
    sp = spec_of(step, SelectSpec)
    scope = run.scope()
    label = sp.label if isinstance(sp.label, str) else (sp.label.get(run.lang) or sp.label.get("en") or "")
    templates = [label] + (["{{ " + sp.option_id + " }}"] if sp.option_id else [])
    rendered = render_each(opts, "option", templates, scope)
    ids = rendered[1] if sp.option_id else [str(n + 1) for n in range(len(opts))]
    cols = evaluate_columns(opts, "option", list(sp.match or []), scope) if sp.match else []
    phrases: list[list[str]] = []
    for n in range(len(opts)):
        found: list[str] = [ids[n]] if sp.option_id else []
        for col in cols:
            v = col[n]
            for x in (v if isinstance(v, list) else [v]):
                if isinstance(x, list):
                    found.extend(format_value(y) for y in x)
                elif x is not None:
                    found.append(format_value(x))
        phrases.append(found)
    counts = None
    if sp.count:
        counts = [int(c) for c in evaluate_columns(opts, "option", [sp.count], scope)[0]]
    rows = (ids, phrases, rendered[0], counts)
    memo[key] = (opts, rows)
    return rows


def _nouns(step: Step) -> list[str]:
    vocab = R.VOCABULARY.get()
    words: list[str] = []
    for group in spec_of(step, SelectSpec).nouns or []:
        for value, ws in (vocab.get(group) or {}).items():
            words += [value] + list(ws)
    return words


class Select(StepKind):
    name = "select"
    pure = True
    spec = SelectSpec
    waits = True

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p, raw = step.raw["_path"], step.raw
        ck.slot(step.arg, p + ("select",))
        ck.expr(raw.get("options"), p + ("options",))
        if "label" not in raw:
            ck.err(p + ("label",), "a select step needs a label template over 'option'")
        else:
            ck.template(raw.get("label"), p + ("label",), {"option"})
        for key in ("value", "option_id", "count", "traits"):
            if key in raw:
                ck.expr(raw[key], p + (key,), {"option"})
        for key in ("text", "keep", "like"):
            if key in raw:
                ck.expr(raw[key], p + (key,))
        for listed in ("match", "prefer"):
            if listed in raw and not isinstance(raw[listed], list):
                ck.err(p + (listed,), f"{listed} is a list of CEL expressions over 'option'")
            for j, m in enumerate(raw.get(listed) or []):
                ck.expr(m, p + (listed, j), {"option"})
        order = raw.get("order")
        if order is not None and not (isinstance(order, dict) and all(
                isinstance(v, list) or (isinstance(v, dict) and isinstance(v.get("values"), list)) for v in order.values())):
            ck.err(p + ("order",), "order maps an option axis to its values in order (a list, or {values, words})")
        if ("order" in raw or "keep" in raw or "prefer" in raw or "like" in raw) and "traits" not in raw:
            ck.err(p + ("traits",), "order, keep, prefer and like read the records' traits: add traits (CEL over 'option')")
        for flag in ("one", "auto_single"):
            if flag in raw and not isinstance(raw[flag], bool):
                ck.err(p + (flag,), f"{flag} is true or false")
        if "nouns" in raw and not (isinstance(raw["nouns"], list) and all(isinstance(n, str) for n in raw["nouns"])):
            ck.err(p + ("nouns",), "nouns is a list of vocabulary groups")
        ck.text(raw.get("prompt"), p + ("prompt",))
        if "refuse" in raw:
            ck.text(raw["refuse"], p + ("refuse",))

    def asks_for(self, step: Step) -> str | None:
        return str(step.arg)

    # -- reading

    def _options(self, run: FlowRun, step: Step) -> list[Any]:
        found = evaluate(spec_of(step, SelectSpec).options, run.scope())
        if not isinstance(found, list):
            raise ExpressionError(f"{step.raw['options']}: options must be a list")
        return found

    def _pick(self, run: FlowRun, step: Step, opts: list[Any], text: str, among: list[int] | None) -> RC.Pick:
        sp = spec_of(step, SelectSpec)
        if sp.traits:
            pool = list(among if among is not None else range(len(opts)))
            scope = run.scope()
            traits = evaluate_columns([opts[i] for i in pool], "option", [sp.traits], scope)[0]
            current = evaluate(sp.keep, scope) if sp.keep else {}
            bonus = None
            if sp.prefer:
                cols = evaluate_columns([opts[i] for i in pool], "option", list(sp.prefer), scope)
                bonus = [sum(RC.PREFER_WEIGHT if v is True else float(v) if isinstance(v, (int, float))
                             and not isinstance(v, bool) else 0.0 for v in (col[j] for col in cols)) for j in range(len(pool))]
            like = evaluate(sp.like, scope) if sp.like else None
            if like is not None and not isinstance(like, list):
                raise ExpressionError(f"{sp.like}: like must be a list of {{names, options}}")
            pick, _ = RC.variant_pick(text, [dict(t or {}) for t in traits], dict(current or {}), sp.order or {},
                                      R.VOCABULARY.get(), bonus, [dict(r) for r in like] if like is not None else None)
            pick.chosen = [pool[j] for j in pick.chosen]
            pick.candidates = [pool[j] for j in pick.candidates] if pick.candidates else list(pool)
            return pick
        ids, phrases, _, counts = _rows(run, step, opts)
        return RC.resolve(text, ids, phrases, counts=counts, nouns=_nouns(step), one=sp.one, among=among,
                          by_id=bool(sp.option_id))

    def _store(self, run: FlowRun, step: Step, opts: list[Any], chosen: list[int], how: str,
               among: list[int] | None = None) -> Outcome:
        sp, inst = spec_of(step, SelectSpec), run.inst
        values = [evaluate(sp.value, run.scope(option=opts[i])) if sp.value else opts[i] for i in chosen]
        inst["slots"][step.arg] = values[0] if sp.one else values
        if not inst["loops"]:   # what was in question, for a correction later ("no, the other one")
            inst["pending"].setdefault("select_seen", {})[step.id] = {
                "among": sorted(set(among if among is not None else range(len(opts))) | set(chosen)), "chosen": chosen,
                "asked": how == "answer"}
        inst["pending"].get("select_among", {}).pop(step.id, None)
        inst["attempts"].pop(step.id, None)
        inst["history"].append({"step": step.id, "event": "selected", "indices": chosen, "how": how, "at": time.time()})
        return "next"

    def _ask(self, run: FlowRun, step: Step, shown: list[int], *, absent: bool) -> Outcome:
        run.inst["pending"].setdefault("select_among", {})[step.id] = shown
        if absent:
            run.say(ABSENT.get(run.lang, ABSENT["en"]))
        run.prompt(step, again=False)
        return "wait"

    def run(self, ctx: StepContext) -> Outcome:
        run, inst, step, text = ctx.run, ctx.inst, ctx.step, ctx.text
        sp = spec_of(step, SelectSpec)
        if text is None and step.arg in inst["slots"]:
            return "next"
        opts = self._options(run, step)
        if not opts:
            if sp.refuse:
                run.say(run.text(sp.refuse))
                run.finish("completed", "refused")
                return "stop"
            return run.fail(step, "there is nothing to select from")
        if text is None:
            said = str(evaluate(sp.text, run.scope()) or "") if sp.text else str(inst["pending"].get("message") or "")
            pick = self._pick(run, step, opts, said, None)
            if pick.chosen:
                return self._store(run, step, opts, pick.chosen, f"said:{pick.how}", pick.candidates or None)
            if sp.traits and pick.how == "absent" and sp.refuse:
                run.say(run.text(sp.refuse))
                run.finish("completed", "refused")
                return "stop"
            shown = pick.candidates or list(range(len(opts)))
            if pick.how == "none" and len(shown) == 1 and sp.auto_single:
                return self._store(run, step, opts, shown, "single")
            return self._ask(run, step, shown, absent=pick.how == "absent")
        back = A.repick(run, step, text)
        if back is not None:
            return back
        among = inst["pending"].get("select_among", {}).get(step.id) or list(range(len(opts)))
        among = [i for i in among if i < len(opts)]
        chosen = self._answer(run, step, opts, text, among)
        if isinstance(chosen, list):
            return self._store(run, step, opts, chosen, "answer", among)
        if chosen == "narrow":
            return "wait"
        return run.retry(step, f"no record of {step.arg} named in the answer")

    def _answer(self, run: FlowRun, step: Step, opts: list[Any], text: str, among: list[int]) -> list[int] | str | None:
        """The records an answer to the numbered list names; "narrow" when it asked again among fewer."""
        one = spec_of(step, SelectSpec).one
        if RC.says_none(text):
            return None
        if not RC._ID.search(text or ""):
            nums = RC.picked_numbers(text, len(among))
            if nums:
                chosen = [among[k] for k in nums]
                return chosen if not one or len(chosen) == 1 else None
        if not one and RC.says_all(text) and len(RC.norm(text).split()) <= 4:
            return among
        pick = self._pick(run, step, opts, text, among)
        if pick.chosen and (not one or len(pick.chosen) == 1):
            return pick.chosen
        if pick.how == "ambiguous" and pick.candidates and len(pick.candidates) < len(among):
            self._ask(run, step, pick.candidates, absent=False)
            return "narrow"
        if RC.says_all(text) and not one and pick.how in ("none", "ambiguous"):
            return pick.candidates or among
        return None

    # -- a correction of the pick, later

    def repick(self, run: FlowRun, at: Step, text: str, *, dry: bool = False, bare: bool = False) -> str | None:
        """The last select of the flow picked again from what was in question: "no, the other one" (of two),
        "actually the space grey one", "不对，是另一台". Its slot takes the new record and everything after it is
        planned again (``answers.apply_correction``); None when the words re-pick nothing there."""
        inst = run.inst
        seen = inst["pending"].get("select_seen") or {}
        if not seen or inst["loops"] or not (U.is_correction(text) or U.yes_no(text) is False or U.refers_to_other(text)):
            return None
        order = list(dict.fromkeys(h["step"] for h in reversed(inst["history"])
                                   if h.get("event") in ("selected", "correction") and h.get("step") in seen))
        other = U.refers_to_other(text)
        words = U.strip_correction(U.drop_negated(text))
        for sid in order:   # the latest pick the words can mean: "the other one" of exactly two in question
            step = run.wf.steps.get(sid)
            if step is None or step.kind != self.name or step.id == at.id:
                continue
            try:
                opts = self._options(run, step)
            except ExpressionError:
                continue   # its records cannot be read now: no correction of it
            among, chosen = seen[step.id]["among"], seen[step.id]["chosen"]
            rest = [i for i in among if i not in chosen and i < len(opts)]
            new: list[int] = []
            if other:   # of a list the customer was shown, not of a record their own words named
                new = rest if len(rest) == 1 and seen[step.id].get("asked") else []
            elif rest and words:
                pick = self._pick(run, step, opts, words, rest)
                one = spec_of(step, SelectSpec).one
                new = pick.chosen if pick.chosen and (not one or len(pick.chosen) == 1) else []
            if new:
                break
        else:
            return None
        if not dry:
            sp = spec_of(step, SelectSpec)
            values = [evaluate(sp.value, run.scope(option=opts[i])) if sp.value else opts[i] for i in new]
            A.apply_correction(inst, run.wf, at, step.arg, values[0] if sp.one else values)
            inst["pending"]["select_seen"][step.id] = {**seen[step.id], "chosen": new}
            inst["history"][-1]["step"] = step.id
            inst["attempts"].pop(at.id, None)
        return step.id

    # -- asking

    def prompt(self, run: FlowRun, step: Step, *, with_prompt: bool = True) -> None:
        sp = spec_of(step, SelectSpec)
        opts = self._options(run, step)
        _, _, labels, _ = _rows(run, step, opts)
        shown = [i for i in (run.inst["pending"].get("select_among", {}).get(step.id) or range(len(opts)))
                 if i < len(opts)]
        if with_prompt:
            run.say(run.text(sp.prompt))
        run.say("\n".join(f"{n + 1}. {labels[i]}" for n, i in enumerate(shown)))
        if not sp.one and len(shown) > 1:
            run.say(PICK_FROM.get(run.lang, PICK_FROM["en"]))
        run.quick = [labels[i] for i in shown]
        run.awaiting = step.arg

    def strength(self, run: FlowRun, step: Step, text: str, entities: dict[str, Any]) -> str | None:
        opts = self._options(run, step)
        among = run.inst["pending"].get("select_among", {}).get(step.id) or list(range(len(opts)))
        if RC.picked_numbers(text, len(among)) or (RC.says_all(text) and not spec_of(step, SelectSpec).one):
            return "strong"
        pick = self._pick(run, step, opts, text, [i for i in among if i < len(opts)])
        return "strong" if pick.chosen else ("weak" if pick.how == "ambiguous" else None)
