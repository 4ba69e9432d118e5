"""Reading a customer's words as slot values: shared by the waiting kinds and by the engine's reading of a turn.

A value is read by the slot's validator (an entity, an enum word, a pattern, free text); a correction
("不是这个，是100235", "sorry, 25 not 45") is a new value for a slot already filled.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

from automation.workflows import understand as U
from automation.workflows.model import Step, Workflow
from automation.workflows.runtime import FlowRun
from automation.workflows.steps.base import REGISTRY, ask_step_of
from automation.workflows.store import Instance
from text import address
from text.courtesy import without_courtesy


def parse_slot(wf: Workflow, name: str, text: str, entities: dict[str, Any]) -> Any:
    slot = wf.slots[name]
    v = slot.validate
    value: Any = None
    if name in entities:
        value = entities[name]
    elif "entity" in v:
        value = U.extract(v["entity"], text, entities)
    elif "enum" in v:
        t = U.norm(text)
        exact = [e for e in v["enum"] if U.norm(str(e)) == t]
        last: dict[int, Any] = {}
        for e in v["enum"]:
            for m in re.finditer(rf"(?<!\w){re.escape(U.norm(str(e)))}(?!\w)", t):
                last[m.start()] = e
        value = exact[0] if exact else (last[max(last)] if last else None)   # the last mention wins
    elif "regex" in v:
        found = [m.group(0) for m in re.finditer(v["regex"].lstrip("^").rstrip("$"), text or "")]
        value = found[-1] if found else None
    else:
        raw = (text or "").strip()
        value = raw or None
        if (v.get("schema") or {}).get("type") not in (None, "string"):
            try:
                value = json.loads(raw)
            except ValueError:
                pass
    if value is None or not slot.check(value):
        return None
    if slot.free_text and isinstance(value, str) and U.is_pointer(value):
        return None   # "马克杯那个", "the blue one": it points at something, it is no address or title
    return value


def stated(wf: Workflow, name: str, text: str, entities: dict[str, Any]) -> Any:
    """A value the customer states outright for a choose slot with a strict validator (entity or regex)."""
    v = wf.slots[name].validate if name in wf.slots else {}
    if v.get("entity") in (None, "text", "yes_no") and "regex" not in v:
        return None
    return parse_slot(wf, name, text, entities)


def _filled_stated(inst: Instance, wf: Workflow, text: str, entities: dict[str, Any],
                   skip: str | None = None) -> Iterator[tuple[str, Any]]:
    """(slot, value) for each filled slot read by an entity (an order number, an amount) that the text states."""
    for name, slot in wf.slots.items():
        ent = slot.validate.get("entity")
        if name == skip or name not in inst["slots"] or ent in (None, "text", "yes_no"):
            continue
        value = parse_slot(wf, name, text, entities)
        if value is not None:
            yield name, value


def correction(inst: Instance, wf: Workflow, text: str, entities: dict[str, Any],
               skip: str | None = None) -> tuple[str, Any] | None:
    """A new value for an already filled slot ("不是这个，是100235", "sorry, 25 not 45"): (slot, value)."""
    if U.is_correction(text):
        text = U.drop_negated(text)
    return next(((n, v) for n, v in _filled_stated(inst, wf, text, entities, skip) if v != inst["slots"][n]), None)


def restated(inst: Instance, wf: Workflow, text: str, entities: dict[str, Any]) -> str | None:
    """The filled slot whose value the message only states again ("100242" when asked to confirm the cancelling of
    order 100242): agreeing with what is shown is neither a yes yet nor a misunderstanding."""
    if U.is_correction(text):
        return None
    return next((n for n, v in _filled_stated(inst, wf, text, entities) if v == inst["slots"][n]), None)


def free_correction(inst: Instance, wf: Workflow, step: Step, text: str) -> tuple[str, Any] | None:
    """"No, it should be 21 Oak Road ..." at a confirmation: a new value for the free-text slot the step's
    on_reject would ask again (an address, a title), when the rest of the message is more than a number."""
    target = step.get("on_reject")
    if not isinstance(target, dict):
        return None
    for name in target.get("reset") or []:   # "it's No. 15 not 5": one part of the value said again
        slot, current = wf.slots.get(name), inst["slots"].get(name)
        if slot is None or not slot.free_text or not isinstance(current, str):
            continue
        swapped = U.substituted(current, text)
        if swapped is not None and swapped != current and slot.check(swapped):
            return name, swapped
    rest = U.strip_correction(text)
    if not U.is_free_value(rest) or U.is_pointer(rest):
        return None   # "不是这个，是100235", "I meant order W1003", "不对，马克杯那个": no address
    if not (U.is_correction(text) or U.yes_no(text) is False):
        return None
    for name in target.get("reset") or []:
        slot = wf.slots.get(name)
        asked = ask_step_of(wf, name)
        if slot is not None and slot.free_text and asked is not None and asked.kind == "ask" \
                and name in inst["slots"] and slot.check(rest) and rest != inst["slots"][name]:
            return name, rest
    return None


def _reads_any(wf: Workflow, step: Step, names: set[str]) -> bool:
    """Whether the step, or the slot it asks for, reads one of ``names`` (a slot as ``slots.NAME``, a call's result
    by its bound name) in any expression or template. A question's ``when`` only says whether it is asked: the
    customer's answer never depended on it (a tax id said after the title stays when the title is corrected)."""
    gate_only = {"_path", "when"} if step.kind == "ask" else {"_path"}
    raw: Any = {k: v for k, v in step.raw.items() if k not in gate_only}
    asked = REGISTRY[step.kind].asks_for(step)
    slot = wf.slots.get(asked) if asked else None
    if slot is not None:
        raw = [raw, slot.prompt, slot.validate, slot.whole, slot.recall, slot.hint]
    text = json.dumps(raw, ensure_ascii=False, default=str)
    return any(re.search(rf"\bslots\s*(?:\.\s*{re.escape(n)}\b|\[\s*\\?['\"]{re.escape(n)}\\?['\"])|(?<![\w.]){re.escape(n)}\b",
                         text) for n in names)


