"""The typed workflow: a set of workflows, each with its slots and steps, as the loader builds them.

The YAML is checked by ``spec`` (the file-wide sections) and by each step kind's module under
``steps/`` (that kind's keys and its references to slots, bindings, steps and tools); what passes is
held in these pydantic models, which the engine and the step kinds read. Errors name the file, the
line and the field (``WorkflowConfigError``), never a pydantic location.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field
from pydantic.dataclasses import dataclass

from automation.workflows.understand import FORMATS
from failures.yaml_source import render

LANGS = ("zh", "en")
RISK_ORDER = {"read": 0, "write": 1, "money": 2}
DEFAULT_TIERS = {"auto": 50.0, "supervisor": 500.0, "manager": 2000.0}   # above the last: director
ENTITY_TYPES = ("order_id", "amount", "money", "yes_no", "phone", "email", "number", "text")
ID = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# keys every step may carry besides its kind's own
COMMON_KEYS = frozenset({"id", "when", "goto", "next", "on_error", "on_reject", "reset"})
# names every expression may read besides bindings, slots of the workflow and loop variables
BUILTIN_NAMES = frozenset({"slots", "caller", "lang", "approval", "error", "index", "message", "memory", "labels",
                           "done", "earlier", "notes", "intent"})

Path = tuple[Any, ...]
Texts = dict[str, str]


class WorkflowConfigError(ValueError):
    """Problems in a workflows file, each pinned to a file, a line and a field."""

    def __init__(self, errors: list[dict[str, Any]]):
        self.errors = errors
        super().__init__("\n".join(render(e, "<workflows>") for e in errors))

    @property
    def first(self) -> dict[str, Any]:
        return self.errors[0]


# pydantic dataclasses: validated when built, plain attributes when read (the engine reads them on every step;
# a BaseModel's attribute hook would cost several times as much per read)
_MODEL = ConfigDict(arbitrary_types_allowed=True)


@dataclass(config=_MODEL)
class Slot:
    name: str
    prompt: Texts = Field(default_factory=dict)
    validate: dict[str, Any] = Field(default_factory=dict)   # entity | regex | enum | schema | format
    quick_replies: list[Any] = Field(default_factory=list)
    recall: Any = None                 # CEL over memory: the value "the same as last time" names
    whole: Any = None                  # CEL over the flow's scope: the value "all of it" / "全部" names
    optional: bool = False             # the customer may decline it ("不用了", "no need"): a decline answers it
    hint: Texts = Field(default_factory=dict)   # what an answer looks like: said after the prompt when asked again
    # what customers call it, per language ("company name", "抬头"): a free-text value said after one of these in
    # the first message fills the slot before it is asked
    named_by: dict[str, list[str]] = Field(default_factory=dict)
    line: int | None = None

    def check(self, value: Any) -> bool:
        v = self.validate
        if "enum" in v and value not in v["enum"]:
            return False
        if "regex" in v and not (isinstance(value, str) and re.fullmatch(v["regex"], value)):
            return False
        if "schema" in v:
            try:
                jsonschema.validate(value, v["schema"])
            except jsonschema.ValidationError:
                return False
        if "format" in v and not FORMATS[v["format"]](value):
            return False
        return True

    @property
    def free_text(self) -> bool:
        """Any words answer it (an address, an invoice title): no entity, pattern or list of values."""
        v = self.validate
        return v.get("entity") in (None, "text") and "regex" not in v and "enum" not in v


class StepSpec(BaseModel):
    """A step's YAML as its kind reads it: each kind's module (``steps/``) subclasses it with its own keys,
    which are also the keys the loader allows for that kind. Built once the file passed its checks."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, arbitrary_types_allowed=True)

    when: str | None = None
    goto: str | None = None
    next: Any = None                     # [{when, goto}]
    on_error: Any = None                 # handoff | {goto, reset}
    on_reject: Any = None                # {goto, reset}
    reset: Any = None                    # [slots]


