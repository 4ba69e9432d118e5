"""One-off commands that need no model do not load one: `router classify` on a message the rules decide,
`index status`; a message for the embedding channel reuses the gateway's cached example vectors and fit.

Real processes (the CLI entry point), a model path that does not exist where none may be loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "router.cli", *args], env={**os.environ, "PYTHONPATH": str(REPO),
                                                                         **env},
                          capture_output=True, text=True, timeout=300)


def test_classify_a_rule_hit_loads_no_model(tmp_path):
    env = {"SWITCHBOARD_HOME": str(tmp_path / "home"), "SWITCHBOARD_EMBEDDING_MODEL": str(tmp_path / "no-model")}
    # the model path does not exist: a command that tried to load it would fail (as the second one does)
    proc = _cli("router", "classify", "hello", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["intent"], out["decided_by"]) == ("greeting", "rules")
    # a message no rule decides needs the encoder: the missing model is then named, so none was loaded above
    proc = _cli("router", "classify", "my parcel never arrived", "--json", env=env)
    assert proc.returncode == 2 and "no-model" in proc.stderr, proc.stderr


def test_index_status_loads_no_model(dsn, tmp_path):
    env = {"SWITCHBOARD_HOME": str(tmp_path / "home"), "SWITCHBOARD_DATABASE_URL": dsn,
           "SWITCHBOARD_EMBEDDING_MODEL": str(tmp_path / "no-model")}
    proc = _cli("index", "status", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["active"] is None
    assert "presidio" not in proc.stderr.lower()


@pytest.mark.slow
def test_classify_reuses_the_cached_examples_and_fit(tmp_path, minilm_path):
    env = {"SWITCHBOARD_HOME": str(tmp_path / "home"), "SWITCHBOARD_EMBEDDING_MODEL": str(minilm_path)}
    first = _cli("router", "classify", "my parcel never arrived", "--json", env=env)
    assert first.returncode == 0, first.stderr
    cache = tmp_path / "home" / "cache"
    vectors = sorted(cache.joinpath("embeddings").rglob("*.npy"))
    fits = sorted(cache.joinpath("fits").glob("load-*.json"))
    assert vectors and len(fits) == 1
    stamps = {p: p.stat().st_mtime_ns for p in vectors + fits}
    again = _cli("router", "classify", "my parcel never arrived", "--json", env=env)
    assert json.loads(again.stdout) == json.loads(first.stdout)
    assert {p: p.stat().st_mtime_ns for p in vectors + fits} == stamps   # read, not computed again
    assert json.loads(first.stdout)["decided_by"] == "embeddings"