def apply_correction(inst: Instance, wf: Workflow, step: Step, slot: str, value: Any) -> None:
    """Set the corrected slot and forget what was collected or computed after it from it (except what the customer
    said first): a later step that reads the slot, or what such a step computed, is asked or computed again; an
    answer that never depended on it is kept ("no, the title should be Acme Trading" keeps the tax id said)."""
    inst["slots"][slot] = value
    inst["generation"] += 1
    inst["pending"].pop("action", None)
    prefilled = said_first(inst)
    order = list(wf.steps)
    ask = ask_step_of(wf, slot)
    start = order.index(ask.id) if ask is not None else len(order)
    # a slot a step before also sets (a tally started empty) is not set again when the flow goes back
    before = {n for sid in order[:start] for n in REGISTRY[wf.steps[sid].kind].writes(wf.steps[sid])}
    dirty = {slot}
    for sid in order[start + 1:]:
        s = wf.steps[sid]
        writes = REGISTRY[s.kind].writes(s)
        if not _reads_any(wf, s, dirty):
            continue
        dirty.update(writes)
        if isinstance(s.raw.get("bind"), str):
            dirty.add(s.raw["bind"])
        for n in writes:
            if n not in prefilled and n != slot and n not in before:
                inst["slots"].pop(n, None)
    inst["history"].append({"step": step.id, "event": "correction", "slot": slot, "at": time.time()})


def reopen(inst: Instance, wf: Workflow, step: Step, slot: str) -> None:
    """Forget ``slot`` and what was collected or computed after it, so the step that asks for it asks again ("a
    different order" at a later question): like a correction without its new value."""
    apply_correction(inst, wf, step, slot, None)
    inst["slots"].pop(slot, None)
    inst["history"][-1]["event"] = "reopened"


def fix(inst: Instance, wf: Workflow, step: Step, text: str, entities: dict[str, Any],
        run: FlowRun | None = None) -> str | None:
    """A correction of an earlier answer while asked something else: re-plan from that answer's step (with
    ``run``, an earlier pick too: "no, the other one")."""
    if not U.is_correction(text):
        return None
    found = correction(inst, wf, text, entities, skip=step.arg)
    if found is None:
        return repick(run, step, text) if run is not None else None
    slot, value = found
    apply_correction(inst, wf, step, slot, value)
    ask = ask_step_of(wf, slot)
    return ask.id if ask is not None else None


def repick(run: FlowRun, at: Step, text: str, *, dry: bool = False, bare: bool = False) -> str | None:
    """A correction of an earlier pick ("no, the other one", "actually the space grey one"), offered to every
    kind that picks (``StepKind.repick``): the step to go back to, or None. ``bare``: the message answers nothing
    ``at`` asks, so another option named alone ("不粘锅那个") re-picks too, without a correction's words."""
    for kind in REGISTRY.values():
        target = kind.repick(run, at, text, dry=dry, bare=bare)
        if target is not None:
            return target
    return None


def names_pick(run: FlowRun, at: Step, text: str) -> bool:
    """Whether the message only names what an earlier pick took (``StepKind.names_pick``): "毛巾那个" at the address
    question of the towels' order is the customer agreeing, not an answer and not a misunderstanding."""
    return any(kind.names_pick(run, at, text) for kind in REGISTRY.values())


