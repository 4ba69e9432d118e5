"""The same workflows files load with the same errors for the same mistakes, whatever shape the loader takes.

``broken_workflows/`` holds files with mistakes in every step kind and every section; ``expected.json``
holds the errors (file, line, field, message) the loader gave for them when they were written. A change
in how workflows are modelled or checked must leave every one of them as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from automation.workflows.spec import WorkflowConfigError, load_workflows, parse_workflows

HERE = Path(__file__).resolve().parent / "broken_workflows"
EXPECTED = json.loads((HERE / "expected.json").read_text(encoding="utf-8"))


@dataclass
class Spec:
    name: str
    risk: str
    input_schema: dict = field(default_factory=dict)


class Catalog:
    """Tool specs only: what load-time validation reads from a gateway."""

    def __init__(self, **tools):
        self._specs = {n: Spec(n, r, {"type": "object", "properties": {a: {} for a in args}})
                       for n, (r, args) in tools.items()}

    def names(self):
        return sorted(self._specs)

    def spec(self, name):
        return self._specs[name]


TOOLS = Catalog(get_order=("read", ["order_id"]), request_refund=("money", ["order_id", "amount"]))


def errors_of(name: str, tools=TOOLS) -> list[dict]:
    with pytest.raises(WorkflowConfigError) as exc:
        parse_workflows((HERE / name).read_text(encoding="utf-8"), file=name, tools=tools)
    return exc.value.errors


@pytest.mark.parametrize("name", sorted(p.name for p in HERE.glob("*.yaml")))
def test_each_broken_file_gives_the_errors_it_always_gave(name):
    assert errors_of(name) == EXPECTED[name]


def test_without_a_tool_catalog_only_the_tool_checks_are_left_out():
    assert errors_of("kinds.yaml", tools=None) == EXPECTED["kinds.yaml (no tools)"]


def test_a_folder_reports_every_file_at_once_with_its_path():
    with pytest.raises(WorkflowConfigError) as exc:
        load_workflows(HERE, tools=TOOLS)
    got = [{**e, "file": Path(e["file"]).name if e["file"] else None} for e in exc.value.errors]
    assert got == EXPECTED["folder"]
    assert str(exc.value).count("\n") == len(got) - 1


def test_the_files_that_load_give_every_step_its_kinds_typed_yaml():
    from automation.workflows.spec import BUNDLED
    from automation.workflows.steps import REGISTRY

    second = Path(__file__).resolve().parent / "second_shop" / "workflows.yaml"
    for ws in (load_workflows(BUNDLED), load_workflows(second)):
        steps = [s for wf in ws.workflows.values() for s in wf.steps.values()]
        assert steps and all(type(s.spec) is REGISTRY[s.kind].spec for s in steps)
        calls = [s.spec for s in steps if s.kind == "call"]
        assert calls and all(c.call == s.arg for c, s in zip(calls, [s for s in steps if s.kind == "call"]))
