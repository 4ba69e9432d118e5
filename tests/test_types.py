"""The type checker passes on the packages listed in pyproject.toml ([tool.mypy] files): a wrong type
there fails the suite, as a forbidden import does (tests/test_architecture.py) and a lint error does
(tests/test_lint.py).

mypy runs from the venv next to the interpreter, on the working tree, with the checkout's configuration; its
cache (.mypy_cache) makes a run after the first take a few seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _mypy(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
                           "--cache-dir", str(REPO / ".mypy_cache"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def mypy_installed():
    if subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode != 0:
        pytest.fail(f"mypy not found for {sys.executable}: install the test extra")


def test_the_listed_packages_type_check(mypy_installed):
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert {"text", "failures", "router/channels", "router/outbox", "router/schemas.py", "router/turn", "handoff",
            "automation/workflows"} <= set(config["files"])
    assert "exclude" not in config, "every module of a listed package is checked"
    strict = [o for o in config["overrides"] if o.get("disallow_untyped_defs") and o.get("warn_return_any")]
    assert any("handoff.*" in o["module"] for o in strict), "handoff (commands, desk, routes) is checked strictly"
    result = _mypy()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


def test_a_wrong_type_fails_the_check(mypy_installed, tmp_path):
    bad = tmp_path / "wrong.py"
    bad.write_text("from text.normalise import normalise\n\nfolded: int = normalise('Ｓｔｏｐ')\n", encoding="utf-8")
    result = _mypy(str(bad))
    assert result.returncode == 1
    assert 'Incompatible types in assignment (expression has type "str", variable has type "int")' in result.stdout


def test_mypy_catches_a_wrong_type_in_a_step_kind(mypy_installed, tmp_path):
    """The workflows are checked strictly: a step kind whose ``run`` returns a number is refused."""
    bad = tmp_path / "bad_kind.py"
    bad.write_text("from automation.workflows.steps.base import Outcome, StepContext, StepKind\n\n\n"
                   "class Bad(StepKind):\n    name = 'bad'\n\n"
                   "    def run(self, ctx: StepContext) -> Outcome:\n        return 3\n", encoding="utf-8")
    result = _mypy(str(bad))
    assert result.returncode == 1 and "Incompatible return value type" in result.stdout, result.stdout
