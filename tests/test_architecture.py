"""The import rules of pyproject.toml ([tool.importlinter]) hold: a forbidden import fails the suite.

The check is import-linter's own ``lint-imports`` (from the venv next to the interpreter), run on
the working tree, with the same contracts as a bare ``lint-imports`` in the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _ini_value(value) -> str:
    if isinstance(value, list):
        return "".join(f"\n    {v}" for v in value)
    return str(value)


def _config(repo: Path) -> str:
    """The [tool.importlinter] table of the tree's pyproject.toml as an INI config."""
    table = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    lines = ["[importlinter]", f"root_packages ={_ini_value(table['root_packages'])}"]
    for c in (dict(c) for c in table.get("contracts", [])):
        lines.append(f"\n[importlinter:contract:{c.pop('id')}]")
        lines += [f"{k} ={_ini_value(v)}" if isinstance(v, list) else f"{k} = {v}" for k, v in c.items()]
    return "\n".join(lines) + "\n"


def _lint(repo: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    config = tmp_path / "importlinter.ini"
    config.write_text(_config(repo), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(repo)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", str(config)], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def lint_imports():
    if not LINT_IMPORTS.is_file():
        pytest.fail(f"lint-imports not found next to {sys.executable}: install the test extra (import-linter)")
    return LINT_IMPORTS


def test_import_contracts_are_kept(lint_imports, tmp_path):
    result = _lint(REPO, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    for contract in ("rag and handoff never import router", "router's packages form layers",
                     "no import cycles between sibling modules", "channels never import the turn logic",
                     "automation (tool gateway + workflows) never imports", "text (normalisation",
                     "failures (problem documents", "step kinds never import the workflow engine",
                     "the turn's decider over its tier actions", "the routing order (router.turn.plan) reads facts"):
        assert contract in result.stdout


def _copy_tree(tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("router", "rag", "handoff", "automation", "text", "failures"):
        if (REPO / package).is_dir():
            shutil.copytree(REPO / package, copy / package, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    return copy


@pytest.mark.parametrize("module, line, contract", [
    ("rag/__init__.py", "import router.turn.pipeline", "rag and handoff never import router"),
    ("router/channels/base.py", "from router.turn import guards", "channels never import the turn logic"),
    ("router/ops/trace.py", "from router.app import services", "router's packages form layers"),
    ("router/outbox/store.py", "from router.ops import trace", "router's packages form layers"),
    ("router/telemetry/logs.py", "import router.outbox.store", "router's packages form layers"),
    ("router/app/services.py", "from router.app import composition", "no import cycles between sibling modules"),
    ("handoff/tickets.py", "from handoff import reveal", "no import cycles between sibling modules"),
    ("rag/config.py", "import rag.service", "no import cycles between sibling modules"),
    ("text/normalise.py", "import text.personal", "no import cycles between sibling modules"),
    ("automation/tools/base.py", "import handoff.service", "automation (tool gateway + workflows) never imports"),
    ("automation/workflows/engine.py", "from router.turn import pipeline", "automation (tool gateway + workflows)"),
    ("automation/workflows/steps/reply.py", "from automation.workflows import engine", "step kinds never import the"),
    ("text/leak.py", "import rag", "text (normalisation, personal-data masking) imports none of"),
    ("failures/leak.py", "import handoff.service", "failures (problem documents"),
    ("router/turn/plan.py", "from router.turn import state", "the routing order (router.turn.plan) reads facts"),
    ("router/turn/tiers/answers.py", "from router.turn import decider", "the turn's decider over its tier actions"),
])
def test_a_forbidden_import_breaks_a_contract(lint_imports, tmp_path, module, line, contract):
    copy = _copy_tree(tmp_path)
    target = copy / module
    before = target.read_text(encoding="utf-8") if target.exists() else ""
    target.write_text(before + f"\n{line}  # forbidden on purpose\n", encoding="utf-8")
    result = _lint(copy, tmp_path)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout


OUTBOX_SQL = re.compile(r"\b(?:FROM|JOIN|UPDATE|INTO|TABLE)\s+outbox(?:_\w+)?\b", re.IGNORECASE)


def test_the_outbox_tables_are_read_and_written_only_in_router_outbox():
    """router/outbox/ is the one owner of the outbox's SQL: everything else calls its functions."""
    owner = REPO / "router" / "outbox"
    scanned, outside = 0, []
    for package in ("router", "rag", "handoff", "automation", "text", "failures", "examples"):
        for path in sorted((REPO / package).rglob("*.py")):
            scanned += 1
            if owner not in path.parents:
                text = path.read_text(encoding="utf-8")
                outside += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in OUTBOX_SQL.finditer(text)]
    assert scanned > 100
    assert outside == [], outside
    assert OUTBOX_SQL.search((owner / "store.py").read_text(encoding="utf-8"))    # the pattern does find SQL


def test_every_source_folder_is_a_regular_package():
    """A folder without __init__.py is invisible to import-linter (its contracts would not see it) and to
    setuptools' package finder (a wheel or the image would ship without it)."""
    folders = {p.parent for package in ("router", "rag", "handoff", "automation", "text", "failures", "examples")
               for p in (REPO / package).rglob("*.py") if "__pycache__" not in p.parts}
    assert len(folders) > 20
    missing = sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file())
    assert missing == [], missing
