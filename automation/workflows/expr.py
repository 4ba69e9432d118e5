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

import copy
import json
import re
import threading
from collections import OrderedDict
from functools import lru_cache
from collections.abc import Iterator
from typing import Any

import cel
from cel import stdlib as _stdlib

from automation.workflows import records as _records
from automation.workflows import requests as _requests

_HOLE = re.compile(r"\{\{\s*(.+?)\s*\}\}", re.S)
# comprehension variables: items.filter(i, ...), items.map(x, ...), exists(i, ...), all(i, ...)
_COMPREHENSION = re.compile(r"(?:\.\s*(?:filter|map|exists|all|exists_one|existsOne)|\bcel\s*\.\s*bind)\s*\(\s*([A-Za-z_]\w*)\s*,")
_SLOT_REF = re.compile(r"\bslots\s*\.\s*([A-Za-z_]\w*)")
_STRING_LIT = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')


class ExpressionError(ValueError):
    """A CEL expression that does not compile or fails at evaluation."""


@lru_cache(maxsize=4096)
def compile_expr(source: str) -> Any:
    try:
        return cel.compile(with_binds(source))
    except (ValueError, RuntimeError) as exc:
        raise ExpressionError(str(exc).splitlines()[0]) from None


_BIND = re.compile(r"\bcel\s*\.\s*bind\s*\(")


def with_binds(source: str) -> str:
    """``cel.bind(name, value, body)`` (CEL's local binding, which this CEL library lacks) as
    ``[value].map(name, body)[0]``: the value is computed once and named inside the body; binds nest."""
    if "bind" not in source:
        return source
    out, i = [], 0
    while True:
        m = _BIND.search(source, i)
        if m is None or _in_string(source, m.start()):
            if m is None:
                out.append(source[i:])
                return "".join(out)
            out.append(source[i:m.end()])
            i = m.end()
            continue
        args, end = _call_args(source, m.end())
        if args is None or len(args) != 3 or not re.fullmatch(r"\s*[A-Za-z_]\w*\s*", args[0]):
            raise ExpressionError("cel.bind takes (name, value, expression)")
        out.append(source[i:m.start()])
        out.append(f"[{with_binds(args[1])}].map({args[0].strip()}, {with_binds(args[2])})[0]")
        i = end


