"""`switchboard rag eval` and `switchboard index ...` end to end: real database, real index, small encoder."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rag.service import SAMPLE_KB
from router.cli import app

BEIR = Path(__file__).resolve().parent.parent / "fixtures" / "beir_small"
KEYS = {"ndcg@10", "recall@10", "recall@100", "mrr@10", "n_queries", "latency_ms_p50", "latency_ms_p95", "mode"}


@pytest.fixture
def cli(dsn, tmp_path, minilm_path, monkeypatch, compiled_metrics):
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
    monkeypatch.setenv("SWITCHBOARD_EMBEDDING_MODEL", str(minilm_path))
    monkeypatch.delenv("SWITCHBOARD_RERANKER_MODEL", raising=False)
    monkeypatch.delenv("SWITCHBOARD_ELASTICSEARCH_URL", raising=False)
    runner = CliRunner()

    def run(*args: str):
        result = runner.invoke(app, list(args), catch_exceptions=False)
        lines = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
        return result, (json.loads(lines[-1]) if lines else None)

    return run


def test_eval_json_has_the_metrics_of_the_mode(cli, dsn):
    result, out = cli("rag", "eval", "--beir", str(BEIR), "--mode", "hybrid", "--json")
    assert result.exit_code == 0, result.stdout
    assert KEYS <= set(out) and out["mode"] == "hybrid"
    assert out["n_queries"] == 12 and out["n_docs"] == 12
    for m in ("ndcg@10", "recall@10", "recall@100", "mrr@10"):
        assert 0.0 <= out[m] <= 1.0
    assert out["recall@100"] == 1.0                          # 12 documents: every answer is in the top 100
    assert 0 < out["latency_ms_p50"] <= out["latency_ms_p95"]
    assert out["fusion"]["method"] in ("rrf", "convex") and out["reranker"] is None
    # the throw-away generation is gone, the embeddings it paid for stay cached
    import psycopg

    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM kb_chunks").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM kb_embeddings").fetchone()[0] == 12
        assert conn.execute("SELECT active FROM kb_pointer").fetchone()[0] is None


def test_eval_all_modes_table(cli):
    result, out = cli("rag", "eval", "--beir", str(BEIR), "--mode", "all", "--json")
    assert result.exit_code == 0
    assert set(out["results"]) == {"bm25", "dense", "hybrid"}            # no reranker configured: no rerank row
    assert all(KEYS <= set(r) for r in out["results"].values())
    assert out["build"]["encoded"] == 12                          # a fresh database: everything embedded
    text, _ = cli("rag", "eval", "--beir", str(BEIR), "--mode", "bm25")
    assert text.exit_code == 0
    assert "| bm25 |" in text.stdout and "reranker none configured" in text.stdout
    _, again = cli("rag", "eval", "--beir", str(BEIR), "--mode", "hybrid", "--fusion", "rrf", "--dense-weight", "3",
                   "--json")
    assert (again["build"]["encoded"], again["build"]["reused"]) == (0, 12)   # re-runs skip the encoder
    assert again["fusion"] == {"method": "rrf", "weights": {"bm25": 1.0, "dense": 3.0}, "rrf_k": 60}


def test_rerank_without_a_reranker_is_an_error_not_a_fallback(cli):
    result, out = cli("rag", "eval", "--beir", str(BEIR), "--mode", "rerank", "--json")
    assert result.exit_code == 2 and "needs a reranker" in out["error"]


@pytest.mark.parametrize("args, message", [
    (["--beir", "/nonexistent/beir", "--mode", "bm25"], "not a folder"),
    (["--beir", str(BEIR), "--mode", "splade"], "--mode must be one of"),
    (["--beir", str(BEIR), "--mode", "hybrid", "--fusion", "borda"], "--fusion must be rrf or convex"),
])
def test_bad_arguments_are_reported(cli, args, message):
    result, out = cli("rag", "eval", *args, "--json")
    assert result.exit_code == 2 and message in out["error"]


def test_eval_of_an_incomplete_beir_folder(cli, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(BEIR / "corpus.jsonl", broken)
    result, out = cli("rag", "eval", "--beir", str(broken), "--mode", "bm25", "--json")
    assert result.exit_code == 2 and "queries.jsonl is missing" in out["error"]


def test_index_rebuild_status_sync_rollback(cli, tmp_path):
    src = tmp_path / "kb"
    src.mkdir()
    for name in ("refund-timelines-en.md", "refund-timelines-zh.md"):
        shutil.copy(SAMPLE_KB / name, src)
    result, first = cli("index", "rebuild", "--source", str(src), "--json")
    assert result.exit_code == 0, result.stdout
    assert first["docs"] == 2 and first["chunks"] == first["encoded"] > 0 and first["chunks_per_s"] > 0
    _, status = cli("index", "status", "--json")
    assert status["active"] == first["generation"] and status["ready"] is True
    shutil.copy(SAMPLE_KB / "coupons-en.md", src)
    _, synced = cli("index", "sync", "--source", str(src), "--json")
    assert (synced["added_docs"], synced["unchanged_docs"]) == (1, 2)
    _, second = cli("index", "rebuild", "--source", str(src), "--json")
    assert second["encoded"] == 0 and second["previous"] == first["generation"]
    _, rolled = cli("index", "rollback", "--json")
    assert rolled["active"] == first["generation"]
    result, err = cli("index", "rebuild", "--source", str(tmp_path / "missing"), "--json")
    assert result.exit_code == 2 and "no such" in err["error"]


def test_wire_rag_indexes_an_empty_knowledge_base_and_reports_readiness(services, tmp_path):
    from router.app.composition import wire_rag

    src = tmp_path / "kb"
    src.mkdir()
    for name in ("refund-timelines-en.md", "refund-timelines-zh.md", "glossary.yaml"):
        shutil.copy(SAMPLE_KB / name, src)
    services.settings.knowledge_dir = src
    services.settings.load_sample_kb = True
    services.settings.rag_warm_answers = True        # as served (the tests' default leaves it off)
    wire_rag(services)
    ok, detail = services.readiness["indexes"]()
    assert ok and "no reranker configured" in detail
    # answer composition encodes the articles' lines in the background; readiness shows how far it is
    deadline = time.monotonic() + 120
    while (warm := services.readiness["composition"]())[1].startswith("warming:") and time.monotonic() < deadline:
        assert warm[0]                       # never holds readiness back: composition encodes lazily meanwhile
        time.sleep(0.2)
    assert warm[0] and warm[1].startswith("ready: ") and int(warm[1].split()[1]) > 10
    assert services.rag.lexical.name == "tantivy"
    assert services.rag.glossary.expand("退钱") == ["退款"]                 # the knowledge folder's glossary
    hits = services.rag.search("退钱要多久", 3, mode="bm25")
    assert hits[0].chunk.doc_id == "refund-timelines-zh"
