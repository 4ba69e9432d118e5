"""mypy, strict, over the workflow engine and its step kinds ([tool.mypy] in pyproject.toml): a step handler
that returns the wrong thing, a missing argument or an untyped function fails the suite like any other defect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_mypy_strict_finds_nothing_in_the_workflows():
    out = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml"], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "no issues found" in out.stdout


def test_mypy_catches_a_wrong_type_in_a_step_kind(tmp_path):
    """The check is real: a step kind whose ``run`` returns a number is refused."""
    bad = tmp_path / "bad_kind.py"
    bad.write_text("from automation.workflows.steps.base import Outcome, StepContext, StepKind\n\n\n"
                   "class Bad(StepKind):\n    name = 'bad'\n\n"
                   "    def run(self, ctx: StepContext) -> Outcome:\n        return 3\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), str(bad)],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 1 and "Incompatible return value type" in out.stdout, out.stdout