def beside(run: FlowRun, step: Step, text: str) -> tuple[dict[str, Any], str]:
    """Values for slots the flow has not filled yet that an answer to ``step`` also states ("the boots, 5 dollars
    please" to "which order?", "100240, refund ¥20"), and the answer without them.

    Only what cannot be mistaken is taken (:func:`understand.stated_beside`: an amount with its currency, an
    order number, an email), never the slot the step asks for, and never words that also name one of the
    step's options (``StepKind.names``: "the $50 one" picks an option). They are kept only when the step takes
    its answer (the engine), like the values of a first message, so a step reached later does not ask again."""
    wf, inst = run.wf, run.inst
    own = REGISTRY[step.kind].asks_for(step)
    values: dict[str, Any] = {}
    spans: list[tuple[int, int]] = []
    for name, slot in wf.slots.items():
        ent = slot.validate.get("entity")
        if name == own or name in inst["slots"] or not isinstance(ent, str):
            continue
        found = U.stated_beside(ent, text)
        if found is None:
            continue
        value, span = found
        if any(a < span[1] and span[0] < b for a, b in spans) or not slot.check(value) \
                or REGISTRY[step.kind].names(run, step, text[span[0]:span[1]]):
            continue
        values[name] = value
        spans.append(span)
    rest = text
    for a, b in sorted(spans, reverse=True):
        rest = rest[:a] + " " + rest[b:]
    return values, rest


def said_first(inst: Instance) -> set[str]:
    """The slots the customer's own words gave before they were asked (the first message, or beside an answer
    to something else): a correction of an earlier answer keeps them."""
    kept: set[str] = set()
    for h in inst["history"]:
        if h.get("event") == "started":
            kept |= set(h.get("prefilled", []))
        elif h.get("event") == "beside":
            kept |= set(h.get("slots", []))
    return kept


def _leads(phrases: list[str]) -> re.Pattern[str] | None:
    """One pattern for a slot's names: a Latin phrase as whole words, a Chinese one as it is written."""
    parts = [rf"(?<![a-z0-9]){re.escape(w.strip())}(?![a-z0-9])" if re.match(r"[a-z0-9]", w.strip(), re.I)
             else re.escape(w.strip()) for w in sorted(phrases, key=len, reverse=True) if w.strip()]
    return re.compile("|".join(parts), re.I) if parts else None


_SAID_AS = re.compile(r"^(?:\s|[:：,，]|is\b|are\b|should\s+be\b|will\s+be\b|of\b|as\b|是|为|写成|写|填|用)+", re.I)
_CLAUSE_END = re.compile(r"[。；;!！?？\n]")


def named_value(wf: Workflow, name: str, text: str) -> str | None:
    """A free-text value said after one of its slot's names (``named_by``) in a message: "I need an invoice for the
    lamp order, company name Acme Trading Ltd" -> "Acme Trading Ltd", "抬头是杭州某某科技有限公司，税号…" -> "杭州某某科技
    有限公司". It runs to the end of its clause or to where another slot is named; None when nothing follows."""
    own = _leads([w for words in wf.slots[name].named_by.values() for w in words])
    found = own.search(text or "") if own is not None else None
    if found is None:
        return None
    rest = _SAID_AS.sub("", text[found.end():], count=1)
    end = _CLAUSE_END.search(rest)
    if end is not None:
        rest = rest[:end.start()]
    others = _leads([w for n, sl in wf.slots.items() if n != name for words in sl.named_by.values() for w in words])
    nxt = others.search(rest) if others is not None else None
    if nxt is not None:
        rest = rest[:nxt.start()]
    value = without_courtesy(rest).strip(" ,，:：")
    return value if value and U.is_free_value(value) else None   # "要公司抬头的": nothing said after it


def prefill(wf: Workflow, text: str, entities: dict[str, Any]) -> dict[str, Any]:
    """The slots the customer's first message already gives (an order number, an amount, the new address of
    "change the address of my hose order to 12 Baker Street, London", an invoice title named: never asked for
    again). The words a free-text value takes are no other slot's: the zip of "… Springfield, IL 62701" is no
    order number."""
    slots: dict[str, Any] = {}
    rest = text or ""
    for name, slot in wf.slots.items():
        if slot.validate.get("entity") is not None or name in entities:
            continue
        said = (named_value(wf, name, rest) if slot.named_by else
                address.span(rest) if slot.validate.get("format") == "address" else None)
        if said is not None and slot.check(said) and not U.is_pointer(said):
            slots[name] = said
            rest = rest.replace(said, " ")
    for name, slot in wf.slots.items():
        ent = slot.validate.get("entity")
        if ent in (None, "text", "number", "yes_no"):
            if name in entities and slot.check(entities[name]):
                slots[name] = entities[name]
            continue
        value = entities.get(name) if name in entities else U.extract(ent, rest, entities)
        if value is not None and not slot.check(value) and ent == "order_id" and name not in entities:
            # "W3003的邮编改成98109": the last number-like token is a zip code; the slot's own rule picks the id
            value = next((v for v in reversed(U.order_ids(rest)) if slot.check(v)), None)
        if value is not None and slot.check(value):
            slots[name] = value
    return slots
