"""The intents file: which intents exist, their tier, rules, examples and thresholds.

Loaded once and validated with pydantic; every error names the file, the line and the field
(positions come from the YAML node marks), because an operator editing a 300-line file needs
to know *where* it is wrong, not just that it is.

Schema (``version: 1``)::

    version: 1
    threshold: 0.5            # global threshold on the embedding channel's score; null = fit at load
    unknown_tier: L2          # tier for out-of-scope messages
    scoring: {...}            # optional: fitted parameters of the embedding channel and the encoder they
                              # were fitted with (written by `switchboard router fit`)
    oos_examples: [...]       # optional: messages known to be out of scope (used as a rejection class)
    intents:
      - name: refund
        tier: L2
        description: ...
        threshold: 0.6        # optional per-intent threshold
        rules:
          - {type: regex, pattern: "退款|refund", priority: 10}
          - {type: keywords, any: [money back, 退钱], priority: 5}
        examples: [I want my money back, 我要退款]
      - name: greeting
        tier: L1
        serve: reply greeting # answered from the policy's reply template, no knowledge base, no ticket
      - name: order_query
        tier: L1
        serve: workflow order_status   # the customer's own data: a workflow (or the bot asks for the
                                       # order number / hands over), never a knowledge-base passage
      - name: cancel_order
        tier: L1
        topics: [order-cancellation]   # a question ("how do I cancel an order?") is answered from these
        task: cancel_order             # a request ("cancel my order") starts it; an answer offers it

Rules with a higher ``priority`` are tried first; ties keep file order.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from failures.yaml_source import SourceError, compose, construct, line_for, named_field, syntax_error

Tier = Literal["L1", "L2", "L3"]
TIERS = ("L1", "L2", "L3")
UNKNOWN = "oos"  # the label that means "out of scope" in evaluation files

BUNDLED_INTENTS = Path(__file__).resolve().parents[1] / "samples" / "intents.yaml"


class IntentConfigError(SourceError):
    """A problem in an intents file, pinned to a line and a field."""

    label = "<intents>"


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["regex", "keywords"]
    pattern: str | None = Field(default=None, description="regex rules: a Python regular expression (case-insensitive)")
    any: list[str] | None = Field(default=None, description="keyword rules: hit when any keyword occurs")
    priority: int = Field(default=0, description="higher is tried first")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {v!r}: {exc}") from None
        return v

    @model_validator(mode="after")
    def _shape(self) -> Rule:
        if self.type == "regex":
            if not self.pattern:
                raise ValueError("a regex rule needs `pattern`")
            if self.any:
                raise ValueError("a regex rule takes `pattern`, not `any`")
        else:
            if not self.any:
                raise ValueError("a keywords rule needs a non-empty `any` list")
            if self.pattern:
                raise ValueError("a keywords rule takes `any`, not `pattern`")
            if any(not str(k).strip() for k in self.any):
                raise ValueError("keywords must not be empty")
        return self


def _one_of(doc_id: str | None, articles: list[str]) -> bool:
    """Is ``doc_id`` (``returns-7day-en``) one of ``articles`` (ids without the language suffix)?"""
    if not doc_id or not articles:
        return False
    return any(doc_id == t or (doc_id.startswith(t + "-") and "-" not in doc_id[len(t) + 1:]) for t in articles)


class Intent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    tier: Tier
    description: str = ""
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    rules: list[Rule] = Field(default_factory=list)
    examples: list[str] = Field(default_factory=list)
    serve: str | None = Field(default=None, description="how the bot serves it: `reply <template>` (a fixed "
                              "reply from the policy, e.g. small talk) or `workflow <name>` (questions about the "
                              "customer's own data); absent = by tier (L1 from the knowledge base)")

    with_order: str | None = Field(default=None, description="how the bot serves it when the message names an "
                                   "order number: `workflow <name>` (\"the tracking number of order 100234\" is "
                                   "about the customer's own order, not a policy question)")

    topics: list[str] = Field(default_factory=list, description="the knowledge-base articles (document ids "
                              "without the language suffix, e.g. `returns-7day`) that answer questions of this "
                              "intent: a message that reads as a question is answered from them (L1), whatever "
                              "the tier or workflow")
    task: str | None = Field(default=None, description="the workflow that does this intent for the customer: a "
                             "request starts it, and an answer to a question offers it")
    advice: list[str] = Field(default_factory=list, description="knowledge-base articles (document ids without the "
                              "language suffix) that tell the customer what to do about a problem this intent "
                              "reports: when the message starts the intent's workflow and the knowledge base answers "
                              "it confidently from one of them, that answer goes with the workflow's reply (\"the "
                              "tracking says delivered but nothing came\": the order's status, then what to do)")

    @field_validator("topics", "advice")
    @classmethod
    def _topics(cls, v: list[str]) -> list[str]:
        bad = [t for t in v if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", t or "")]
        if bad:
            raise ValueError(f"topics are document ids without the language suffix (got {bad!r})")
        return v

    @field_validator("task")
    @classmethod
    def _task(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", v.strip()):
            raise ValueError(f"task is a workflow name (got {v!r})")
        return v.strip() if v is not None else None

    def covers(self, doc_id: str | None) -> bool:
        """Is the knowledge-base document ``doc_id`` (``returns-7day-en``) one of this intent's topics?"""
        return _one_of(doc_id, self.topics)

    def advises(self, doc_id: str | None) -> bool:
        """Is the knowledge-base document ``doc_id`` one of this intent's ``advice`` articles?"""
        return _one_of(doc_id, self.advice)

    @field_validator("serve")
    @classmethod
    def _serve(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"(?:reply|workflow)\s+[A-Za-z0-9_.-]{1,100}", v.strip()):
            raise ValueError(f"serve is `reply <template>` or `workflow <name>` (got {v!r})")
        return " ".join(v.split()) if v is not None else None

    @field_validator("with_order")
    @classmethod
    def _with_order(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"workflow\s+[A-Za-z0-9_.-]{1,100}", v.strip()):
            raise ValueError(f"with_order is `workflow <name>` (got {v!r})")
        return " ".join(v.split()) if v is not None else None

    @property
    def served_by(self) -> tuple[str, str] | None:
        """(``reply`` | ``workflow``, name), or None when the tier decides."""
        if not self.serve:
            return None
        kind, name = self.serve.split(" ", 1)
        return kind, name

    @property
    def looks_up(self) -> bool:
        """Served by a workflow and answering no question from the knowledge base (no ``topics``): it looks up the
        customer's own data (an order's status, a refund's progress), so a question of what may be done is not it."""
        return self.served_by is not None and self.served_by[0] == "workflow" and not self.topics

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or v != v.strip() or len(v) > 100 or any(ord(c) < 32 for c in v):
            raise ValueError(f"intent names are 1-100 printable characters without surrounding spaces (got {v!r})")
        if v == UNKNOWN:
            raise ValueError(f"{UNKNOWN!r} is reserved for out-of-scope; put such messages under `oos_examples`")
        return v

    @field_validator("examples")
    @classmethod
    def _examples(cls, v: list[str]) -> list[str]:
        if any(not isinstance(e, str) or not e.strip() for e in v):
            raise ValueError("examples must be non-empty strings")
        return v


class IntentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0,
                                    description="null = fitted from the examples when the classifier is built")
    unknown_tier: Tier = "L2"
    scoring: dict[str, Any] | None = None
    oos_examples: list[str] = Field(default_factory=list)
    intents: list[Intent]

    @model_validator(mode="after")
    def _unique(self) -> IntentConfig:
        seen: set[str] = set()
        for i, intent in enumerate(self.intents):
            if intent.name in seen:
                raise _AtPath(("intents", i, "name"), f"duplicate intent name {intent.name!r}")
            seen.add(intent.name)
        if not self.intents:
            raise ValueError("at least one intent is needed")
        return self

    def intent(self, name: str) -> Intent | None:
        return next((i for i in self.intents if i.name == name), None)

    @property
    def names(self) -> list[str]:
        return [i.name for i in self.intents]

    @property
    def lookups(self) -> list[str]:
        """The intents that only look up the customer's own data (Intent.looks_up)."""
        return [i.name for i in self.intents if i.looks_up]

    def tier_of(self, name: str | None) -> str:
        if name is None:
            return self.unknown_tier
        it = self.intent(name)
        return it.tier if it else self.unknown_tier

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json", exclude_none=True)
        for intent in data["intents"]:
            for key in ("rules", "examples", "serve", "with_order"):
                if not intent.get(key):
                    intent.pop(key, None)
            if not intent.get("description"):
                intent.pop("description", None)
        if not data.get("oos_examples"):
            data.pop("oos_examples", None)
        return yaml.safe_dump(data, allow_unicode=True, sort_keys=False, width=120)


class _AtPath(ValueError):
    """Raised by model validators that know the exact path of the offending field."""

    def __init__(self, path: tuple, message: str):
        super().__init__(message)
        self.path = path


