"""Workflows (SOPs) as YAML: parsed, validated and cross-checked against the tool gateway on load.

Every error names the file, the line and the field (positions come from the YAML node marks,
the same approach as the intents file), and every error of a file is reported at once. A
workflow that names an unknown tool, tool argument, slot, binding or step is refused here, not
at the customer's turn. The shape is documented in ``automation/workflows/README.md``.
"""

from __future__ import annotations

import re
from pathlib import Path
from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema
import yaml
from pydantic import ValidationError

from automation.workflows.checks import Checker, WorkflowChecks, expr_sources
from automation.workflows.expr import ExpressionError, roots
from automation.workflows.model import (BUILTIN_NAMES, COMMON_KEYS, DEFAULT_TIERS, ENTITY_TYPES, ID, LANGS,  # noqa: F401
                                        RISK_ORDER, Slot, Step, Workflow, WorkflowConfigError, WorkflowSet)
from automation.workflows.model import Path as P
from automation.workflows.steps import KINDS, REGISTRY
from automation.workflows.understand import FORMATS
from failures.yaml_source import compose, construct, syntax_error

BUNDLED = Path(__file__).resolve().parent / "samples"
_ID = ID


# ---------------------------------------------------------------- validation

def parse_workflows(text: str, *, file: str | None = None, tools: Any | None = None) -> WorkflowSet:
    """Parse and validate one workflows YAML text; raise WorkflowConfigError listing every problem."""
    errors: list[dict[str, Any]] = []
    try:
        root = compose(text)
    except yaml.MarkedYAMLError as exc:
        message, line = syntax_error(exc)
        raise WorkflowConfigError([{"file": file, "line": line, "field": None, "message": message}]) from None
    if root is None:
        raise WorkflowConfigError([{"file": file, "line": 1, "field": None, "message": "the file is empty"}])
    marks: dict[P, int] = {}
    data = construct(root, file=file, marks=marks, keys=(str, int), errors=errors)
    if errors:
        raise WorkflowConfigError(errors)
    chk = Checker(file, marks, tools)
    if not isinstance(data, dict) or not isinstance(data.get("workflows"), dict):
        chk.err((), "expected a top-level mapping with a 'workflows' mapping")
        raise WorkflowConfigError(chk.errors)
    for k in data:
        if k not in ("version", "workflows", "approval_tiers", "vocabulary", "labels", "memory", "address"):
            chk.err((k,), f"unknown key {k!r} (version, approval_tiers, vocabulary, labels, memory, address, "
                          "workflows)")
    tiers = _tiers(data.get("approval_tiers"), ("approval_tiers",), chk)
    vocabulary = _vocabulary(data.get("vocabulary"), ("vocabulary",), chk)
    labels = _labels(data.get("labels"), ("labels",), chk)
    address = _address(data.get("address"), ("address",), chk)
    from automation.workflows.memory import parse_memory

    memory = parse_memory(data.get("memory"), ("memory",), chk)
    out: dict[str, Workflow] = {}
    for name, body in data["workflows"].items():
        wf = _workflow(str(name), body, ("workflows", name), chk, tiers)
        if wf is not None:
            wf.vocabulary = vocabulary
            wf.address = address
        if wf is not None:
            out[wf.name] = wf
    if not chk.errors:
        for wf in out.values():
            _typed(wf, chk)
    if chk.errors:
        raise WorkflowConfigError(chk.errors)
    return WorkflowSet(workflows=out, labels=labels, memory=memory)


def _typed(wf: Workflow, chk: Checker) -> None:
    """Each step's typed YAML (its kind's model), once the checks found nothing: the checks give the errors
    a person can act on; a shape they let through and the model refuses is still reported at its field."""
    for s in wf.steps.values():
        try:
            s.spec = REGISTRY[s.kind].spec.model_validate(s.raw)
        except ValidationError as exc:
            for e in exc.errors():
                chk.err(s.raw["_path"] + tuple(e["loc"]), str(e["msg"]))


