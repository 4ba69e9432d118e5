"""``switchboard workflows check TOOLS WORKFLOWS``: validate a workflows file (or folder) against a tools file
offline, with the loader's own ``file:line: field: message`` errors.

Nothing is started: no gateway, no database, no tool server. The tools file's ``${VAR}`` references take the
environment's value, or a placeholder when unset (its servers are not contacted). The workflows are checked
against the tools file's declarations (names, arguments, risk), exactly as ``serve`` checks them at start-up.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import typer

from router.cli._common import JsonOpt, emit

app = typer.Typer(help="Workflows files: check them before serving.", no_args_is_help=True)

_PLACEHOLDER = "http://unset.invalid"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}")


class _Declared:
    """The tools file's declarations, offered to the workflows loader as a gateway would (names, specs)."""

    def __init__(self, specs: list) -> None:
        self._specs = {s.name: s for s in specs}

    def names(self) -> list[str]:
        return sorted(self._specs)

    def spec(self, name: str) -> Any:
        return self._specs[name]


def check_files(tools: Path, workflows: Path) -> dict[str, Any]:
    """Every problem of both files (tools first: the workflows are checked only against a valid tools file)."""
    from automation.tools.config import ToolConfigError, load_tools_file, to_specs
    from automation.workflows.model import WorkflowConfigError
    from automation.workflows.spec import load_workflows

    report: dict[str, Any] = {"ok": False, "tools": [], "workflows": [], "errors": []}
    try:
        text = tools.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        report["errors"].append({"file": str(tools), "line": None, "field": None, "message": type(exc).__name__})
        return report
    variables = dict(os.environ)
    for name in _ENV_REF.findall(text):
        variables.setdefault(name, _PLACEHOLDER)
    try:
        specs = to_specs(load_tools_file(tools, variables=variables))
    except ToolConfigError as exc:
        report["errors"] = exc.errors
        return report
    report["tools"] = [s.name for s in specs]
    if not workflows.exists():
        report["errors"].append({"file": str(workflows), "line": None, "field": None, "message": "file not found"})
        return report
    try:
        loaded = load_workflows(workflows, tools=_Declared(specs))
    except WorkflowConfigError as exc:
        report["errors"] = exc.errors
        return report
    report["workflows"] = sorted(loaded.workflows)
    report["ok"] = True
    return report


@app.command("check")
def check(
    tools: Path = typer.Argument(..., help="The tools YAML file.", show_default=False),
    workflows: Path = typer.Argument(..., help="A workflows YAML file, or a folder of them.", show_default=False),
    as_json: bool = JsonOpt,
) -> None:
    """Validate WORKFLOWS against TOOLS offline; print each problem as file:line: field: message.
    Exit 0 when both are valid, 1 when a problem was found (2: bad usage)."""
    from failures.yaml_source import render

    report = check_files(tools, workflows)
    if report["ok"]:
        text = f"ok: {len(report['workflows'])} workflows against {len(report['tools'])} tools"
    else:
        label = "<workflows>" if report["tools"] else "<tools>"
        text = "\n".join(render(e, label) for e in report["errors"])
    emit(report, as_json, text)
    if not report["ok"]:
        raise typer.Exit(1)
