"""`switchboard serve --workers 2`: two gateway processes behind one port, one database, one set of metrics.

A real server in a subprocess (the CLI entry point, uvicorn's process manager) on the test database;
requests over fresh connections so the kernel spreads them across the workers.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from keys_testkit import issue_integration_key

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _messages_by_pid(metrics_dir: Path) -> Counter:
    """Inbound messages counted by each worker, read from its multiprocess metrics file."""
    from prometheus_client.mmap_dict import MmapedDict

    by_pid: Counter = Counter()
    for f in metrics_dir.glob("counter_*.db"):
        pid = int(re.search(r"counter_(\d+)\.db", f.name).group(1))
        for key, value, _ts, _pos in MmapedDict.read_all_values_from_file(str(f)):
            if '"switchboard_messages_total"' in key:
                by_pid[pid] += int(value)
    return by_pid


def test_two_workers_share_the_database_and_report_one_set_of_metrics(dsn, tmp_path, minilm_path, seed_home,
                                                                       add_pack_vectors):
    port = _free_port()
    add_pack_vectors(dsn)   # the pack's vectors as a restart finds them: the worker that indexes it encodes nothing
    # the classifier's caches as a restart finds them (each worker would otherwise encode and fit the intents)
    home = seed_home(tmp_path / "home")
    seeded = {p: p.stat().st_mtime_ns for p in (home / "cache").rglob("*") if p.is_file()}
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {**os.environ, "SWITCHBOARD_DATABASE_URL": dsn, "SWITCHBOARD_HOME": str(home),
           "SWITCHBOARD_EMBEDDING_MODEL": str(minilm_path),   # both workers race to index the sample KB: one does
           "SWITCHBOARD_DISPATCHER_ENABLED": "false", "SWITCHBOARD_LOG_LEVEL": "WARNING",
           "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    env.pop("SWITCHBOARD_TORCH_THREADS", None)   # the command splits the cores between the workers
    proc = subprocess.Popen([sys.executable, "-m", "router.cli", "serve", "--workers", "2", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {issue_integration_key(dsn)}"}
    try:
        deadline = time.monotonic() + 420   # a bound for a hung start only: two workers load models on a busy machine
        ready = 0
        while ready < 10:   # ten fresh connections in a row answered ready: both workers are up
            assert proc.poll() is None, proc.stderr.read().decode(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the workers did not become ready"
            try:
                ready = ready + 1 if httpx.get(f"{base}/readyz", timeout=5).status_code == 200 else 0
            except httpx.HTTPError:
                ready = 0
                time.sleep(0.5)
        n = 40
        first = {}
        for i in range(n):
            r = httpx.post(f"{base}/v1/messages", timeout=30, headers=auth, json={
                "channel": "web", "conversation_id": f"c{i}", "customer_id": f"u{i}", "message_id": f"m{i}",
                "text": "I want to talk to a human"})
            assert r.status_code == 200, r.text
            assert r.json()["decision"]["tier"] == "L3"
            first[i] = r.json()
        # a retry (whichever worker takes it) is answered from the stored turn
        again = httpx.post(f"{base}/v1/messages", timeout=30, headers=auth, json={
            "channel": "web", "conversation_id": "c0", "customer_id": "u0", "message_id": "m0",
            "text": "I want to talk to a human"})
        assert again.status_code == 200 and again.headers.get("idempotent-replayed") == "true"
        assert again.json()["turn_id"] == first[0]["turn_id"]

        by_pid = _messages_by_pid(metrics_dir)
        assert len(by_pid) == 2 and all(by_pid.values()), by_pid   # both workers routed messages
        assert sum(by_pid.values()) == n
        for _ in range(6):   # whichever worker answers the scrape reports the whole gateway
            text = httpx.get(f"{base}/metrics", timeout=10, headers=auth).text
            total = sum(float(v) for v in re.findall(r'^switchboard_messages_total\{[^}]*\} (\S+)$', text, re.M))
            assert total == n
        import psycopg

        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM messages WHERE direction = 'in'").fetchone()[0] == n
        # the workers read the classifier's caches rather than writing them anew
        assert {p: p.stat().st_mtime_ns for p in seeded} == seeded
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert proc.returncode == 0
