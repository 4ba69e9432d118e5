"""`--help` of every command: a flag is shown without a value type (no `<bool>`), an option that takes a
value keeps its type."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from router.cli import app


def _paths(command, prefix=()):
    yield prefix
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _paths(sub, prefix + (name,))


def test_no_flag_shows_a_type_in_help():
    runner = CliRunner()
    paths = list(_paths(typer.main.get_command(app)))
    assert len(paths) > 30
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.output, (path, result.output)
    report = runner.invoke(app, ["report", "--help"], env={"COLUMNS": "200"}).output
    line = next(x for x in report.splitlines() if "--since" in x)
    assert "<str>" in line   # a value still shows its type
    line = next(x for x in report.splitlines() if "--json" in x)
    assert "<" not in line.split("Print")[0]
