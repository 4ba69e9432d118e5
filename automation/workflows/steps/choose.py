"""``choose: SLOT``: pick one of a list (orders, variants) by number, id, name, words or meaning."""

from __future__ import annotations

import re
import time
from typing import Any

from automation.workflows import requests as R
from automation.workflows import understand as U
from automation.workflows.checks import WorkflowChecks
from automation.workflows.expr import (ExpressionError, evaluate, evaluate_columns, evaluate_each, format_value,
                                       render_each, same_value)
from automation.workflows.model import Step, StepSpec
from automation.workflows.runtime import MAX_ATTEMPTS, FlowRun, Restart, t
from automation.workflows.steps import answers as A
from automation.workflows.steps.base import Outcome, StepContext, StepKind
from text import address

Rows = tuple[list[str], list[list[str]], dict[str, list[str]]]
# words said before the question (a whole request: "ship W1001 to the same address as my other order") also
# name other things: only the words that describe an option at all count, three in four of them must describe
# the one taken (two things named, "the green garden hose with the black boots", are asked between), and never
# by meaning alone (the encoder has no words to show for it); asking is the fallback
FROM_TEXT_FLOOR = 0.75
OTHERS = {"event": "stated", "how": "others"}   # the history's mark of an item of ``others`` taken


def options(run: FlowRun, step: Step) -> list[Any]:
    found = evaluate(step.raw["options"], run.scope())
    if not isinstance(found, list):
        raise ExpressionError(f"{step.raw['options']}: options must be a list")
    return found


def option_rows(run: FlowRun, step: Step, opts: list[Any]) -> Rows:
    """Every option's id, matchable texts and labels; computed once per turn while the data is the same
    (the reading of the message, the answer and a re-ask all need them)."""
    inst = run.inst
    sig = (step.id, tuple((k, id(v)) for k, v in inst["bindings"].items()),
           tuple((k, id(lp["items"]), lp["index"]) for k, lp in inst["loops"].items()), inst["lang"])
    memo: dict[str, Any] = run.memo.setdefault("choose_rows", {})
    hit = memo.get(step.id)
    if hit is not None and hit[0] == sig and same_value(hit[1], opts) and same_value(hit[2], inst["slots"]):
        rows: Rows = hit[3]
        return rows
    rows = _compute_rows(run, step, opts)
    memo[step.id] = (sig, opts, dict(inst["slots"]), rows)
    return rows


def _compute_rows(run: FlowRun, step: Step, opts: list[Any]) -> Rows:
    label = step.raw["label"]
    labels = label if isinstance(label, dict) else {lang: label for lang in ("zh", "en")}
    langs = [lang for lang in ("en", "zh") if labels.get(lang)]
    scope = run.scope()
    templates = ["{{ " + step.raw["option_id"] + " }}" if "option_id" in step.raw else "{{ option }}"]
    templates += [labels[lang] for lang in langs]
    rendered = render_each(opts, "option", templates, scope)
    matches = match_list(step.get("match"))
    extra = evaluate_columns(opts, "option", matches, scope) if matches else []
    ids: list[str] = []
    texts: list[list[str]] = []
    by_lang: dict[str, list[str]] = {lang: [] for lang in langs}
    for n, o in enumerate(opts):
        oid = rendered[0][n] if "option_id" in step.raw else (o.get("id") if isinstance(o, dict) else rendered[0][n])
        ids.append("" if oid is None else str(oid))
        fields: list[str] = []
        for j, lang in enumerate(langs):
            by_lang[lang].append(rendered[1 + j][n])
            if rendered[1 + j][n] not in fields:
                fields.append(rendered[1 + j][n])
        for col in extra:
            v = col[n]
            fields.extend([format_value(x) for x in v] if isinstance(v, list) else [format_value(v)])
        texts.append(fields)
    return ids, texts, by_lang


