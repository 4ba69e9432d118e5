"""``switchboard workflows check TOOLS WORKFLOWS``: offline validation (no gateway, database or server), the
loader's own ``file:line: field:`` errors, --json, exit codes. The valid case runs as a real subprocess with
no database configured; the rest through typer's runner (the same command, in process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SECOND_SHOP = REPO / "tests" / "automation" / "second_shop"


def _run(*args: str):
    from typer.testing import CliRunner

    from router.cli import app

    result = CliRunner().invoke(app, ["workflows", "check", *args], env={"COLUMNS": "200"})
    return result


def _cli(*args: str) -> subprocess.CompletedProcess:
    # no database is configured and the tool servers' variables are unset: nothing may be started
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWITCHBOARD_DATABASE", "TRAILHEAD"))}
    return subprocess.run([sys.executable, "-m", "router.cli", "workflows", "check", *args], cwd=REPO,
                          env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)


def test_valid_files_pass_and_problems_are_named_by_file_line_and_field(tmp_path):
    ok = _cli(str(SECOND_SHOP / "tools_wrapped.yaml"), str(SECOND_SHOP / "workflows.yaml"), "--json")
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["ok"] and "return_items" in report["workflows"] and "cancel_pending_order" in report["tools"]

    broken = tmp_path / "workflows.yaml"
    broken.write_text((SECOND_SHOP / "workflows.yaml").read_text(encoding="utf-8").replace(
        "call: get_order_details", "call: get_order_detail", 1), encoding="utf-8")
    bad = _run(str(SECOND_SHOP / "tools.yaml"), str(broken))
    assert bad.exit_code == 1
    first = bad.stdout.splitlines()[0]
    line = next(i for i, x in enumerate(broken.read_text(encoding="utf-8").splitlines(), 1) if "get_order_detail\n"
                in x + "\n")
    assert first.startswith(f"{broken}:{line}: workflows.") and "unknown tool 'get_order_detail'" in first

    tools = tmp_path / "tools.yaml"
    tools.write_text((SECOND_SHOP / "tools.yaml").read_text(encoding="utf-8").replace("risk: money", "risk: huge", 1),
                     encoding="utf-8")
    bad_tools = _run(str(tools), str(SECOND_SHOP / "workflows.yaml"), "--json")
    assert bad_tools.exit_code == 1
    err = json.loads(bad_tools.stdout)["errors"][0]
    assert err["file"] == str(tools) and err["field"] == "tools[4](cancel_pending_order).risk" and err["line"]

    usage = _run(str(tools))
    assert usage.exit_code == 2
    helped = _run("--help")
    assert helped.exit_code == 0 and "offline" in helped.stdout
