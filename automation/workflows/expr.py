"""CEL expressions and safe templates for workflows.

CEL comes from ``common-expression-language`` (``import cel``) rather than ``cel-python``:
it is a Rust implementation (a compiled program runs in a few microseconds, which keeps a flow
step well under its budget), the macros ``filter``/``map``/``exists``/``all`` and ``has()`` work,
and its ``cel.stdlib`` adds the string and list extensions (``lowerAscii``, ``split``, ``join``,
``sum``, ``math.greatest``...). CEL never runs Python code: a workflow file cannot execute
anything but expressions over the data handed in. CEL does not mix int and double in arithmetic;
write ``double(x)`` where a tool gives whole numbers and the workflow computes with decimals.

Templates are plain text with ``{{ expression }}`` holes, each hole a CEL expression; there is no
template language that could run code (no Jinja).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import cel
from cel import stdlib as _stdlib

from automation.workflows import requests as _requests

_HOLE = re.compile(r"\{\{\s*(.+?)\s*\}\}", re.S)
# comprehension variables: items.filter(i, ...), items.map(x, ...), exists(i, ...), all(i, ...)
_COMPREHENSION = re.compile(r"\.\s*(?:filter|map|exists|all|exists_one|existsOne)\s*\(\s*([A-Za-z_]\w*)\s*,")
_SLOT_REF = re.compile(r"\bslots\s*\.\s*([A-Za-z_]\w*)")
_STRING_LIT = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')


class ExpressionError(ValueError):
    """A CEL expression that does not compile or fails at evaluation."""


@lru_cache(maxsize=4096)
def compile_expr(source: str) -> Any:
    try:
        return cel.compile(source)
    except (ValueError, RuntimeError) as exc:
        raise ExpressionError(str(exc).splitlines()[0]) from None


def roots(source: str) -> tuple[set[str], set[str]]:
    """(top-level names the expression reads, slot names it reads as ``slots.X``)."""
    program = compile_expr(source)
    local = set(_COMPREHENSION.findall(source))
    names = set(program.variables()) - local
    bare = _STRING_LIT.sub('""', source)
    return names, set(_SLOT_REF.findall(bare))


_EXTENSIONS: dict[str, Any] = {name: fn for lib in _stdlib.EXTENSIONS.values() for name, fn in lib.items()}
_EXTENSIONS["fmt_"] = lambda value: format_value(value)   # the templates' formatting, inside one CEL program
# the customer's words mapped to the shop's data (automation/workflows/requests.py)
_EXTENSIONS["fmt"] = lambda value: format_value(value)    # a value as the templates show it (15.00)
_EXTENSIONS["options_in"] = lambda text, variants: _requests.options_in(str(text or ""), variants)
_EXTENSIONS["synonyms"] = lambda value: _requests.synonyms(value)
_EXTENSIONS["address_edit"] = lambda text, base: _requests.address_edit(str(text or ""), base)


@lru_cache(maxsize=4096)
def _functions(source: str) -> tuple[tuple[str, Any], ...]:
    """The extension functions a program calls: registering all of them is most of a small evaluation's cost."""
    used = set(compile_expr(source).functions())
    return tuple((n, f) for n, f in _EXTENSIONS.items() if n in used or n.split(".")[-1] in used)


def _context(source: str, data: dict[str, Any]) -> cel.Context:
    ctx = cel.Context()
    for name, fn in _functions(source):
        ctx.add_function(name, fn)
    ctx.update(data)
    return ctx


@lru_cache(maxsize=4096)
def _reads(source: str) -> tuple[frozenset[str], frozenset[str]]:
    """(every name the program reads, the top-level names that must come from the data)."""
    names, _ = roots(source)
    return frozenset(compile_expr(source).variables()), frozenset(names)


def evaluate(source: str, data: dict[str, Any]) -> Any:
    program = compile_expr(source)
    reads, required = _reads(source)
    missing = sorted(n for n in required if n not in data)
    if missing:
        raise ExpressionError(f"{source}: Undefined variable {', '.join(missing)}")
    # hand CEL only the names the expression reads: converting a large tool result it does not use is
    # most of an evaluation's cost
    needed = {k: data[k] for k in reads if k in data}
    try:
        return program.execute(_context(source, needed))
    except (RuntimeError, TypeError, ValueError, KeyError) as exc:
        raise ExpressionError(f"{source}: {str(exc).splitlines()[0]}") from None


def evaluate_bool(source: str, data: dict[str, Any]) -> bool:
    value = evaluate(source, data)
    if not isinstance(value, bool):
        raise ExpressionError(f"{source}: a condition must give true or false, got {type(value).__name__}")
    return value


def holes(template: str) -> list[str]:
    return _HOLE.findall(template)


def format_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def render(template: str, data: dict[str, Any]) -> str:
    """Fill ``{{ expr }}`` holes with evaluated CEL; everything else is literal text."""
    return _HOLE.sub(lambda m: format_value(evaluate(m.group(1), data)), template)


def evaluate_value(spec: Any, data: dict[str, Any]) -> Any:
    """Arguments: a string is a CEL expression, a mapping/list is walked, other scalars are literals."""
    if isinstance(spec, str):
        return evaluate(spec, data)
    if isinstance(spec, dict):
        return {k: evaluate_value(v, data) for k, v in spec.items()}
    if isinstance(spec, list):
        return [evaluate_value(v, data) for v in spec]
    return spec


def template_expr(template: str) -> str:
    """A template as one CEL string expression: ``"Order {{ o.id }}"`` -> ``"Order " + fmt_(o.id)``."""
    parts, last = [], 0
    for m in _HOLE.finditer(template):
        if m.start() > last:
            parts.append(json.dumps(template[last:m.start()], ensure_ascii=False))
        parts.append(f"fmt_({m.group(1)})")
        last = m.end()
    if last < len(template):
        parts.append(json.dumps(template[last:], ensure_ascii=False))
    return " + ".join(parts) or '""'


def evaluate_each(items: list, var: str, exprs: list[str], data: dict[str, Any]) -> list[list[Any]]:
    """Evaluate several expressions for every item of a list in one CEL program (one conversion of the data)."""
    if not items:
        return []
    source = f"items_.map({var}, [{', '.join(exprs)}])"
    return evaluate(source, {**data, "items_": items})