def match_list(value: Any) -> list[str]:
    """``match`` as written: one CEL expression or a list of them (never the characters of one string)."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def option_texts(run: FlowRun, step: Step, opts: list[Any]) -> tuple[list[str], list[list[str]]]:
    ids, texts, _ = option_rows(run, step, opts)
    return ids, texts


def value_of(run: FlowRun, step: Step, option: Any) -> Any:
    if "value" in step.raw:
        return evaluate(step.raw["value"], run.scope(option=option))
    return option


def cheapest(run: FlowRun, step: Step, opts: list[Any], text: str, among: list[int] | None) -> int | None:
    """"the cheapest" / "最便宜的": the option (among those still in question) with the lowest ``cheapest``."""
    if "cheapest" not in step.raw or not R.prefers_cheapest(text):
        return None
    pool = [i for i in (among or range(len(opts))) if i < len(opts)]
    if not pool:
        return None
    ranks = evaluate_each([opts[i] for i in pool], "option", [step.raw["cheapest"]], run.scope())
    best = min(range(len(pool)), key=lambda j: (float(ranks[j][0]), j))
    return pool[best]


def _stated(inst: Any, step: Step, value: Any, *, how: str | None = None) -> None:
    """A value the customer stated that the list does not show (an order number, an order ``others`` holds):
    the slot takes it and the steps after the choice check it."""
    inst["slots"][step.arg] = value
    inst["attempts"].pop(step.id, None)
    inst["pending"].get("choose_among", {}).pop(step.id, None)
    inst["history"].append({"step": step.id, "event": "stated", **({"how": how} if how else {}), "at": time.time()})


def _just_refused(inst: Any, step: Step) -> bool:
    """The flow came back here because the customer's value for the slot was refused (an order number the shop
    does not know) and nothing chose it since: the single option is not what they named, so it is offered,
    never taken for them."""
    for h in reversed(inst["history"]):
        if h.get("event") == "jump" and step.arg in (h.get("reset") or []):
            return True
        if h.get("step") == step.id and h.get("event") in ("chose", "stated", "none"):
            return False
    return False


_NUMBER = re.compile(r"(?<![\w-])\d+(?![\w-])")


class ChooseSpec(StepSpec):
    choose: str                            # the slot
    options: str                           # CEL: the list to choose from
    label: Any                             # template over `option` ({zh, en} or one text)
    value: str | None = None               # CEL over `option`: what is stored (default: the option)
    option_id: str | None = None           # CEL over `option`: its id (default: option.id)
    match: list[str] | str | None = None   # CEL over `option` (one or a list): more texts that name it
    prompt: Any = None
    auto_single: Any = False
    refuse: Any = None                     # said when there is nothing to choose from
    text: str | None = None                # CEL: words already said, to resolve from before asking
    cheapest: str | None = None            # CEL number over `option`: "the cheapest" picks the lowest
    required: bool = True
    ask_again: bool = False                # asked each time the flow reaches it, even when its slot is set
    others: str | None = None              # CEL: a wider list the customer may name (never shown): the steps after say why


class Choose(StepKind):
    name = "choose"
    pure = True
    spec = ChooseSpec
    waits = True

    def check(self, step: Step, ck: WorkflowChecks) -> None:
        p, raw = step.raw["_path"], step.raw
        ck.slot(step.arg, p + ("choose",))
        if "text" in raw:
            ck.expr(raw["text"], p + ("text",))
        if "cheapest" in raw:
            ck.expr(raw["cheapest"], p + ("cheapest",), {"option"})
        for key in ("required", "ask_again"):
            if key in raw and not isinstance(raw[key], bool):
                ck.err(p + (key,), f"{key} is true or false")
        ck.expr(raw.get("options"), p + ("options",))
        if "others" in raw:
            ck.expr(raw["others"], p + ("others",))
        ck.text(raw.get("prompt"), p + ("prompt",))
        ck.template(raw.get("label"), p + ("label",), {"option"})
        if "label" not in raw:
            ck.err(p + ("label",), "a choose step needs a label template over 'option'")
        for key in ("value", "option_id"):
            if key in raw:
                ck.expr(raw[key], p + (key,), {"option"})
        match = raw.get("match")
        if isinstance(match, str):
            ck.expr(match, p + ("match",), {"option"})
        elif match is not None and not isinstance(match, list):
            ck.err(p + ("match",), "expected a CEL expression over 'option' or a list of them")
        else:
            for j, m in enumerate(match or []):
                ck.expr(m, p + ("match", j), {"option"})
        if "refuse" in raw:
            ck.text(raw["refuse"], p + ("refuse",))

    def asks_for(self, step: Step) -> str | None:
        return str(step.arg)

    def run(self, ctx: StepContext) -> Outcome:
        run, inst, wf, step, text, entities = ctx.run, ctx.inst, ctx.wf, ctx.step, ctx.text, ctx.entities
        name = step.arg
        if text is None and name in inst["slots"]:
            if not step.get("ask_again"):
                return "next"
            inst["slots"].pop(name)   # reached again: the earlier choice is forgotten and asked anew
            inst["pending"].get("choose_among", {}).pop(step.id, None)
        opts = options(run, step)
        if not opts:
            if step.get("required") is False:   # nothing to choose from, and nothing needed: null
                inst["slots"][name] = None
                return "next"
            if step.get("refuse"):
                run.say(run.text(step.get("refuse")))
                run.finish("completed", "refused")
                return "stop"
            return run.fail(step, "there is nothing to choose from")
        if text is None:
            if (len(opts) == 1 and step.get("auto_single", False) and not _just_refused(inst, step)
                    and not self._names_only_others(run, step, opts)):
                inst["slots"][name] = value_of(run, step, opts[0])
                # a pick all the same ("cancel my order" -> the only cancellable one): "no, the boots" re-picks it
                inst["history"].append({"step": step.id, "event": "chose", "index": 0, "how": "said:single",
                                        "at": time.time()})
                return "next"
            if "text" in step.raw and step.id not in inst["pending"].get("choose_among", {}):
                said = evaluate(step.raw["text"], run.scope())
                resolved = self._from_text(run, step, opts, str(said or ""))
                if resolved:
                    return resolved
            run.prompt(step, again=False)
            return "wait"
        fix = A.fix(inst, wf, step, text, entities, run)
        if fix:
            return fix
        if step.get("required") is False and U.is_none_of_these(text):   # "none of these" / "都不是": null
            inst["slots"][name] = None
            inst["attempts"].pop(step.id, None)
            inst["pending"].get("choose_among", {}).pop(step.id, None)
            inst["history"].append({"step": step.id, "event": "none", "at": time.time()})
            return "next"
        ids, texts = option_texts(run, step, opts)
        value = A.stated(wf, name, text, entities)
        if value is not None and str(value) not in ids:
            # an order number the list does not show is still the customer's answer (never fuzzily another
            # option's number): the steps after the choice check it
            _stated(inst, step, value)
            return "next"
        among = inst["pending"].get("choose_among", {}).get(step.id)
        cheap = cheapest(run, step, opts, text, among)
        if cheap is not None:
            inst["pending"].get("choose_among", {}).pop(step.id, None)
            inst["slots"][name] = value_of(run, step, opts[cheap])
            inst["attempts"].pop(step.id, None)
            return "next"
        similarity = run.services.similarity
        ch = None
        if among:
            sub = U.choose(text, [ids[i] for i in among], [texts[i] for i in among], similarity=similarity)
            ch = U.Choice(among[sub.index], [], sub.how) if sub.index is not None else None
        if ch is None:
            ch = U.choose(text, ids, texts, similarity=similarity)
        if ch.index is None:
            if ch.candidates:
                inst["pending"].setdefault("choose_among", {})[step.id] = ch.candidates
                n = inst["attempts"].get(step.id, 0) + 1
                inst["attempts"][step.id] = n
                if n >= MAX_ATTEMPTS:
                    run.escalate("L2", f"choice at {step.id} still ambiguous after {n} attempts")
                    return "stop"
                run.say(t("choose_again", run.lang))
                run.prompt(step, again=False, with_prompt=False)
                return "wait"
            value = A.stated(wf, name, text, entities)
            if value is not None:
                # an order number the list does not show is still the customer's answer: the steps after check it
                inst["slots"][name] = value
                inst["attempts"].pop(step.id, None)
                inst["history"].append({"step": step.id, "event": "stated", "at": time.time()})
                return "next"
            if self._take_other(run, step, opts, text):
                return "next"
            described = U.pointed(text)
            if described is not None:
                # "不粘锅那个" where no option has one: said plainly (never "noted", never "didn't catch that")
                run.say(t("not_among", run.lang, thing=described))
                return run.retry(step, f"{described!r} names no option of {name}", quiet=True)
            return run.retry(step, f"no option of {name} matched", told=text)
        inst["pending"].get("choose_among", {}).pop(step.id, None)
        inst["slots"][name] = value_of(run, step, opts[ch.index])
        inst["attempts"].pop(step.id, None)
        inst["history"].append({"step": step.id, "event": "chose", "index": ch.index, "how": ch.how, "at": time.time()})
        return "next"

    def repick(self, run: FlowRun, at: Step, text: str, *, dry: bool = False, bare: bool = False) -> str | None:
        """The latest choice of the flow made again while a later step waits: "actually the lamp", "no, the other
        one" (of two shown), "不对，是耳机那个"; with ``bare`` (the message answers nothing the step asks) another
        option named alone too ("不粘锅那个"). The words must describe another of its options and nothing else (a
        new amount or question is not a re-pick); its slot takes the new value and what came after it is planned
        again (``answers.apply_correction``: values the customer said themselves stay). "a different order",
        "换成另一个订单" with more than one other option (or none shown) opens the choice again among the others.
        A choice the request's own words made (its slot given before anything was asked) counts as one."""
        inst = run.inst
        other = U.refers_to_other(text)
        if not (bare or U.is_correction(text) or U.yes_no(text) is False or other):
            return None
        found = self._latest_options(run, at)
        if found is None:
            return None
        picked, step, opts, ids, texts = found
        current = inst["slots"][step.arg]
        rest = [i for i in range(len(opts)) if not same_value(value_of(run, step, opts[i]), current)]
        words = U.strip_follow_up(U.strip_correction(U.drop_negated(U.without_other(text))))
        words = U.CORRECTION.sub(" ", words)   # "搞错了，换一个别的订单": the cue is no description of an option
        shown = not str(picked.get("how") or "").startswith("said:")
        new: int | None = None
        nth = U.ordinal_of(words, len(opts)) if shown and U.is_pointer(words) else None
        if nth is not None:   # "我是说第二个", "I meant the second one": its place in the list the customer was shown
            if nth not in rest:
                return None   # the one picked already
            new = nth
        elif words.strip() and U.content_words(words):
            if U.is_question(words):
                return None
            if U.only_describes(words, texts):
                ch = U.choose(words, [ids[i] for i in rest], [texts[i] for i in rest])
                new = rest[ch.index] if ch.index is not None and ch.how != "number" else None
            if new is None:   # "the boots" at the confirmation of the only cancellable order: an order left out
                value = self._other_named(run, step, opts, words)
                return self._repicked(run, at, step, value, OTHERS, dry=dry) if value is not None else None
        elif other and not rest and not U.is_question(text):
            # "the other one" when the only cancellable order was taken: the customer's other order, if one
            left = self._others(run, step, opts)
            if len(left) != 1:
                return None
            return self._repicked(run, at, step, value_of(run, step, left[0]), OTHERS, dry=dry)
        elif other and rest and not U.is_question(text):
            if len(rest) == 1 and shown:
                new = rest[0]     # "the other one" of two the customer was shown
            else:                 # "a different order": which one, among the others
                if not dry:
                    A.reopen(inst, run.wf, at, step.arg)
                    inst["history"][-1]["step"] = step.id
                    inst["pending"].setdefault("choose_among", {})[step.id] = rest
                    inst["attempts"].pop(at.id, None)
                return step.id
        if new is None:
            return None
        return self._repicked(run, at, step, value_of(run, step, opts[new]),
                              {"event": "chose", "index": new, "how": "correction"}, dry=dry)

    def names_pick(self, run: FlowRun, at: Step, text: str) -> bool:
        found = self._latest_options(run, at)
        if found is None:
            return False
        _, step, opts, ids, texts = found
        ch = U.choose(text, ids, texts)
        return ch.index is not None and ch.how not in ("number", "encoder") \
            and same_value(value_of(run, step, opts[ch.index]), run.inst["slots"][step.arg])

    def _latest_options(self, run: FlowRun, at: Step
                        ) -> tuple[dict[str, Any], Step, list[Any], list[str], list[list[str]]] | None:
        """The latest pick before ``at`` with its step's options as they read now (ids, matchable texts); None."""
        picked, step = self._latest_pick(run, at)
        if picked is None or step is None:
            return None
        try:
            opts = options(run, step)
        except ExpressionError:
            return None
        ids, texts = option_texts(run, step, opts)
        return picked, step, opts, ids, texts

    def _latest_pick(self, run: FlowRun, at: Step) -> tuple[dict[str, Any] | None, Step | None]:
        """The flow's latest choice of this kind before ``at`` (its history event and step): one the customer made
        from the list, or one the request's own words made (the slot given before it was asked: "refund 100241")."""
        inst, wf = run.inst, run.wf
        picked = next((h for h in reversed(inst["history"]) if h.get("event") == "chose"), None)
        step = wf.steps.get(str(picked.get("step"))) if picked else None
        if picked is None:
            order = list(wf.steps)
            given = A.said_first(inst)
            step = next((wf.steps[sid] for sid in reversed(order[:order.index(at.id)] if at.id in order else [])
                         if wf.steps[sid].kind == self.name and wf.steps[sid].arg in given), None)
            picked = {"step": step.id, "how": "said:request"} if step is not None else None
        if picked is None or step is None or step.kind != self.name or step.id == at.id or step.get("ask_again") \
                or step.arg not in inst["slots"]:
            return None, None
        return picked, step

    def names(self, run: FlowRun, step: Step, words: str) -> bool:
        said = U.norm(words)
        if not said:
            return False
        try:
            _, texts = option_texts(run, step, options(run, step))
        except ExpressionError:
            return False
        return any(said in U.norm(f) for fields in texts for f in fields)

    def other_option(self, run: FlowRun, step: Step, text: str, picked: dict[str, Any]) -> Restart | None:
        """"the other one" (of two; of more, the rest are asked among), "what about the first one", "the pending
        one", "另外那个呢", "那个待付款的呢" after the flow ended: another of the options the customer was shown,
        read as an answer to the same question (numbers as they were shown, the options' words). The message
        must say nothing but that: a word that describes no option (a new question, a goodbye) reads as none."""
        # picked from the request's own words ("where are the boots I ordered?"): no list was shown, so a place
        # in it ("the first") names nothing; another option's words ("what about the lamp?") or "the other one"
        # (the customer knows their own orders: of several, they are offered) still do
        listed = not str(picked.get("how") or "").startswith("said:")
        opts = options(run, step)
        chosen = picked.get("index")
        if not isinstance(chosen, int) or not 0 <= chosen < len(opts) or len(opts) < 2:
            return None
        ids, texts = option_texts(run, step, opts)
        other = U.refers_to_other(text)
        said = U.strip_follow_up(U.strip_correction(U.without_other(text)))
        if not (said or other) or U.is_question(said) or not U.only_describes(said, texts):
            return None
        pool: list[int] = []
        if said:
            ch = U.choose(said, ids, texts)   # never by meaning alone: no question is waiting for an answer
            if not listed and ch.how == "number":
                return None   # a place in a list the customer never saw
            pool = [i for i in ([ch.index] if ch.index is not None else ch.candidates) if i != chosen]
        if not pool and other:
            pool = [i for i in range(len(opts)) if i != chosen]
        if not pool:
            return None
        if len(pool) > 1:
            return Restart(run.wf.name, among={step.id: pool})
        history = [{"step": step.id, "event": "chose", "index": pool[0], "how": "follow_up" if listed else "said:follow_up",
                    "at": time.time()}]
        return Restart(run.wf.name, slots={step.arg: value_of(run, step, opts[pool[0]])}, history=history)

    def _from_text(self, run: FlowRun, step: Step, opts: list[Any], said: str) -> str | None:
        """Resolve a choice from words the customer already said (a request's item, the first message)
        before asking: one match is taken, several are asked among; ``required: false`` stores null when
        nothing is named and then accepts only what the words state outright (id, exact, the cheapest)."""
        inst, name = run.inst, step.arg
        optional = step.get("required") is False
        if said.strip():
            cheap = cheapest(run, step, opts, said, None)
            if cheap is not None:
                inst["slots"][name] = value_of(run, step, opts[cheap])
                return "next"
            ids, texts = option_texts(run, step, opts)
            ch = U.choose(said, ids, texts, head=False, relevant=True, floor=FROM_TEXT_FLOOR)
            if ch.index is not None and (not optional or ch.how in ("id", "exact")):
                inst["slots"][name] = value_of(run, step, opts[ch.index])
                inst["history"].append({"step": step.id, "event": "chose", "index": ch.index,
                                        "how": f"said:{ch.how}", "at": time.time()})
                return "next"
            if ch.candidates and (not optional or ch.how == "ambiguous"):
                inst["pending"].setdefault("choose_among", {})[step.id] = ch.candidates
                run.prompt(step, again=False)
                return "wait"
            if not optional and ch.index is None and self._take_other(
                    run, step, opts, said, head=False, relevant=True, floor=FROM_TEXT_FLOOR):
                return "next"
        if optional:
            inst["slots"][name] = None
            return "next"
        return None

    def _names_only_others(self, run: FlowRun, step: Step, opts: list[Any]) -> bool:
        """Whether the request's words name an item the list leaves out and none it offers ("cancel the kettle
        order" when the kettle's order is cancelled and only the hose's can be): the single option is then not
        what the customer asked about, so it is not taken for them; the words are read as any request's are."""
        if "text" not in step.raw or "others" not in step.raw:
            return False
        # an address said in the request describes no order ("change my address to 5 Lamp Street"), nor does a bare
        # number: an order number was taken before the choice, the rest are quantities and house numbers
        said = str(evaluate(step.raw["text"], run.scope()) or "")
        where = address.span(said)
        said = _NUMBER.sub(" ", said.replace(where, " ") if where and U.looks_like_address(where) else said)
        if not said.strip():
            return False
        ids, texts = option_texts(run, step, opts)
        if U.choose(said, ids, texts, head=False, relevant=True, floor=FROM_TEXT_FLOOR).index is not None:
            return False
        return self._other_named(run, step, opts, said, head=False, relevant=True, floor=FROM_TEXT_FLOOR) is not None

    def _others(self, run: FlowRun, step: Step, opts: list[Any]) -> list[Any]:
        """The items of ``others`` (a wider list than the one offered) that are not offered."""
        if "others" not in step.raw:
            return []
        wider = evaluate(step.raw["others"], run.scope())
        if not isinstance(wider, list):
            raise ExpressionError(f"{step.raw['others']}: others must be a list")
        offered = [value_of(run, step, o) for o in opts]
        return [o for o in wider if not any(same_value(value_of(run, step, o), v) for v in offered)]

    def _other_named(self, run: FlowRun, step: Step, opts: list[Any], text: str, **how: Any) -> Any | None:
        """The value of an item of ``others`` the words name: by its id, its words or its status, never by a place
        in a list the customer was not shown or by meaning alone."""
        rest = self._others(run, step, opts)
        if not rest:
            return None
        ids, texts, _ = _compute_rows(run, step, rest)
        ch = U.choose(text, ids, texts, **how)
        if ch.index is None or ch.how in ("number", "encoder"):
            return None
        return value_of(run, step, rest[ch.index])

    def _repicked(self, run: FlowRun, at: Step, step: Step, value: Any, mark: dict[str, Any], *, dry: bool) -> str:
        """The earlier pick at ``step`` corrected to ``value`` from ``at`` (``mark``: how, for the history): what
        came after it is planned again."""
        if not dry:
            inst = run.inst
            A.apply_correction(inst, run.wf, at, step.arg, value)
            inst["history"][-1]["step"] = step.id
            inst["history"].append({"step": step.id, **mark, "at": time.time()})
            inst["attempts"].pop(at.id, None)
        return step.id

    def _take_other(self, run: FlowRun, step: Step, opts: list[Any], text: str, **how: Any) -> bool:
        """"耳机那个" when only unshipped orders are offered for cancelling: the customer means an order the list
        leaves out. It is taken as their answer, as an order number the list does not show is, so the checks after
        the choice say why it cannot be done ("… is already shipped") instead of "I didn't catch that"."""
        value = self._other_named(run, step, opts, text, **how)
        if value is None:
            return False
        _stated(run.inst, step, value, how="others")
        return True

    def prompt(self, run: FlowRun, step: Step, *, with_prompt: bool = True) -> None:
        opts = options(run, step)
        _, _, by_lang = option_rows(run, step, opts)
        labels = by_lang.get(run.lang) or by_lang.get("en") or next(iter(by_lang.values()))
        only = run.inst["pending"].get("choose_among", {}).get(step.id)
        shown = [i for i in (only or range(len(opts))) if i < len(opts)]
        if with_prompt:
            run.say(run.text(step.get("prompt")))
        run.say("\n".join(f"{n + 1}. {labels[i]}" for n, i in enumerate(shown)))   # numbered as answered
        run.quick = [labels[i] for i in shown]
        if step.get("required") is False:
            run.quick.append("都不是" if run.lang == "zh" else "None of these")
        run.awaiting = step.arg

    def takes(self, run: FlowRun, step: Step, text: str, entities: dict[str, Any]) -> bool:
        """An option named, or several named alike ("the tea one" of two tea orders: asked among them once
        the task starts), never one by meaning alone (the encoder has no words to show for it)."""
        if super().takes(run, step, text, entities):
            return True
        ids, texts = option_texts(run, step, options(run, step))
        return bool(U.choose(text, ids, texts).candidates)

    def strength(self, run: FlowRun, step: Step, text: str, entities: dict[str, Any]) -> str | None:
        if step.get("required") is False and U.is_none_of_these(text):
            return "strong"
        ids, texts = option_texts(run, step, options(run, step))
        how = U.choose(text, ids, texts, similarity=run.services.similarity)
        if A.stated(run.wf, step.arg, text, entities) is not None:
            return "strong"
        if how.index is None:
            return "weak" if not how.candidates and self._other_named(run, step, options(run, step), text) else None
        return "strong" if how.how in ("number", "id", "exact") else "weak"
