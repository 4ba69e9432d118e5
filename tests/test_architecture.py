"""The import rules of pyproject.toml ([tool.importlinter]) hold: a forbidden import fails the suite.

The check is import-linter's own ``lint-imports`` (from the venv next to the interpreter), run on
the working tree. Contracts reserved for packages that do not exist yet
(``[tool.switchboard.reserved_import_contracts]``) join the check as soon as the package's folder does.
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
    """The [tool.importlinter] table as an INI config, with the reserved contracts of present packages."""
    project = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    table = project["tool"]["importlinter"]
    roots = list(table["root_packages"])
    contracts = [dict(c) for c in table.get("contracts", [])]
    reserved = project["tool"].get("switchboard", {}).get("reserved_import_contracts", [])
    present = {r["package"] for r in reserved if (repo / r["package"] / "__init__.py").is_file()}
    roots += sorted(present - set(roots))
    for r in reserved:
        if r["package"] in present:
            contract = {k: v for k, v in r.items() if k != "package"}
            # a package that does not exist yet cannot be imported; import-linter would call it external
            contract["forbidden_modules"] = [m for m in contract["forbidden_modules"] if m.split(".")[0] in roots]
            contracts.append(contract)
    lines = ["[importlinter]", f"root_packages ={_ini_value(roots)}"]
    for c in contracts:
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
                     "no import cycles between sibling modules", "channels never import the turn logic"):
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
])
def test_a_forbidden_import_breaks_a_contract(lint_imports, tmp_path, module, line, contract):
    copy = _copy_tree(tmp_path)
    target = copy / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # forbidden on purpose\n", encoding="utf-8")
    result = _lint(copy, tmp_path)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout


def test_a_reserved_contract_applies_once_its_package_exists(lint_imports, tmp_path):
    copy = _copy_tree(tmp_path)
    for package in ("automation", "text"):
        (copy / package).mkdir(exist_ok=True)
        init = copy / package / "__init__.py"
        if not init.exists():
            init.write_text('"""placeholder."""\n', encoding="utf-8")
    (copy / "text" / "leak.py").write_text("import rag\n", encoding="utf-8")
    result = _lint(copy, tmp_path)
    assert result.returncode != 0
    assert "text (normalisation, personal-data masking) imports none of" in result.stdout.split("Broken contracts", 1)[-1]


def test_the_shared_failures_leaf_imports_none_of_the_packages(lint_imports, tmp_path):
    copy = _copy_tree(tmp_path)
    (copy / "failures" / "leak.py").write_text("import handoff.service  # forbidden on purpose\n", encoding="utf-8")
    result = _lint(copy, tmp_path)
    assert result.returncode != 0
    assert "failures (problem documents" in result.stdout.split("Broken contracts", 1)[-1], result.stdout


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
