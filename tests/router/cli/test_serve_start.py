"""Starting the gateway as an operator does: `make run` (its real recipe, in a subprocess) and `switchboard serve`.

A clean start prints no traceback; `kill -HUP` on the server reloads its files and it keeps serving under make;
a tools file that does not parse stops the start with its file and line instead of a gateway without tools.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _env(dsn: str, home: Path, minilm_path: Path, port: int) -> dict[str, str]:
    return {**os.environ, "SWITCHBOARD_DATABASE_URL": dsn, "SWITCHBOARD_HOME": str(home),
            "SWITCHBOARD_EMBEDDING_MODEL": str(minilm_path), "SWITCHBOARD_DISPATCHER_ENABLED": "false",
            "SWITCHBOARD_PORT": str(port), "SWITCHBOARD_LOG_JSON": "false", "PYTHONPATH": str(REPO)}


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_make_run_starts_without_a_traceback_and_reloads_on_sighup(dsn, tmp_path, minilm_path, add_pack_vectors):
    port = _free_port()
    add_pack_vectors(dsn)   # the pack's vectors as a restart finds them: the first start indexes without encoding
    err = tmp_path / "stderr.txt"
    # `make run`'s own recipe with this interpreter's environment; installing and preparing models are done
    make = subprocess.Popen(["make", "-s", "-C", str(REPO), "-o", "install", "-o", "models", "run",
                             f"VENV={sys.prefix}"], env=_env(dsn, tmp_path / "home", minilm_path, port),
                            stdout=subprocess.DEVNULL, stderr=err.open("w"), start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert make.poll() is None, err.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the gateway did not become ready"
            try:
                if httpx.get(f"{base}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        (server,) = _children(make.pid)   # make runs the server itself: the process a user signals
        os.kill(server, signal.SIGHUP)
        deadline = time.monotonic() + 60
        while not ("reloaded intents" in err.read_text(errors="replace")
                   and " workflows and " in err.read_text(errors="replace")):   # both files were re-read
            assert make.poll() is None, "SIGHUP ended the gateway:\n" + err.read_text(errors="replace")[-2000:]
            assert time.monotonic() < deadline, "SIGHUP reloaded nothing:\n" + err.read_text(errors="replace")[-2000:]
            time.sleep(0.3)
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
        assert make.poll() is None and _children(make.pid) == [server]
    finally:
        os.killpg(make.pid, signal.SIGINT)   # Ctrl-C in the terminal
        try:
            make.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
    log = err.read_text(errors="replace")
    assert "Traceback" not in log and "Logging error" not in log, log[:4000]


def test_a_tools_file_that_does_not_parse_stops_the_start_with_its_line(dsn, tmp_path):
    tools = tmp_path / "tools.yaml"
    text = (REPO / "automation" / "tools" / "samples" / "tools.yaml").read_text(encoding="utf-8")
    lines = text.splitlines()
    bad = next(n for n, line in enumerate(lines) if line.strip() == "risk: read")
    lines.insert(bad + 1, "   oops: [")   # a typo: wrong indentation and an unclosed list
    tools.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**_env(dsn, tmp_path / "home", tmp_path / "no-model", _free_port()), "SWITCHBOARD_TOOLS_FILE": str(tools)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "router.cli", "serve"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"{tools}:{bad + 2}:" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - started < 60   # refused before any model or database work


def test_a_workflow_calling_a_tool_the_file_lacks_stops_the_start(dsn, tmp_path):
    folder = tmp_path / "workflows"
    folder.mkdir()
    from automation.workflows.spec import BUNDLED

    for f in Path(BUNDLED).glob("*.yaml"):
        (folder / f.name).write_text(f.read_text(encoding="utf-8").replace("call: request_refund",
                                                                             "call: refund_everything"),
                                     encoding="utf-8")
    env = {**_env(dsn, tmp_path / "home", tmp_path / "no-model", _free_port()),
           "SWITCHBOARD_WORKFLOWS_FILE": str(folder)}
    proc = subprocess.run([sys.executable, "-m", "router.cli", "serve"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "refund_everything" in proc.stderr and ".yaml:" in proc.stderr, proc.stderr