@dataclass(config=_MODEL)
class Step:
    id: str
    kind: str
    raw: dict[str, Any]                 # the step as written (plus its YAML path under ``_path``)
    spec: StepSpec | None = None        # the typed YAML of its kind (set when the file loaded without errors)
    line: int | None = None
    parent: str | None = None           # the foreach whose body holds this step
    following: str | None = None        # the next step of its sequence (None: end of the sequence)
    body: list[str] = Field(default_factory=list)   # foreach: ids of the body's steps

    @property
    def arg(self) -> Any:
        return self.raw[self.kind]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    @cached_property
    def reads_memory(self) -> bool:
        """Whether the step as written names ``memory`` in any expression or template (its YAML path aside): a
        look ahead asks this of every step it walks, and a step's text never changes once loaded."""
        return _names_memory(self.raw)


_MEMORY = re.compile(r"\bmemory\b")


def _names_memory(raw: Any) -> bool:
    if isinstance(raw, str):
        return _MEMORY.search(raw) is not None
    if isinstance(raw, dict):
        return any(_names_memory(v) for k, v in raw.items() if k != "_path")
    if isinstance(raw, (list, tuple)):
        return any(_names_memory(v) for v in raw)
    return False


@dataclass(config=_MODEL)
class Workflow:
    name: str
    version: int
    steps: dict[str, Step]
    first: str
    slots: dict[str, Slot]
    intents: list[str] = Field(default_factory=list)
    hears: list[str] = Field(default_factory=list)     # intents of what is told about the task, kept by the flow
    description: Texts = Field(default_factory=dict)
    # what the task's answer is about, in the customer's words ("delivery", "快递配送"): a short follow-up to it
    # ("能快点吗", "can you make it faster?") is read with them (router.turn.tiers.answers.follow_up)
    about: Texts = Field(default_factory=dict)
    approval_tiers: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_TIERS))
    vocabulary: dict[str, dict[str, list[str]]] = Field(default_factory=dict)   # the shop's words for its values
    address: dict[str, Any] = Field(default_factory=dict)   # {fields: {model: shop field}, defaults}; {}: the model's
    risk: str = "read"
    call_risk: dict[str, str] = Field(default_factory=dict)   # call step -> risk it is judged at
    # every slot a step may read: declared, or computed by a `set`; one never set reads as null in CEL
    known_slots: list[str] = Field(default_factory=list)
    # a step names CEL ``done`` (spec.py decides at load; read when unknown): only then are the audit's writes read
    reads_done: bool = True
    file: str | None = None
    line: int | None = None

    def step(self, step_id: str) -> Step:
        return self.steps[step_id]

    def own_topic(self, intent: str | None) -> bool:
        """Whether a message of ``intent`` is about this task: one of the intents that start it, or one it hears."""
        return intent is not None and (intent in self.intents or intent in self.hears)

    def tier_for(self, amount: float) -> str:
        tiers = sorted(self.approval_tiers.items(), key=lambda kv: kv[1])
        for name, limit in tiers:
            if amount <= limit:
                return name
        return "director"


@dataclass(config=_MODEL)
class WorkflowSet:
    workflows: dict[str, Workflow]
    labels: dict[str, dict[str, dict[str, str]]] = Field(default_factory=dict)   # table -> lang -> key -> text
    memory: Any = None                  # automation.workflows.memory.MemorySpec: what a session loads first

    def labels_for(self, lang: str) -> dict[str, dict[str, str]]:
        """The label tables in one language (CEL ``labels.status[...]``), English where a language lacks one."""
        return {name: by_lang.get(lang) or by_lang.get("en") or {} for name, by_lang in self.labels.items()}

    def __getitem__(self, name: str) -> Workflow:
        return self.workflows[name]

    def __contains__(self, name: object) -> bool:
        return name in self.workflows

    def names(self) -> list[str]:
        return sorted(self.workflows)

    def for_intent(self, intent: str) -> Workflow | None:
        for wf in self.workflows.values():
            if intent in wf.intents:
                return wf
        return None