def _code(source: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """(index, character) of ``source`` from ``start`` that stand outside CEL string literals (a backslash
    escapes the next character): one reading of quotes for cel.bind and the filter rewrite alike."""
    quote, i = None, start
    while i < len(source):
        ch = source[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        else:
            yield i, ch
        i += 1


def _in_string(source: str, at: int) -> bool:
    """Whether position ``at`` lies inside a string literal (or an unclosed one, at the end)."""
    padded = source[:at] + " "    # a blank at ``at``: read as code unless a literal is open there
    return all(i != at for i, _ in _code(padded))


def _call_args(source: str, start: int) -> tuple[list[str] | None, int]:
    """The comma-separated arguments of a call whose "(" ends just before ``start`` and the index after its ")"."""
    depth, args, last = 0, [], start
    for i, ch in _code(source, start):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                args.append(source[last:i])
                return args, i + 1
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(source[last:i])
            last = i + 1
    return None, len(source)


#: CEL's type denotations: ``type(x) == int`` compares with a type, it reads no variable called ``int``
_TYPE_NAMES = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"})


def roots(source: str) -> tuple[set[str], set[str]]:
    """(top-level names the expression reads, slot names it reads as ``slots.X``)."""
    program = compile_expr(source)
    local = set(_COMPREHENSION.findall(source))
    names = set(program.variables()) - local - _TYPE_NAMES
    bare = _STRING_LIT.sub('""', source)
    return names, set(_SLOT_REF.findall(bare))


_EXTENSIONS: dict[str, Any] = {name: fn for lib in _stdlib.EXTENSIONS.values() for name, fn in lib.items()}
_EXTENSIONS["fmt_"] = lambda value: format_value(value)   # the templates' formatting, inside one CEL program
# the customer's words mapped to the shop's data (automation/workflows/requests.py)
_EXTENSIONS["fmt"] = lambda value: format_value(value)    # a value as the templates show it (15.00)
_EXTENSIONS["options_in"] = lambda text, variants: _requests.options_in(str(text or ""), variants)
_EXTENSIONS["synonyms"] = lambda value: _requests.synonyms(value)
_EXTENSIONS["address_edit"] = lambda text, base: _requests.address_edit(str(text or ""), base)
_EXTENSIONS.update(_records.FUNCTIONS)   # group_by, distinct (automation/workflows/records.py)
_EXTENSIONS["parse_address"] = lambda text: _requests.parse_address(str(text or ""))
_EXTENSIONS["address_line"] = lambda address, lang="en": _requests.address_line(address, str(lang))
_EXTENSIONS["address_model"] = lambda address: _requests.to_model(address)
_EXTENSIONS["address_shop"] = lambda address: _requests.to_shop(address)


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


def same_value(a: Any, b: Any) -> bool:
    """Equality as CEL sees it: 1, 1.0 and true are different values (Python's == says they are equal)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(v, b[k]) for k, v in a.items())
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return bool(a == b)


class _Env:
    __slots__ = ("values", "ctx", "functions")

    def __init__(self, values: dict[str, Any]):
        self.values = dict(values)
        self.ctx = cel.Context()
        self.functions: set[str] = set()
        self.ctx.update(self.values)

    def with_functions(self, source: str) -> cel.Context:
        """The context with the extension functions ``source`` calls (added once: adding resets the cache)."""
        for name, fn in _functions(source):
            if name not in self.functions:
                self.ctx.add_function(name, fn)
                self.functions.add(name)
        return self.ctx

    def matches(self, values: dict[str, Any]) -> bool:
        for name, value in values.items():
            if not same_value(value, self.values[name]):
                return False
        self.values.update(values)   # the same content: identity hits next time
        return True


class Envs:
    """CEL environments of one turn, keyed by the names a program reads, each converted to CEL once.

    Converting data to CEL values is most of an evaluation's cost (a 50-variant product: ~1 ms per
    conversion); the cel ``Context`` keeps its converted environment until it is modified, so one
    context per set of names is reused while those values stay the same (same object, or equal with
    the same types). Values handed in must not be mutated in place afterwards (the engine replaces them). Not
    thread-safe, like ``cel.Context``: one per turn.
    """

    __slots__ = ("_by_names",)
    MAX = 64

    def __init__(self) -> None:
        self._by_names: dict[frozenset[str], _Env] = {}

    def context(self, source: str, values: dict[str, Any]) -> cel.Context:
        key = frozenset(values)
        env = self._by_names.get(key)
        if env is None or not env.matches(values):
            if len(self._by_names) >= self.MAX:
                self._by_names.clear()
            env = self._by_names[key] = _Env(values)
        return env.with_functions(source)


class Scope(dict[str, Any]):
    """The names in scope of a step (a plain mapping) carrying the turn's CEL environments."""

    __slots__ = ("envs",)

    def __init__(self, data: Any = (), envs: Envs | None = None):
        super().__init__(data)
        self.envs = envs if envs is not None else Envs()

    def with_(self, **extra: Any) -> Scope:
        return Scope({**self, **extra}, self.envs)


def _top_level(text: str) -> tuple[list[int], list[tuple[int, int]]] | None:
    """Positions of ``.filter`` at nesting depth 0 and the (open, close) spans of depth-0 brackets."""
    depth, filters, spans, opened = 0, [], [], 0
    for i, ch in _code(text):
        if ch in "([{":
            if depth == 0:
                opened = i
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return None
            if depth == 0:
                spans.append((opened, i))
        elif depth == 0 and text.startswith(".filter", i):
            filters.append(i)
    return (filters, spans) if depth == 0 and not _in_string(text, len(text)) else None


@lru_cache(maxsize=4096)
def _split_filter(source: str) -> tuple[str, str, str] | None:
    """``BASE.filter(v, PRED)`` as the whole expression -> (BASE, v, PRED), else None."""
    text = source.strip()
    if not text.endswith(")") or ".filter" not in text:
        return None
    found = _top_level(text)
    if not found or not found[0]:
        return None
    filters, spans = found
    at = filters[-1]
    m = re.match(r"\.filter\s*\(\s*([A-Za-z_]\w*)\s*,", text[at:])
    if not m or not text[:at].strip():
        return None
    open_at = at + m.end() - 1 - len(m.group(0)) + m.group(0).index("(") + 1
    if (open_at, len(text) - 1) not in spans:   # the filter's parenthesis closes at the very end
        return None
    base = text[:at]
    skeleton, last = [], 0
    for o, c in spans:   # the base must be one member chain (a.b[0].c, (x), [..]): no operator at depth 0
        if c < at:
            skeleton.append(base[last:o])
            last = c + 1
    skeleton.append(base[last:])
    if not re.fullmatch(r"[\w\s.]*", "".join(skeleton)):
        return None
    return base, m.group(1), text[at + m.end():-1]


_PATH = re.compile(r"^\s*([A-Za-z_]\w*)((?:\s*\.\s*[A-Za-z_]\w*)*)\s*$")
_KEYWORDS = {"true", "false", "null", "in", "has", "size", "int", "uint", "double", "string", "bool", "bytes",
             "type", "dyn", "list", "map"}


@lru_cache(maxsize=4096)
def _path(source: str) -> tuple[str, tuple[str, ...]] | None:
    """``a.b.c`` (field selection only) -> ("a", ("b", "c")): read in Python, no conversion at all."""
    m = _PATH.match(source)
    if not m or m.group(1) in _KEYWORDS:
        return None
    fields = tuple(f.strip() for f in m.group(2).split(".")[1:])
    return m.group(1), fields


def _walk(value: Any, fields: tuple[str, ...]) -> Any:
    for f in fields:
        if not isinstance(value, dict) or f not in value:
            raise KeyError(f)
        value = value[f]
    return value


def _plain_cel(value: Any) -> bool:
    """Values a field path may hand back as CEL would (JSON data: no tuples, bytes or custom objects)."""
    return value is None or isinstance(value, (str, bool, int, float, dict, list))


def evaluate(source: str, data: dict[str, Any]) -> Any:
    """Evaluate a CEL expression over ``data``; a :class:`Scope` reuses its converted environments."""
    program = compile_expr(source)
    reads, required = _reads(source)
    missing = sorted(n for n in required if n not in data)
    if missing:
        raise ExpressionError(f"{source}: Undefined variable {', '.join(missing)}")
    # hand CEL only the names the expression reads: converting a large tool result it does not use is
    # most of an evaluation's cost
    needed = {k: data[k] for k in reads if k in data}
    for name, fields in _selections(source):
        value = needed.get(name)
        if isinstance(value, dict) and len(value) > len(fields):
            needed[name] = {f: value[f] for f in fields if f in value}
    envs = data.envs if isinstance(data, Scope) else None
    try:
        path = _path(source)
        if path is not None and path[0] in needed:   # a field path: read in Python, nothing to convert
            try:
                value = _walk(needed[path[0]], path[1])
                if _plain_cel(value):
                    return value
            except KeyError:
                pass   # CEL reports the missing key in its own words
        split = _split_filter(source) if envs is not None else None
        if split is not None and envs is not None:
            kept = _filtered(split, needed, envs)
            if kept is not None:
                return kept
        return program.execute(envs.context(source, needed) if envs is not None else _context(source, needed))
    except ExpressionError:
        raise
    except Exception as exc:  # noqa: BLE001 - CEL raises IndexError, KeyError, OverflowError...: each is the expression's failure
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ExpressionError(f"{source}: {first}") from None


@lru_cache(maxsize=4096)
def _selections(source: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """For each name the expression only ever reads fields of (``slots.done + [res.order_ref]``), those
    fields: CEL is handed just them (converting a value costs microseconds per string; the untouched
    slots of a long flow and the rest of a tool result are most of a small evaluation's cost)."""
    out = []
    for name in sorted(_reads(source)[1]):
        fields = _fields_of(name, [source])
        if fields is not None and fields:
            out.append((name, fields))
    return tuple(out)


def _filtered(split: tuple[str, str, str], needed: dict[str, Any], envs: Envs) -> list[Any] | None:
    """``BASE.filter(v, P)`` as ``BASE`` and ``BASE.map(v, P)``: the macro copies its growing result list
    on every kept element (quadratic in large maps: 50 variants ~3 ms), a list of booleans does not."""
    base, var, pred = split
    try:
        items = evaluate(base, Scope(needed, envs))
        if not isinstance(items, list):
            return None   # filtering a map's keys: CEL's own macro
        keep = evaluate_columns(items, var, [pred], Scope(needed, envs))[0]
    except ExpressionError:
        return None       # the original program reports the error
    if not isinstance(keep, list) or len(keep) != len(items) or not all(isinstance(k, bool) for k in keep):
        return None
    return [x for x, k in zip(items, keep) if k]


def evaluate_bool(source: str, data: dict[str, Any]) -> bool:
    value = evaluate(source, data)
    if not isinstance(value, bool):
        raise ExpressionError(f"{source}: a condition must give true or false, got {type(value).__name__}")
    return value


def holes(template: str) -> list[str]:
    return _HOLE.findall(template) if isinstance(template, str) else []   # not text: the loader says so


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


def evaluate_each(items: list[Any], var: str, exprs: list[str], data: dict[str, Any]) -> list[list[Any]]:
    """Evaluate several expressions for every item of a list (rows of values, one per item)."""
    cols = evaluate_columns(items, var, exprs, data)
    return [list(row) for row in zip(*cols)] if cols else [[] for _ in items]


def evaluate_columns(items: list[Any], var: str, exprs: list[str], data: dict[str, Any]) -> list[list[Any]]:
    """One list of values per expression over ``items`` (bound to ``var``), each list as long as ``items``.

    A field path (``option.id``) is read in Python; anything else is one ``items_.map(var, EXPR)`` over
    the items converted to CEL once for all the expressions (a single program returning a row of values
    per item would copy the growing list of rows on every item).
    """
    if not items:
        return [[] for _ in exprs]
    out: dict[str, list[Any]] = {}
    rest = []
    for source in exprs:
        if source in out or source in rest:
            continue
        path = _path(source)
        if path is not None and path[0] == var:
            try:
                values = [_walk(item, path[1]) for item in items]
                if all(_plain_cel(v) for v in values):
                    out[source] = values
                    continue
            except KeyError:
                pass
        rest.append(source)
    if not rest:
        return [out[source] for source in exprs]
    # convert only the fields of the items the expressions read (``option.options``): the rest of a
    # large record never reaches CEL
    fields = _fields_of(var, rest)
    if fields is not None and all(isinstance(item, dict) for item in items):
        items = [{f: item[f] for f in fields if f in item} for item in items]
    base = data if isinstance(data, Scope) else Scope(data)
    scope = base.with_(items_=items)
    content: str | None = None
    for source in rest:
        key = None
        if _reads(source)[1] <= {var}:   # reads the items alone: the same items give the same column
            if content is None:
                content = _content(items)
            key = (var, source, content) if content else None
            hit = COLUMNS.get(key) if key else None
            if hit is not None:
                out[source] = hit
                continue
        values = evaluate(f"items_.map({var}, {source})", scope)
        if not isinstance(values, list) or len(values) != len(items):
            raise ExpressionError(f"{source}: not one value per item")
        out[source] = values
        if key:
            COLUMNS.put(key, values)
    return [out[source] for source in exprs]


def _content(items: list[Any]) -> str:
    """The items as exact JSON (1 and 1.0 and true stay apart), or "" when they are not plain JSON."""
    try:
        return json.dumps(items, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return ""


class _Columns:
    """Columns of expressions that read nothing but the item (an option's label, its matchable words), kept
    across turns and conversations by the items' content: the prompt's turn and the answer's turn list the
    same options, and many customers choose among one product's variants. Values are handed out as copies."""

    MAX = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, str, str], list[Any]] = OrderedDict()

    def get(self, key: tuple[str, str, str]) -> list[Any] | None:
        with self._lock:
            values = self._kept.get(key)
            if values is None:
                return None
            self._kept.move_to_end(key)
        return copy.deepcopy(values)

    def put(self, key: tuple[str, str, str], values: list[Any]) -> None:
        kept = copy.deepcopy(values)
        with self._lock:
            self._kept[key] = kept
            self._kept.move_to_end(key)
            while len(self._kept) > self.MAX:
                self._kept.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)