def _labels(value: Any, path: P, chk: Checker) -> dict[str, dict[str, dict[str, str]]]:
    """``labels: {TABLE: {zh: {KEY: TEXT}, en: {...}}}``: words for a shop's codes (an order status) per language."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        chk.err(path, "expected a mapping of table name to {zh: {key: text}, en: {key: text}}")
        return {}
    out: dict[str, dict[str, dict[str, str]]] = {}
    for name, by_lang in value.items():
        p = path + (name,)
        if not isinstance(name, str) or not _ID.match(name):
            chk.err(p, "a label table name is lower case letters, digits and _")
            continue
        if not isinstance(by_lang, dict) or not all(k in LANGS for k in by_lang):
            chk.err(p, "expected {zh: {key: text}, en: {key: text}}")
            continue
        keys = None
        for lang, table in by_lang.items():
            if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
                chk.err(p + (lang,), "expected a mapping of key to text")
                continue
            if keys is not None and set(table) != keys:
                chk.err(p + (lang,), f"the {lang} table has other keys than the first language's: "
                        f"{', '.join(sorted(set(table) ^ keys))}")
            keys = set(table) if keys is None else keys
        out[name] = {lang: {str(k): v for k, v in t.items()} for lang, t in by_lang.items() if isinstance(t, dict)}
    return out


def _address(value: Any, path: P, chk: Checker) -> dict[str, Any]:
    """``address: {fields: {line1: address1, ...}, defaults: {country: US}}``: the address model's fields
    (``text.address.FIELDS``) in the shop's own names, and values for parts a customer rarely says."""
    from text.address import FIELDS

    if value is None:
        return {}
    if not isinstance(value, dict):
        chk.err(path, "expected {fields: {model field: shop field}, defaults: {model field: value}}")
        return {}
    for k in value:
        if k not in ("fields", "defaults"):
            chk.err(path + (k,), f"unknown key {k!r} (fields, defaults)")
    out: dict[str, Any] = {"fields": {}, "defaults": {}}
    for key in ("fields", "defaults"):
        part = value.get(key) or {}
        if not isinstance(part, dict):
            chk.err(path + (key,), "expected a mapping of model field (" + ", ".join(FIELDS) + ") to text")
            continue
        for f, v in part.items():
            if f not in FIELDS:
                chk.err(path + (key, f), f"unknown address field {f!r} ({', '.join(FIELDS)})")
            elif not isinstance(v, str):
                chk.err(path + (key, f), "expected text (quote it: YAML reads yes, no, on and digits as other types)")
            else:
                out[key][f] = v
    if not out["fields"]:
        out["fields"] = {f: f for f in FIELDS if f != "district"}
    return out


def _tiers(value: Any, path: P, chk: Checker) -> dict[str, float]:
    if value is None:
        return dict(DEFAULT_TIERS)
    if not isinstance(value, dict) or not value:
        chk.err(path, "expected a mapping of tier name to the highest amount it may approve")
        return dict(DEFAULT_TIERS)
    out = {}
    for k, v in value.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            chk.err(path + (k,), "the limit must be a number >= 0")
        else:
            out[str(k)] = float(v)
    return out


