"""The nightly job must never wipe the live knowledge base: empty or much smaller sources are refused.

Each case runs against a populated knowledge base; a refused run activates nothing, deletes nothing,
records the refusal (report, /metrics) and the CLI exits 3 naming ``--allow-shrink``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag.generations import ShrinkRefused, index_refusals
from rag.lexical.tantivy import TantivyIndex
from rag.service import SAMPLE_KB, KnowledgeBase

DOCS = sorted(p.name for p in SAMPLE_KB.glob("*.md"))


@pytest.fixture
def full_source(tmp_path: Path) -> Path:
    src = tmp_path / "kb"
    src.mkdir()
    for name in DOCS[:10]:
        shutil.copy(SAMPLE_KB / name, src)
    return src


@pytest.fixture
def populated(pool, minilm_encoder, tmp_path, full_source) -> KnowledgeBase:
    kb = KnowledgeBase(pool, minilm_encoder, TantivyIndex(tmp_path / "index"), encoder_name="minilm")
    kb.rebuild(full_source)
    return kb


def _forty_percent(tmp_path: Path) -> Path:
    src = tmp_path / "partial"
    src.mkdir()
    for name in DOCS[:4]:
        shutil.copy(SAMPLE_KB / name, src)
    return src


def _state(kb: KnowledgeBase) -> tuple:
    ptr = kb.generations.pointer()
    return ptr["active"], ptr["previous"], kb.dense.count(ptr["active"]), kb.lexical.count(ptr["active"])


def _cases(tmp_path: Path) -> dict[str, Path]:
    empty = tmp_path / "empty"
    empty.mkdir()
    zero = tmp_path / "empty.md"
    zero.write_bytes(b"")
    return {"empty folder": empty, "0-byte file": zero, "40 % of the documents": _forty_percent(tmp_path)}


@pytest.mark.parametrize("command", ["rebuild", "sync"])
def test_empty_or_shrunken_sources_change_nothing(populated, tmp_path, pool, command):
    before = _state(populated)
    for label, source in _cases(tmp_path).items():
        with pytest.raises(ShrinkRefused) as refused:
            getattr(populated, command)(source)
        assert "--allow-shrink" in str(refused.value), label
        assert refused.value.active_docs == 10
        assert _state(populated) == before, f"{label}: the serving knowledge base changed"
    assert populated.ready()[0]
    assert len(populated.search("refund", 3, mode="bm25")) > 0
    with pool.connection() as conn:
        stats = index_refusals(conn)
    assert stats["total"] == 3 and stats["latest"]["command"] == command


def test_a_small_change_is_applied_and_allow_shrink_overrides(populated, tmp_path, full_source):
    (full_source / DOCS[0]).unlink()                 # 10 -> 9 documents: an ordinary edit
    assert populated.sync(full_source)["deleted_docs"] == 1
    partial = _forty_percent(tmp_path)
    summary = populated.sync(partial, allow_shrink=True)
    # the 9 left: DOCS[1:10]; the partial source: DOCS[0:4] -> DOCS[0] comes back, DOCS[4:10] go
    assert (summary["docs"], summary["added_docs"], summary["deleted_docs"]) == (4, 1, 6)
    rebuilt = populated.rebuild(full_source, allow_shrink=True)   # growing again needs no override
    assert rebuilt["docs"] == 9


def test_max_shrink_is_configurable(pool, minilm_encoder, tmp_path, full_source):
    from rag.service import RetrievalConfig

    kb = KnowledgeBase(pool, minilm_encoder, TantivyIndex(tmp_path / "index"), encoder_name="minilm",
                       config=RetrievalConfig(max_shrink=0.7))
    kb.rebuild(full_source)
    assert kb.rebuild(_forty_percent(tmp_path))["docs"] == 4      # 60 % dropped: within 70 %
    empty = tmp_path / "nothing"
    empty.mkdir()
    with pytest.raises(ShrinkRefused):                              # empty is refused at any share
        kb.sync(empty)


def test_cli_exits_3_and_report_and_metrics_say_so(dsn, tmp_path, monkeypatch, minilm_path, client):
    from router.cli import app

    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SWITCHBOARD_EMBEDDING_MODEL", str(minilm_path))
    runner = CliRunner()
    src = tmp_path / "kb"
    src.mkdir()
    for name in DOCS[:10]:
        shutil.copy(SAMPLE_KB / name, src)
    assert runner.invoke(app, ["index", "rebuild", "--source", str(src), "--json"]).exit_code == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in ("sync", "rebuild"):
        result = runner.invoke(app, ["index", command, "--source", str(empty), "--json"])
        assert result.exit_code == 3, result.output
        assert "--allow-shrink" in json.loads(result.stdout.strip().splitlines()[-1])["error"]
    status = runner.invoke(app, ["index", "status", "--json"])
    info = json.loads(status.stdout.strip().splitlines()[-1])
    assert info["ready"] and [g["docs"] for g in info["generations"] if g["status"] == "active"] == [10]

    report = runner.invoke(app, ["report", "--since", "1h", "--json"])
    assert report.exit_code == 0, report.output
    body = json.loads(report.stdout.strip().splitlines()[-1])
    assert body["knowledge_base"]["refused_updates"] == 2
    assert body["checks"]["knowledge_updates_applied"] is False
    text = runner.invoke(app, ["report", "--since", "1h"]).stdout
    assert "refused index update" in text

    assert "switchboard_index_refused_total 2.0" in client.get("/metrics").text
