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


def _context(data: dict[str, Any]) -> cel.Context:
    ctx = cel.Context()
    _stdlib.add_stdlib_to_context(ctx)
    ctx.update(data)
    return ctx


def evaluate(source: str, data: dict[str, Any]) -> Any:
    program = compile_expr(source)
    try:
        return program.execute(_context(data))
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
