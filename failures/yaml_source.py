"""YAML read with the line of every field, so a configuration error names ``file:line field: message``.

Tools, workflows and intents files are validated after loading; the validator knows the path of the
bad field (``tools[0].http.path``), the marks recorded here turn it into a line. Each package raises
its own :class:`SourceError` subclass, rendered the same way everywhere.
"""

from __future__ import annotations

from typing import Any

import yaml

_SCALARS = yaml.SafeLoader("")
_FAST = getattr(yaml, "CSafeLoader", None)


def compose(text: str) -> yaml.Node | None:
    """The document's node tree, with the line of every node. libyaml's parser when PyYAML has it (about ten
    times faster: the workflows, tools and intents files are read at every start and reload); a syntax error is
    read again by the pure-Python one, so its message and line are the same either way."""
    if _FAST is not None:
        try:
            node: yaml.Node | None = yaml.compose(text, Loader=_FAST)
            return node
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


def render(error: dict, label: str) -> str:
    """``file:line: field: message`` (``label`` stands for the file when there is none)."""
    where = error.get("file") or label
    if error.get("line"):
        where += f":{error['line']}"
    fld = f" {error['field']}:" if error.get("field") else ""
    return f"{where}:{fld} {error['message']}"


class SourceError(ValueError):
    """A problem in a configuration file, pinned to a line and a field (``errors``: every problem found)."""

    label = "<config>"

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None, field: str | None = None,
                 errors: list[dict] | None = None):
        self.message = message
        self.file = file
        self.line = line
        self.field = field
        self.errors = errors or [{"file": file, "line": line, "field": field, "message": message}]
        super().__init__("\n".join(render(e, self.label) for e in self.errors))


def dotted(path: tuple) -> str:
    """A data path as a field name: ``("tools", 0, "http")`` -> ``tools[0].http``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def named_field(path: tuple, data: Any, section: str) -> str:
    """A field path with the name of its list entry, e.g. ``intents[3](refund).rules[0].pattern``: an entry of
    ``data[section]`` that has a ``name`` is shown by it, so an error points at something a person wrote."""
    text = dotted(path)
    if len(path) >= 2 and path[0] == section and isinstance(path[1], int):
        try:
            name = data[section][path[1]].get("name")
        except (KeyError, IndexError, TypeError, AttributeError):
            name = None
        if name:
            text = text.replace(f"{section}[{path[1]}]", f"{section}[{path[1]}]({name})", 1)
    return text


def line_for(path: tuple, marks: dict[tuple, int]) -> int | None:
    """The line of ``path``, or of its nearest ancestor that has one."""
    p = tuple(path)
    while p:
        if p in marks:
            return marks[p]
        p = p[:-1]
    return marks.get(())


def syntax_error(exc: yaml.MarkedYAMLError) -> tuple[str, int | None]:
    """(message, line) for text that is not YAML at all."""
    mark = exc.problem_mark or exc.context_mark
    return f"not valid YAML: {exc.problem or exc}", (mark.line + 1) if mark else None


def construct(node: yaml.Node, *, file: str | None, marks: dict[tuple, int], keys: tuple[type, ...] = (str,),
              errors: list[dict] | None = None, error: type[SourceError] = SourceError) -> Any:
    """Plain data from a composed node tree (``yaml.compose``), recording the 1-based line of every path in
    ``marks`` (a key's line for a mapping entry). A key that is not one of ``keys`` or is repeated is a
    problem: appended to ``errors`` (and the walk goes on) when given, else raised as ``error``."""

    def problem(message: str, line: int, field: str | None) -> None:
        if errors is None:
            raise error(message, file=file, line=line, field=field)
        errors.append({"file": file, "line": line, "field": field, "message": message})

    def walk(node: yaml.Node, path: tuple) -> Any:
        marks[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = _SCALARS.construct_object(key_node) if isinstance(key_node, yaml.ScalarNode) else None
                line = key_node.start_mark.line + 1
                if not isinstance(key, keys):
                    problem("mapping keys must be plain strings" if keys == (str,) else
                            "mapping keys must be plain strings or numbers", line, dotted(path) or None)
                    continue
                if key in out:
                    problem(f"duplicate key {key!r}", line, dotted(path + (key,)))
                out[key] = walk(value_node, path + (key,))
                marks[path + (key,)] = line
            return out
        if isinstance(node, yaml.SequenceNode):
            return [walk(item, path + (i,)) for i, item in enumerate(node.value)]
        return _SCALARS.construct_object(node)

    return walk(node, ())
