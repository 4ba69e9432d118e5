"""Load-time checks of a workflows file: errors pinned to a file, a line and a field, all reported at once.

``Checker`` collects the errors of one file (the YAML node marks give the lines); ``WorkflowChecks``
offers what a step kind's check needs within one workflow: a CEL expression or template over the names
the workflow knows, a step to go to, a slot, a jump, a tool and its arguments.
"""

from __future__ import annotations

from typing import Any

from automation.workflows.expr import ExpressionError, holes, roots
from automation.workflows.model import LANGS, Path, Workflow
from failures.yaml_source import dotted, line_for


class Checker:
    """The errors of one file; ``tools`` (a gateway or a catalog of specs) is None when tools are not checked."""

    def __init__(self, file: str | None, marks: dict[tuple[Any, ...], int], tools: Any | None):
        self.file, self.marks, self.tools = file, marks, tools
        self.errors: list[dict[str, Any]] = []
        self._tool_names = set(tools.names()) if tools is not None else None

    def err(self, path: Path, message: str) -> None:
        self.errors.append({"file": self.file, "line": line_for(path, self.marks), "field": dotted(path),
                            "message": message})

    def line(self, path: Path) -> int | None:
        return self.marks.get(path)

    def texts(self, value: Any, path: Path, *, required: bool = True) -> dict[str, str]:
        """A text per language: {zh: ..., en: ...}; a plain string serves both."""
        if value is None:
            if required:
                self.err(path, "a text is required (zh and en)")
            return {}
        if isinstance(value, str):
            return {lang: value for lang in LANGS}
        if _scalar(value):
            self.err(path, _SCALAR.format(_scalar(value)))
            return {}
        if not isinstance(value, dict):
            self.err(path, "expected a mapping of language to text (zh, en)")
            return {}
        for lang in LANGS:
            if _scalar(value.get(lang)):
                self.err(path + (lang,), _SCALAR.format(_scalar(value.get(lang))))
            elif not isinstance(value.get(lang), str):
                self.err(path + (lang,), f"the {lang} text is missing")
        for k in value:
            if k not in LANGS:
                self.err(path + (k,), f"unknown language {k!r} (zh, en)")
        return {k: v for k, v in value.items() if isinstance(v, str)}

    def tool(self, name: Any, path: Path) -> Any | None:
        if not isinstance(name, str):
            self.err(path, "a tool name is required")
            return None
        if self._tool_names is None or self.tools is None:
            return None
        if name not in self._tool_names:
            self.err(path, f"unknown tool {name!r} (the gateway has: {', '.join(sorted(self._tool_names))})")
            return None
        return self.tools.spec(name)


_SCALAR = "expected text, but YAML read a {} here: quote it"


def _scalar(value: Any) -> str | None:
    """What YAML made of an unquoted word that was meant as text (``reply: yes``, ``prompt: 2``)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return None


def expr_sources(value: Any) -> list[str]:
    """Every string in a value (an argument mapping, a list of expressions): the CEL sources it holds."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in expr_sources(v)]
    if isinstance(value, list):
        return [s for v in value for s in expr_sources(v)]
    return []


class WorkflowChecks:
    """The checks a step kind runs against one workflow: names, slots, steps and tools it refers to."""

    def __init__(self, wf: Workflow, chk: Checker, known: set[str], slot_names: set[str]):
        self.wf, self.chk, self.known, self.slot_names = wf, chk, known, slot_names
        self.risk_of: dict[str, str] = {}       # call and confirm steps -> the risk of the tools they run

    def err(self, path: Path, message: str) -> None:
        self.chk.err(path, message)

    def texts(self, value: Any, path: Path, *, required: bool = True) -> dict[str, str]:
        return self.chk.texts(value, path, required=required)

    def tool(self, name: Any, path: Path) -> Any | None:
        return self.chk.tool(name, path)

    def expr(self, source: Any, path: Path, extra: frozenset[str] | set[str] = frozenset()) -> None:
        if not isinstance(source, str):
            self.err(path, "expected a CEL expression (a string)")
            return
        try:
            names, slot_refs = roots(source)
        except ExpressionError as exc:
            self.err(path, f"CEL does not compile: {exc}")
            return
        for n in sorted(names - self.known - set(extra)):
            self.err(path, f"unknown name {n!r} in {source!r} (known: {', '.join(sorted(self.known | set(extra)))})")
        for s in sorted(slot_refs - self.slot_names):
            self.err(path, f"unknown slot {s!r} in {source!r}")

    def template(self, texts: Any, path: Path, extra: frozenset[str] | set[str] = frozenset()) -> None:
        pairs = texts.items() if isinstance(texts, dict) else [("", texts)] if isinstance(texts, str) else []
        for lang, t in pairs:
            for h in holes(t):
                self.expr(h, path + ((lang,) if lang else ()), extra)

    def text(self, value: Any, path: Path) -> None:
        """A required text per language whose CEL holes are checked too (a reply, a refusal, a prompt)."""
        self.texts(value, path)
        self.template(value, path)

    def goto(self, target: Any, path: Path) -> None:
        if not isinstance(target, str) or target not in self.wf.steps:
            self.err(path, f"unknown step {target!r}")

    def slot(self, name: Any, path: Path) -> None:
        if not isinstance(name, str) or name not in self.slot_names:
            self.err(path, f"unknown slot {name!r} (declared: {', '.join(sorted(self.slot_names)) or 'none'})")

    def jump(self, value: Any, path: Path) -> None:
        if value == "handoff" or value == "cancel":
            return
        if not isinstance(value, dict) or "goto" not in value:
            self.err(path, "expected {goto: STEP, reset: [slots]} or 'handoff'")
            return
        self.goto(value["goto"], path + ("goto",))
        for j, r in enumerate(value.get("reset") or []):
            self.slot(r, path + ("reset", j))

    def arguments(self, tool_spec: Any, args: Any, path: Path) -> None:
        if args is None:
            return
        if not isinstance(args, dict):
            self.err(path, "arguments are a mapping of argument name to a CEL expression")
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
                self.err(path + (k,), f"unknown argument {k!r} of tool {tool_spec.name!r} "
                                      f"(it takes: {', '.join(sorted(props))})")
            for src in expr_sources(v):
                self.expr(src, path + (k,))