def parse_intents(text: str, *, file: str | None = None) -> IntentConfig:
    """Parse and validate intents YAML text; raise IntentConfigError naming line and field."""
    try:
        root = compose(text)
    except yaml.MarkedYAMLError as exc:
        message, line = syntax_error(exc)
        raise IntentConfigError(message, file=file, line=line) from None
    if root is None:
        raise IntentConfigError("the file is empty", file=file, line=1)
    marks: dict[tuple, int] = {}
    data = construct(root, file=file, marks=marks, keys=(str, int), error=IntentConfigError)
    if not isinstance(data, dict):
        raise IntentConfigError("the top level must be a mapping (version, threshold, intents, ...)", file=file,
                                line=marks.get(()))
    try:
        return IntentConfig.model_validate(data)
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            ctx_err = (err.get("ctx") or {}).get("error")
            if isinstance(ctx_err, _AtPath):
                loc, message = ctx_err.path, str(ctx_err)
            # pydantic tags union/literal branches onto the loc; keep the data path only
            loc = tuple(p for p in loc if isinstance(p, int) or p in _known_keys(data, loc))
            if err["type"] == "extra_forbidden":
                message = f"unknown field (allowed: {', '.join(_allowed_for(loc))})"
            errors.append({"file": file, "line": line_for(loc, marks), "field": named_field(loc, data, "intents"),
                           "message": message})
        first = errors[0]
        raise IntentConfigError(first["message"], file=file, line=first["line"], field=first["field"],
                                errors=errors) from None


def _known_keys(data: Any, loc: tuple) -> set:
    keys: set = set()
    node = data
    for p in loc:
        if isinstance(node, dict):
            keys.update(k for k in node.keys() if isinstance(k, str))
            node = node.get(p)
        elif isinstance(node, list) and isinstance(p, int) and 0 <= p < len(node):
            node = node[p]
        else:
            break
    return keys | {"intents", "rules", "examples", "name", "tier", "pattern", "any", "priority", "type",
                   "threshold", "description", "unknown_tier", "version", "scoring", "oos_examples", "serve", "with_order"}


def _allowed_for(loc: tuple) -> list[str]:
    depth = [p for p in loc if isinstance(p, str)]
    model = IntentConfig
    if "rules" in depth:
        model = Rule
    elif "intents" in depth and len(depth) > 1:
        model = Intent
    return list(model.model_fields)


def load_intents(path: str | Path | None = None) -> IntentConfig:
    """Load an intents file (the bundled sample when ``path`` is None)."""
    p = Path(path) if path is not None else BUNDLED_INTENTS
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise IntentConfigError("file not found", file=str(p)) from None
    except UnicodeDecodeError as exc:
        raise IntentConfigError(f"not UTF-8 text: {exc}", file=str(p)) from None
    return parse_intents(text, file=str(p))


FIT_NOTE = ("# The fit of the examples above (switchboard router fit --intents FILE): the embedding channel's rejector,\n"
            "# with the threshold above, used as written until the file is fitted again.\n")


def write_fit(text: str, threshold: float, scoring: dict[str, Any] | None, *, file: str | None = None) -> str:
    """``text`` (an intents file) with its global ``threshold`` and ``scoring`` block replaced by a fit's, every other
    line (comments, order, quoting) as it was; a file without ``scoring`` gets it at its end. The file is then the
    reviewed record of its fit: the loader uses it as written (router.classify.fit.needs_fit)."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)   # the pure-Python parser: its marks count characters
    if not isinstance(root, yaml.MappingNode):
        raise IntentConfigError("the top level must be a mapping (version, threshold, intents, ...)", file=file)

    def at(mark: yaml.Mark) -> int:
        return mark.index

    def line_end(i: int) -> int:
        j = text.find("\n", i)
        return len(text) if j < 0 else j + 1

    def last_content(node: yaml.Node) -> yaml.Node:
        # a block collection's end mark lies at the next key, past any comment between: its last value ends it
        while isinstance(node, yaml.MappingNode | yaml.SequenceNode) and not node.flow_style and node.value:
            last = node.value[-1]
            node = last[1] if isinstance(node, yaml.MappingNode) else last
        return node

    keys = {k.value: (k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode)}
    edits: list[tuple[int, int, str]] = []
    if "threshold" in keys:
        value = keys["threshold"][1]
        edits.append((at(value.start_mark), at(value.end_mark), repr(float(threshold))))
    else:   # before the intents, where the file's settings end
        where = at(keys["intents"][0].start_mark) if "intents" in keys else 0
        edits.append((where, where, f"threshold: {float(threshold)!r}\n"))
    block = yaml.safe_dump({"scoring": scoring}, allow_unicode=True, sort_keys=False, width=120,
                           default_flow_style=None) if scoring else ""
    if "scoring" in keys:
        key, value = keys["scoring"]
        edits.append((at(key.start_mark), line_end(at(last_content(value).end_mark)), block))
    elif block:
        edits.append((len(text), len(text), ("" if text.endswith("\n") else "\n") + "\n" + FIT_NOTE + block))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    parse_intents(text, file=file)   # what is written must load and validate
    return text


def save_intents(config: IntentConfig, path: str | Path) -> Path:
    """Write a config atomically (temp file + rename) so a reader never sees half a file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(config.to_yaml(), encoding="utf-8")
    tmp.replace(p)
    return p