COLUMNS = _Columns()


def _fields_of(var: str, sources: list[str]) -> frozenset[str] | None:
    """The first-level fields of ``var`` the expressions read, or None when one uses ``var`` otherwise
    (whole, indexed, or where a string literal makes the text ambiguous)."""
    fields: set[str] = set()
    for source in sources:
        bare = _STRING_LIT.sub('""', source)
        uses = re.findall(rf"(?<![.\w]){re.escape(var)}(?!\w)", bare)
        selected = re.findall(rf"(?<![.\w]){re.escape(var)}\s*\.\s*([A-Za-z_]\w*)", bare)
        if len(uses) != len(selected) or re.search(rf"\.\s*(?:filter|map|exists|all|exists_one)\s*\(\s*{re.escape(var)}\s*,", bare):
            return None   # the whole item is used, or a macro rebinds the same name
        fields.update(selected)
    return frozenset(fields)


def template_parts(template: str) -> list[tuple[bool, str]]:
    """A template as (is_expression, text) parts: literal text and ``{{ }}`` holes in order."""
    parts, last = [], 0
    for m in _HOLE.finditer(template):
        if m.start() > last:
            parts.append((False, template[last:m.start()]))
        parts.append((True, m.group(1)))
        last = m.end()
    if last < len(template):
        parts.append((False, template[last:]))
    return parts


def render_each(items: list[Any], var: str, templates: list[str], data: dict[str, Any]) -> list[list[str]]:
    """Every template rendered for every item (one list of texts per template): the holes are evaluated
    column by column and formatted in Python, so CEL never calls back into Python per item."""
    parsed = [template_parts(t) for t in templates]
    holes_ = [text for parts in parsed for is_expr, text in parts if is_expr]
    cols = dict(zip(holes_, evaluate_columns(items, var, holes_, data))) if holes_ else {}
    out = []
    for parts in parsed:
        texts = []
        for i in range(len(items)):
            texts.append("".join(format_value(cols[text][i]) if is_expr else text for is_expr, text in parts))
        out.append(texts)
    return out
