"""Workflows (SOPs) as YAML: parsed, validated and cross-checked against the tool gateway on load.

Every error names the file, the line and the field (positions come from the YAML node marks,
the same approach as the intents file), and every error of a file is reported at once. A
workflow that names an unknown tool, tool argument, slot, binding or step is refused here, not
at the customer's turn. The shape is documented in ``automation/workflows/README.md``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from automation.workflows.expr import ExpressionError, holes, roots
from automation.workflows.model import (BUILTIN_NAMES, COMMON_KEYS, DEFAULT_TIERS, ENTITY_TYPES, ID, LANGS,  # noqa: F401
                                        RISK_ORDER, Slot, Step, Workflow, WorkflowConfigError, WorkflowSet)
from failures.yaml_source import construct, dotted, line_for, syntax_error

BUNDLED = Path(__file__).resolve().parent / "samples"
KINDS = ("ask", "split", "choose", "confirm", "call", "set", "check", "foreach", "approve", "reply", "handoff", "end")
_ID = ID

KIND_KEYS = {
    "ask": {"prompt", "quick_replies"},
    "split": {"kinds", "prompt", "text"},
    "choose": {"options", "label", "value", "option_id", "match", "prompt", "auto_single", "refuse", "text",
               "cheapest", "required"},
    "confirm": {"pending_action"},
    "call": {"args", "bind"},
    "set": set(),
    "check": {"refuse"},
    "foreach": {"as", "steps"},
    "approve": {"waiting", "approved", "rejected"},
    "reply": {"quick_replies"},
    "handoff": {"reply"},
    "end": {"reply"},
}


# ---------------------------------------------------------------- validation

class _Checker:
    def __init__(self, file: str | None, marks: dict[tuple, int], tools: Any | None):
        self.file, self.marks, self.tools, self.errors = file, marks, tools, []
        self._tool_names = set(tools.names()) if tools is not None else None

    def err(self, path: tuple, message: str) -> None:
        self.errors.append({"file": self.file, "line": line_for(path, self.marks), "field": dotted(path),
                            "message": message})

    def line(self, path: tuple) -> int | None:
        return self.marks.get(path)

    def texts(self, value: Any, path: tuple, *, required: bool = True) -> dict[str, str]:
        """A text per language: {zh: ..., en: ...}; a plain string serves both."""
        if value is None:
            if required:
                self.err(path, "a text is required (zh and en)")
            return {}
        if isinstance(value, str):
            return {lang: value for lang in LANGS}
        if not isinstance(value, dict):
            self.err(path, "expected a mapping of language to text (zh, en)")
            return {}
        for lang in LANGS:
            if not isinstance(value.get(lang), str):
                self.err(path + (lang,), f"the {lang} text is missing")
        for k in value:
            if k not in LANGS:
                self.err(path + (k,), f"unknown language {k!r} (zh, en)")
        return {k: v for k, v in value.items() if isinstance(v, str)}

    def tool(self, name: Any, path: tuple) -> Any | None:
        if not isinstance(name, str):
            self.err(path, "a tool name is required")
            return None
        if self._tool_names is None:
            return None
        if name not in self._tool_names:
            self.err(path, f"unknown tool {name!r} (the gateway has: {', '.join(sorted(self._tool_names))})")
            return None
        return self.tools.spec(name)


def _expr_sources(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _expr_sources(v)]
    if isinstance(value, list):
        return [s for v in value for s in _expr_sources(v)]
    return []


def parse_workflows(text: str, *, file: str | None = None, tools: Any | None = None) -> WorkflowSet:
    """Parse and validate one workflows YAML text; raise WorkflowConfigError listing every problem."""
    errors: list[dict] = []
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        message, line = syntax_error(exc)
        raise WorkflowConfigError([{"file": file, "line": line, "field": None, "message": message}]) from None
    if root is None:
        raise WorkflowConfigError([{"file": file, "line": 1, "field": None, "message": "the file is empty"}])
    marks: dict[tuple, int] = {}
    data = construct(root, file=file, marks=marks, keys=(str, int), errors=errors)
    if errors:
        raise WorkflowConfigError(errors)
    chk = _Checker(file, marks, tools)
    if not isinstance(data, dict) or not isinstance(data.get("workflows"), dict):
        chk.err((), "expected a top-level mapping with a 'workflows' mapping")
        raise WorkflowConfigError(chk.errors)
    for k in data:
        if k not in ("version", "workflows", "approval_tiers", "vocabulary", "labels", "memory"):
            chk.err((k,), f"unknown key {k!r} (version, approval_tiers, vocabulary, labels, memory, workflows)")
    tiers = _tiers(data.get("approval_tiers"), ("approval_tiers",), chk)
    vocabulary = _vocabulary(data.get("vocabulary"), ("vocabulary",), chk)
    labels = _labels(data.get("labels"), ("labels",), chk)
    from automation.workflows.memory import parse_memory

    memory = parse_memory(data.get("memory"), ("memory",), chk)
    out: dict[str, Workflow] = {}
    for name, body in data["workflows"].items():
        wf = _workflow(str(name), body, ("workflows", name), chk, tiers)
        if wf is not None:
            wf.vocabulary = vocabulary
        if wf is not None:
            out[wf.name] = wf
    if chk.errors:
        raise WorkflowConfigError(chk.errors)
    return WorkflowSet(workflows=out, labels=labels, memory=memory)


def _labels(value: Any, path: tuple, chk: _Checker) -> dict[str, dict[str, dict[str, str]]]:
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


def _tiers(value: Any, path: tuple, chk: _Checker) -> dict[str, float]:
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


def _vocabulary(value: Any, path: tuple, chk: _Checker) -> dict[str, dict[str, list[str]]]:
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


def _workflow(name: str, body: Any, path: tuple, chk: _Checker, tiers: dict[str, float]) -> Workflow | None:
    if not _ID.match(name):
        chk.err(path, "a workflow name is lower case letters, digits and _")
    if not isinstance(body, dict):
        chk.err(path, "expected a mapping")
        return None
    for k in body:
        if k not in ("version", "description", "intents", "slots", "steps", "approval_tiers"):
            chk.err(path + (k,), f"unknown key {k!r} (version, description, intents, slots, steps, approval_tiers)")
    version = body.get("version", 1)
    if not isinstance(version, int) or version < 1:
        chk.err(path + ("version",), "the version is a whole number >= 1")
        version = 1
    intents = body.get("intents", [])
    if not isinstance(intents, list) or not all(isinstance(i, str) for i in intents):
        chk.err(path + ("intents",), "expected a list of intent names")
        intents = []
    slots = _slots(body.get("slots") or {}, path + ("slots",), chk)
    steps_raw = body.get("steps")
    if not isinstance(steps_raw, list) or not steps_raw:
        chk.err(path + ("steps",), "a workflow needs a non-empty list of steps")
        return None
    steps: dict[str, Step] = {}
    top = _sequence(steps_raw, path + ("steps",), chk, steps, parent=None)
    if not top:
        return None
    wf = Workflow(name=name, version=version, steps=steps, first=top[0], slots=slots, intents=intents,
                  description=chk.texts(body.get("description"), path + ("description",), required=False),
                  approval_tiers=_tiers(body.get("approval_tiers"), path + ("approval_tiers",), chk)
                  if "approval_tiers" in body else dict(tiers),
                  file=chk.file, line=chk.line(path))
    _cross_check(wf, chk)
    return wf


def _slots(value: Any, path: tuple, chk: _Checker) -> dict[str, Slot]:
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
            if k not in ("prompt", "validate", "quick_replies", "recall"):
                chk.err(p + (k,), f"unknown key {k!r} (prompt, validate, quick_replies, recall)")
        validate = body.get("validate") or {}
        if not isinstance(validate, dict):
            chk.err(p + ("validate",), "expected a mapping (entity, regex, enum, schema)")
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
            else:
                chk.err(vp, f"unknown validator {k!r} (entity, regex, enum, schema)")
        qr = body.get("quick_replies", [])
        out[name] = Slot(name=name, prompt=chk.texts(body.get("prompt"), p + ("prompt",), required=False),
                         validate=validate, quick_replies=qr if isinstance(qr, list) else [],
                         recall=body.get("recall"), line=chk.line(p))
    return out


def _sequence(items: list, path: tuple, chk: _Checker, steps: dict[str, Step], parent: str | None) -> list[str]:
    ids: list[str] = []
    for i, raw in enumerate(items):
        p = path + (i,)
        if not isinstance(raw, dict):
            chk.err(p, "a step is a mapping with an id and one kind (" + ", ".join(KINDS) + ")")
            continue
        kinds = [k for k in KINDS if k in raw]
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
            if k != kind and k not in COMMON_KEYS and k not in KIND_KEYS[kind]:
                allowed = sorted((COMMON_KEYS | KIND_KEYS[kind]) - {"id"})
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


def _cross_check(wf: Workflow, chk: _Checker) -> None:
    binds = {s.raw["bind"] for s in wf.steps.values() if s.kind == "call" and isinstance(s.raw.get("bind"), str)}
    loop_vars = {s.raw["as"] for s in wf.steps.values() if s.kind == "foreach" and isinstance(s.raw.get("as"), str)}
    set_slots = {k for s in wf.steps.values() if s.kind == "set" and isinstance(s.arg, dict) for k in s.arg}
    slot_names = set(wf.slots) | set_slots
    for b in binds & (BUILTIN_NAMES | slot_names):
        chk.err(("workflows", wf.name), f"the binding {b!r} shadows a slot or a built-in name")
    known = BUILTIN_NAMES | binds | loop_vars

    def expr(source: Any, path: tuple, extra: set[str] = frozenset()) -> None:
        if not isinstance(source, str):
            chk.err(path, "expected a CEL expression (a string)")
            return
        try:
            names, slot_refs = roots(source)
        except ExpressionError as exc:
            chk.err(path, f"CEL does not compile: {exc}")
            return
        for n in sorted(names - known - set(extra)):
            chk.err(path, f"unknown name {n!r} in {source!r} (known: {', '.join(sorted(known | set(extra)))})")
        for s in sorted(slot_refs - slot_names):
            chk.err(path, f"unknown slot {s!r} in {source!r}")

    def template(texts: Any, path: tuple, extra: set[str] = frozenset()) -> None:
        for lang, t in (texts.items() if isinstance(texts, dict) else [("", texts)] if isinstance(texts, str) else []):
            for h in holes(t):
                expr(h, path + ((lang,) if lang else ()), extra)

    def goto(target: Any, path: tuple) -> None:
        if target not in wf.steps:
            chk.err(path, f"unknown step {target!r}")

    def slot(name: Any, path: tuple) -> None:
        if name not in slot_names:
            chk.err(path, f"unknown slot {name!r} (declared: {', '.join(sorted(slot_names)) or 'none'})")

    def jump(value: Any, path: tuple) -> None:
        if value == "handoff" or value == "cancel":
            return
        if not isinstance(value, dict) or "goto" not in value:
            chk.err(path, "expected {goto: STEP, reset: [slots]} or 'handoff'")
            return
        goto(value["goto"], path + ("goto",))
        for j, r in enumerate(value.get("reset") or []):
            slot(r, path + ("reset", j))

    def arguments(tool_spec: Any, args: Any, path: tuple) -> None:
        if args is None:
            return
        if not isinstance(args, dict):
            chk.err(path, "arguments are a mapping of argument name to a CEL expression")
            return
        props = None
        if tool_spec is not None:
            if hasattr(tool_spec, "caller_arguments"):   # the gateway fills identity, key and static arguments
                props = list(tool_spec.caller_arguments)
            else:
                schema = getattr(tool_spec, "input_schema", None) or {}
                props = schema.get("properties") if isinstance(schema, dict) else None
        for k, v in args.items():
            if props is not None and k not in props:
                chk.err(path + (k,), f"unknown argument {k!r} of tool {tool_spec.name!r} (it takes: {', '.join(sorted(props))})")
            for src in _expr_sources(v):
                expr(src, path + (k,))

    for name, sl in wf.slots.items():
        if sl.recall is not None:
            expr(sl.recall, ("workflows", wf.name, "slots", name, "recall"))
    risk_of: dict[str, str] = {}
    for s in wf.steps.values():
        p = s.raw["_path"]
        if "when" in s.raw:
            expr(s.raw["when"], p + ("when",))
        if "goto" in s.raw:
            goto(s.raw["goto"], p + ("goto",))
        for j, t in enumerate(s.raw.get("next") or []):
            if not isinstance(t, dict) or "goto" not in t:
                chk.err(p + ("next", j), "a transition is {when: CEL, goto: STEP}")
                continue
            goto(t["goto"], p + ("next", j, "goto"))
            if "when" in t:
                expr(t["when"], p + ("next", j, "when"))
        for key in ("on_error", "on_reject"):
            if key in s.raw:
                jump(s.raw[key], p + (key,))
        k = s.kind
        if k == "ask":
            slot(s.arg, p + ("ask",))
            if s.arg in wf.slots and not wf.slots[s.arg].prompt and "prompt" not in s.raw:
                chk.err(p + ("ask",), f"the slot {s.arg!r} has no prompt to ask with")
            template(s.raw.get("prompt"), p + ("prompt",))
        elif k == "split":
            slot(s.arg, p + ("split",))
            kinds = s.raw.get("kinds")
            if not isinstance(kinds, dict) or not kinds:
                chk.err(p + ("kinds",), "expected a mapping of request kind to its words ({zh: [...], en: [...]} or a list)")
            else:
                for kind, words in kinds.items():
                    flat = words if isinstance(words, list) else [w for v in words.values() for w in v] \
                        if isinstance(words, dict) and all(isinstance(v, list) for v in words.values()) else None
                    if not _ID.match(str(kind)) or not flat or not all(isinstance(w, str) for w in flat):
                        chk.err(p + ("kinds", kind), "a kind is a lower case name with a non-empty list of words")
            chk.texts(s.raw.get("prompt"), p + ("prompt",))
            template(s.raw.get("prompt"), p + ("prompt",))
            if "text" in s.raw:
                expr(s.raw["text"], p + ("text",))
        elif k == "choose":
            slot(s.arg, p + ("choose",))
            if "text" in s.raw:
                expr(s.raw["text"], p + ("text",))
            if "cheapest" in s.raw:
                expr(s.raw["cheapest"], p + ("cheapest",), {"option"})
            if "required" in s.raw and not isinstance(s.raw["required"], bool):
                chk.err(p + ("required",), "required is true or false")
            expr(s.raw.get("options"), p + ("options",))
            chk.texts(s.raw.get("prompt"), p + ("prompt",))
            template(s.raw.get("prompt"), p + ("prompt",))
            template(s.raw.get("label"), p + ("label",), {"option"})
            if "label" not in s.raw:
                chk.err(p + ("label",), "a choose step needs a label template over 'option'")
            for key in ("value", "option_id"):
                if key in s.raw:
                    expr(s.raw[key], p + (key,), {"option"})
            for j, m in enumerate(s.raw.get("match") or []):
                expr(m, p + ("match", j), {"option"})
            if "refuse" in s.raw:
                chk.texts(s.raw["refuse"], p + ("refuse",))
                template(s.raw["refuse"], p + ("refuse",))
        elif k == "confirm":
            chk.texts(s.arg, p + ("confirm",))
            template(s.arg, p + ("confirm",))
            pa = s.raw.get("pending_action")
            entries = [(pa, p + ("pending_action",))] if not isinstance(pa, list) else \
                [(e, p + ("pending_action", j)) for j, e in enumerate(pa)]   # several actions confirmed together
            for entry, ep in entries if pa is not None else []:
                if not isinstance(entry, dict):
                    chk.err(ep, "expected {tool, arguments, summary} (or a list of them, each with an optional when)")
                    continue
                ts = chk.tool(entry.get("tool"), ep + ("tool",))
                arguments(ts, entry.get("arguments"), ep + ("arguments",))
                chk.texts(entry.get("summary"), ep + ("summary",))
                template(entry.get("summary"), ep + ("summary",))
                if "when" in entry:
                    expr(entry["when"], ep + ("when",))
                if ts is not None:
                    r = getattr(ts, "risk", "read")
                    if RISK_ORDER.get(r, 2) >= RISK_ORDER.get(risk_of.get(s.id, "read"), 0):
                        risk_of[s.id] = r
        elif k == "call":
            ts = chk.tool(s.arg, p + ("call",))
            arguments(ts, s.raw.get("args"), p + ("args",))
            if "bind" in s.raw and (not isinstance(s.raw["bind"], str) or not _ID.match(s.raw["bind"])):
                chk.err(p + ("bind",), "bind names the result (lower case letters, digits and _)")
            risk = getattr(ts, "risk", "read") if ts is not None else "read"
            if risk not in RISK_ORDER:
                chk.err(p + ("call",), f"tool {s.arg!r} has an unknown risk {risk!r}")
                risk = "money"
            risk_of[s.id] = risk
        elif k == "set":
            if not isinstance(s.arg, dict) or not s.arg:
                chk.err(p + ("set",), "expected a mapping of slot name to a CEL expression")
            else:
                for name, src in s.arg.items():
                    if not isinstance(name, str) or not _ID.match(name):
                        chk.err(p + ("set", name), "a slot name is lower case letters, digits and _")
                    expr(src, p + ("set", name))
        elif k == "check":
            expr(s.arg, p + ("check",))
            if "refuse" not in s.raw and "next" not in s.raw and "goto" not in s.raw and "on_reject" not in s.raw:
                chk.err(p + ("refuse",), "a check needs a refusal text (zh, en) for when it fails")
            if "refuse" in s.raw:
                chk.texts(s.raw["refuse"], p + ("refuse",))
                template(s.raw["refuse"], p + ("refuse",))
        elif k == "foreach":
            expr(s.arg, p + ("foreach",))
        elif k == "approve":
            a = s.arg
            if not isinstance(a, dict) or "amount" not in a:
                chk.err(p + ("approve",), "expected {amount, currency, order, evidence, call: STEP}")
            else:
                for key in ("amount", "currency", "order", "evidence"):
                    if key in a:
                        expr(a[key], p + ("approve", key))
                if "call" in a:
                    target = a["call"]
                    if target not in wf.steps or wf.steps[target].kind != "call":
                        chk.err(p + ("approve", "call"), f"{target!r} is not a call step of this workflow")
                for key in a:
                    if key not in ("amount", "currency", "order", "evidence", "call"):
                        chk.err(p + ("approve", key), f"unknown key {key!r} (amount, currency, order, evidence, call)")
            for key in ("waiting", "approved", "rejected"):
                if key in s.raw:
                    chk.texts(s.raw[key], p + (key,))
                    template(s.raw[key], p + (key,))
        elif k == "reply":
            chk.texts(s.arg, p + ("reply",))
            template(s.arg, p + ("reply",))
        elif k == "handoff":
            h = s.arg
            if not isinstance(h, dict) or h.get("tier") not in ("L2", "L3") or not isinstance(h.get("reason"), str):
                chk.err(p + ("handoff",), "expected {tier: L2|L3, reason: TEXT}")
            if "reply" in s.raw:
                chk.texts(s.raw["reply"], p + ("reply",))
                template(s.raw["reply"], p + ("reply",))
        elif k == "end":
            if s.arg not in ("completed", "cancelled"):
                chk.err(p + ("end",), "end is 'completed' or 'cancelled'")
            if "reply" in s.raw:
                chk.texts(s.raw["reply"], p + ("reply",))
                template(s.raw["reply"], p + ("reply",))
        for j, r in enumerate(s.raw.get("reset") or []):
            slot(r, p + ("reset", j))
    _judge_risk(wf, risk_of)


def _judge_risk(wf: Workflow, risk_of: dict[str, str]) -> None:
    """A workflow's risk is its riskiest reachable call; a read whose data feeds a write is judged as the write.

    Data flows through bindings and through slots computed by ``set`` steps; an argument
    expression of a write that reads a name derived from a read ties that read to the write.
    """
    origin: dict[str, set[str]] = {}    # name (binding or "slots.X") -> read call steps it derives from
    for s in wf.steps.values():
        if s.kind == "call" and isinstance(s.raw.get("bind"), str):
            origin.setdefault(s.raw["bind"], set()).add(s.id)
    for s in wf.steps.values():
        if s.kind in ("set", "choose", "foreach") and isinstance(s.arg, (dict, str)):
            pairs = s.arg.items() if s.kind == "set" else [(s.arg, s.raw.get("options"))] if s.kind == "choose" \
                else [(None, s.arg)]
            for name, src in pairs:
                for source in _expr_sources(src):
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
        for source in _expr_sources(args):
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
    labels: dict[str, dict] = {}
    memory = None
    errors: list[dict] = []
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