def _vocabulary(value: Any, path: P, chk: Checker) -> dict[str, dict[str, list[str]]]:
    """``{group: {shop value: [words the customers use]}}``; a group named like an option maps that option."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        chk.err(path, "expected a mapping of group (an option name such as size) to {value: [words]}")
        return {}
    out: dict[str, dict[str, list[str]]] = {}
    for group, values in value.items():
        if not isinstance(values, dict):
            chk.err(path + (group,), "expected a mapping of the shop's value to a list of words")
            continue
        for v, words in values.items():
            if not isinstance(words, list) or not all(isinstance(w, (str, int)) for w in words):
                chk.err(path + (group, v), "expected a list of words")
                continue
            out.setdefault(str(group), {})[str(v)] = [str(w) for w in words]
    return out


def _workflow(name: str, body: Any, path: P, chk: Checker, tiers: dict[str, float]) -> Workflow | None:
    if not _ID.match(name):
        chk.err(path, "a workflow name is lower case letters, digits and _")
    if not isinstance(body, dict):
        chk.err(path, "expected a mapping")
        return None
    for k in body:
        if k not in ("version", "description", "about", "intents", "hears", "slots", "steps", "approval_tiers"):
            chk.err(path + (k,), f"unknown key {k!r} (version, description, about, intents, hears, slots, steps, "
                    "approval_tiers)")
    version = body.get("version", 1)
    if not isinstance(version, int) or version < 1:
        chk.err(path + ("version",), "the version is a whole number >= 1")
        version = 1
    intents = body.get("intents", [])
    if not isinstance(intents, list) or not all(isinstance(i, str) for i in intents):
        chk.err(path + ("intents",), "expected a list of intent names")
        intents = []
    # what the customer tells about the task (its reason, what happened: "it arrived broken" while a refund asks
    # for the amount) is the flow's own to keep, never another topic served beside it; these do not start it
    hears = body.get("hears", [])
    if not isinstance(hears, list) or not all(isinstance(i, str) for i in hears):
        chk.err(path + ("hears",), "expected a list of intent names")
        hears = []
    slots = _slots(body.get("slots") or {}, path + ("slots",), chk)
    steps_raw = body.get("steps")
    if not isinstance(steps_raw, list) or not steps_raw:
        chk.err(path + ("steps",), "a workflow needs a non-empty list of steps")
        return None
    steps: dict[str, Step] = {}
    top = _sequence(steps_raw, path + ("steps",), chk, steps, parent=None)
    if not top:
        return None
    wf = Workflow(name=name, version=version, steps=steps, first=top[0], slots=slots, intents=intents, hears=hears,
                  description=chk.texts(body.get("description"), path + ("description",), required=False),
                  about=chk.texts(body.get("about"), path + ("about",), required=False),
                  approval_tiers=_tiers(body.get("approval_tiers"), path + ("approval_tiers",), chk)
                  if "approval_tiers" in body else dict(tiers),
                  file=chk.file, line=chk.line(path))
    _cross_check(wf, chk)
    return wf


def _slots(value: Any, path: P, chk: Checker) -> dict[str, Slot]:
    if not isinstance(value, dict):
        chk.err(path, "expected a mapping of slot name to its definition")
        return {}
    out = {}
    for name, body in value.items():
        p = path + (name,)
        if not isinstance(name, str) or not _ID.match(name):
            chk.err(p, "a slot name is lower case letters, digits and _")
            continue
        body = body or {}
        if not isinstance(body, dict):
            chk.err(p, "expected a mapping (prompt, validate, quick_replies)")
            continue
        for k in body:
            if k not in ("prompt", "validate", "quick_replies", "recall", "whole", "optional", "hint", "named_by"):
                chk.err(p + (k,), f"unknown key {k!r} (prompt, validate, quick_replies, recall, whole, optional, hint, "
                                  "named_by)")
        named_by = body.get("named_by") or {}
        if not isinstance(named_by, dict) or not all(
                lang in LANGS and isinstance(words, list) and words and all(isinstance(w, str) and w.strip() for w in words)
                for lang, words in named_by.items()):
            chk.err(p + ("named_by",), f"expected words per language ({', '.join(LANGS)}: a non-empty list of phrases)")
            named_by = {}
        if not isinstance(body.get("optional", False), bool):
            chk.err(p + ("optional",), "expected true or false")
        validate = body.get("validate") or {}
        if not isinstance(validate, dict):
            chk.err(p + ("validate",), "expected a mapping (entity, regex, enum, schema, format)")
            validate = {}
        for k, v in validate.items():
            vp = p + ("validate", k)
            if k == "entity":
                if v not in ENTITY_TYPES:
                    chk.err(vp, f"unknown entity type {v!r} ({', '.join(ENTITY_TYPES)})")
            elif k == "regex":
                try:
                    re.compile(v)
                except (re.error, TypeError) as exc:
                    chk.err(vp, f"the regex does not compile: {exc}")
            elif k == "enum":
                if not isinstance(v, list) or not v:
                    chk.err(vp, "expected a non-empty list of allowed values")
            elif k == "schema":
                try:
                    jsonschema.Draft202012Validator.check_schema(v)
                except jsonschema.SchemaError as exc:
                    chk.err(vp, f"not a valid JSON Schema: {exc.message}")
            elif k == "format":
                if not isinstance(v, str) or v not in FORMATS:
                    chk.err(vp, f"unknown format {v!r} ({', '.join(FORMATS)})")
            else:
                chk.err(vp, f"unknown validator {k!r} (entity, regex, enum, schema, format)")
        qr = body.get("quick_replies", [])
        out[name] = Slot(name=name, prompt=chk.texts(body.get("prompt"), p + ("prompt",), required=False),
                         validate=validate, quick_replies=qr if isinstance(qr, list) else [],
                         recall=body.get("recall"), whole=body.get("whole"),
                         optional=body.get("optional") is True, named_by=named_by,
                         hint=chk.texts(body.get("hint"), p + ("hint",), required=False), line=chk.line(p))
    return out


def _sequence(items: list[Any], path: P, chk: Checker, steps: dict[str, Step], parent: str | None) -> list[str]:
    ids: list[str] = []
    for i, raw in enumerate(items):
        p = path + (i,)
        if not isinstance(raw, dict):
            chk.err(p, "a step is a mapping with an id and one kind (" + ", ".join(KINDS) + ")")
            continue
        kinds = [k for k in KINDS if k in raw]
        if len(kinds) > 1:   # `end: completed` with its `reply`: a key of the other kind, not a second kind
            kinds = [k for k in kinds if not any(k in REGISTRY[o].keys for o in kinds if o != k)]
        if len(kinds) != 1:
            chk.err(p, "a step has exactly one kind of: " + ", ".join(KINDS) + (f" (found {', '.join(kinds)})" if kinds else ""))
            continue
        kind = kinds[0]
        sid = raw.get("id") or (f"{kind}_{i}" if kind == "end" else None)
        if not isinstance(sid, str) or not _ID.match(sid):
            chk.err(p + ("id",), "every step needs an id (lower case letters, digits and _)")
            continue
        if sid in steps:
            chk.err(p + ("id",), f"step id {sid!r} is used twice")
            continue
        for k in raw:
            if k != kind and k not in COMMON_KEYS and k not in REGISTRY[kind].keys:
                allowed = sorted((COMMON_KEYS | REGISTRY[kind].keys) - {"id"})
                chk.err(p + (k,), f"unknown key {k!r} for a {kind} step (allowed: {', '.join(allowed)})")
        step = Step(id=sid, kind=kind, raw=raw, line=chk.line(p), parent=parent)
        step.raw["_path"] = p
        steps[sid] = step
        if kind == "foreach":
            body = raw.get("steps")
            if not isinstance(body, list) or not body:
                chk.err(p + ("steps",), "a foreach needs a non-empty list of steps")
            else:
                step.body = _sequence(body, p + ("steps",), chk, steps, parent=sid)
            if not isinstance(raw.get("as"), str) or not _ID.match(raw.get("as") or ""):
                chk.err(p + ("as",), "a foreach names its loop variable with 'as'")
        ids.append(sid)
    for a, b in zip(ids, ids[1:]):
        steps[a].following = b
    return ids


#: CEL ``done`` by name, not a field of something else ("slots.done")
_DONE = re.compile(r"(?<![\w.])done\b")
#: keys whose value names a step ("goto: done"), not data
_STEP_REFS = frozenset({"id", "goto", "next", "on_error", "on_reject"})


def names_done(steps: Iterable[Step]) -> bool:
    """Whether any of ``steps`` (their expressions, their texts) names CEL ``done``. A text that says "done" counts
    too: reading the audit for nothing is only slower, never wrong."""
    return any(_mentions(step.raw) for step in steps)


def _mentions(value: Any) -> bool:
    if isinstance(value, str):
        return bool(_DONE.search(value))
    if isinstance(value, Mapping):
        return any(_mentions(v) for k, v in value.items() if not (k in _STEP_REFS and isinstance(v, str)))
    if isinstance(value, (list, tuple)):
        return any(_mentions(v) for v in value)
    return False


def _cross_check(wf: Workflow, chk: Checker) -> None:
    binds = {s.raw["bind"] for s in wf.steps.values() if s.kind == "call" and isinstance(s.raw.get("bind"), str)}
    loop_vars = {s.raw["as"] for s in wf.steps.values() if s.kind == "foreach" and isinstance(s.raw.get("as"), str)}
    set_slots = {k for s in wf.steps.values() if s.kind == "set" and isinstance(s.arg, dict) for k in s.arg}
    slot_names = set(wf.slots) | set_slots
    wf.known_slots = sorted(slot_names)
    wf.reads_done = names_done(wf.steps.values())
    for b in binds & (BUILTIN_NAMES | slot_names):
        chk.err(("workflows", wf.name), f"the binding {b!r} shadows a slot or a built-in name")
    ck = WorkflowChecks(wf, chk, set(BUILTIN_NAMES | binds | loop_vars), slot_names)
    for name, sl in wf.slots.items():
        if sl.recall is not None:
            ck.expr(sl.recall, ("workflows", wf.name, "slots", name, "recall"))
        if sl.whole is not None:
            ck.expr(sl.whole, ("workflows", wf.name, "slots", name, "whole"))
    for s in wf.steps.values():
        p = s.raw["_path"]
        if "when" in s.raw:
            ck.expr(s.raw["when"], p + ("when",))
        if "goto" in s.raw:
            ck.goto(s.raw["goto"], p + ("goto",))
        for j, t in enumerate(s.raw.get("next") or []):
            if not isinstance(t, dict) or "goto" not in t:
                chk.err(p + ("next", j), "a transition is {when: CEL, goto: STEP}")
                continue
            ck.goto(t["goto"], p + ("next", j, "goto"))
            if "when" in t:
                ck.expr(t["when"], p + ("next", j, "when"))
        for key in ("on_error", "on_reject"):
            if key in s.raw:
                ck.jump(s.raw[key], p + (key,))
        REGISTRY[s.kind].check(s, ck)
        for j, r in enumerate(s.raw.get("reset") or []):
            ck.slot(r, p + ("reset", j))
    _judge_risk(wf, ck.risk_of)


def _judge_risk(wf: Workflow, risk_of: dict[str, str]) -> None:
    """A workflow's risk is its riskiest reachable call; a read whose data feeds a write is judged as the write.

    Data flows through bindings and through slots computed by ``set`` steps; an argument
    expression of a write that reads a name derived from a read ties that read to the write.
    """
    origin: dict[Any, set[str]] = {}    # name (binding or "slots.X") -> read call steps it derives from
    for s in wf.steps.values():
        if s.kind == "call" and isinstance(s.raw.get("bind"), str):
            origin.setdefault(s.raw["bind"], set()).add(s.id)
    for s in wf.steps.values():
        if s.kind in ("set", "choose", "foreach") and isinstance(s.arg, (dict, str)):
            arg: Any = s.arg
            pairs = arg.items() if s.kind == "set" else [(arg, s.raw.get("options"))] if s.kind == "choose" \
                else [(None, arg)]
            for name, src in pairs:
                for source in expr_sources(src):
                    try:
                        names, slot_refs = roots(source)
                    except ExpressionError:
                        continue
                    feeds = set().union(*[origin.get(n, set()) for n in names],
                                        *[origin.get(f"slots.{r}", set()) for r in slot_refs])
                    if feeds:
                        target = f"slots.{name}" if name is not None else s.raw.get("as")
                        origin.setdefault(target, set()).update(feeds)
    judged = dict(risk_of)
    for s in wf.steps.values():
        pa = s.raw.get("pending_action") or {}
        args = s.raw.get("args") if s.kind == "call" else (
            [e.get("arguments") for e in pa if isinstance(e, dict)] if isinstance(pa, list) else pa.get("arguments"))
        risk = risk_of.get(s.id, "read")
        if s.kind not in ("call", "confirm") or RISK_ORDER.get(risk, 0) == 0:
            continue
        for source in expr_sources(args):
            try:
                names, slot_refs = roots(source)
            except ExpressionError:
                continue
            for n in list(names) + [f"slots.{r}" for r in slot_refs]:
                for read in origin.get(n, set()):
                    if RISK_ORDER[judged.get(read, "read")] < RISK_ORDER[risk]:
                        judged[read] = risk
    # a read that runs before a write shapes what the write does (its guards, its choices): judged at that write
    order = list(wf.steps)
    for i, sid in enumerate(order):
        if wf.steps[sid].kind != "call":
            continue
        later = [risk_of.get(x, "read") for x in order[i + 1:] if x in risk_of]
        top = max(later, key=lambda r: RISK_ORDER[r], default="read")
        if RISK_ORDER[top] > RISK_ORDER[judged.get(sid, "read")]:
            judged[sid] = top
    wf.call_risk = {k: v for k, v in judged.items() if wf.steps[k].kind == "call"}
    wf.risk = max(risk_of.values(), key=lambda r: RISK_ORDER[r], default="read")


def load_workflows(path: str | Path | None = None, *, tools: Any | None = None) -> WorkflowSet:
    """Load one YAML file or every ``*.yaml`` of a folder (default: the bundled samples)."""
    path = Path(path) if path else BUNDLED
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    merged: dict[str, Workflow] = {}
    labels: dict[str, dict[str, dict[str, str]]] = {}
    memory = None
    errors: list[dict[str, Any]] = []
    for f in files:
        try:
            ws = parse_workflows(f.read_text(encoding="utf-8"), file=str(f), tools=tools)
        except WorkflowConfigError as exc:
            errors.extend(exc.errors)
            continue
        for name, wf in ws.workflows.items():
            if name in merged:
                errors.append({"file": str(f), "line": wf.line, "field": f"workflows.{name}",
                               "message": f"workflow {name!r} is also defined in {merged[name].file}"})
            merged[name] = wf
        labels.update(ws.labels)
        if ws.memory is not None:
            if memory is not None:
                errors.append({"file": str(f), "line": None, "field": "memory",
                               "message": "memory is declared in more than one workflows file"})
            memory = ws.memory
    if errors:
        raise WorkflowConfigError(errors)
    return WorkflowSet(workflows=merged, labels=labels, memory=memory)
