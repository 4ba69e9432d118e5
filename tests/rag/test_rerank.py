"""Cross-encoder rerank: a real (tiny) training run that changes held-out rankings, and the blend.

The training fixture (tests/fixtures/beir_rerank) is a small support knowledge base where the
words of a question point at the wrong article ("battery" -> battery recycling) and the support
history says which article actually answered it. The first stage gets many of these wrong; a
reranker trained on some of the questions must fix questions it never saw. The run starts from
the small English model so it takes seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag.rerank import CONFIG_NAME, Blend, CrossEncoderReranker, blend_scores, heldout_query_ids
from rag.rerank_train import (
    SimpleHybrid,
    TrainingError,
    load_beir,
    ndcg_at_10,
    split_queries,
    train_reranker,
)
from rag.types import Chunk, Hit

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "beir_rerank"
TINY = dict(epochs=3, seed=7, train_split=0.5, calib_split=0.34, max_length=64, group_size=4, batch_groups=2,
            negatives_depth=6, lr=1e-4, top_n=10, bf16=False)


@pytest.fixture(scope="module")
def data():
    return load_beir(FIXTURE)


@pytest.fixture(scope="module")
def first_stage(data, minilm_encoder):
    return SimpleHybrid(data.corpus, minilm_encoder, progress=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, minilm_path, first_stage, compiled_metrics):
    """One tiny training run through the CLI, shared by the tests below."""
    from typer.testing import CliRunner

    from router.cli import app

    out = tmp_path_factory.mktemp("reranker") / "model"
    result = CliRunner().invoke(app, [
        "rag", "train-reranker", "--beir", str(FIXTURE), "--out", str(out), "--base-model", str(minilm_path),
        "--epochs", "3", "--seed", "7", "--train-split", "0.5", "--calib-split", "0.34", "--max-length", "64",
        "--group-size", "4", "--top-n", "10", "--no-bf16", "--json",
    ])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    return out, summary


def _hits(data, ranked: list[tuple[str, float]]) -> list[Hit]:
    hits = []
    for rank, (doc, score) in enumerate(ranked, start=1):
        title, text = data.corpus[doc]
        hits.append(Hit(chunk_id=doc, score=score, rank=rank, chunk=Chunk(doc, doc, text, title=title),
                        scores={"hybrid": score}))
    return hits


@pytest.mark.slow
def test_training_writes_a_loadable_model_and_a_clean_split(trained, data):
    out, summary = trained
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(out), device="cpu", local_files_only=True)   # the library loads it as-is
    assert model.predict([("my package never arrived", "Carrier claim form CF-12")]).shape == (1,)
    cfg = json.loads((out / CONFIG_NAME).read_text())
    held = set(cfg["heldout_queries"])
    train, calib = set(cfg["train_queries"]), set(cfg["calibration_queries"])
    assert held and train and calib
    assert not (held & train) and not (held & calib) and not (train & calib)
    assert held | train | calib == set(data.qrels)
    assert heldout_query_ids(out) == held
    assert summary["n_heldout_queries"] == len(held) == 18
    assert 0.0 <= summary["blend"]["weight"] <= 1.0
    assert cfg["platt"]["a"] > 0          # a higher logit means more likely the answer
    assert summary["layers"] == 6 and summary["max_length"] == 64


@pytest.mark.slow
def test_training_changes_the_ranking_of_held_out_queries(trained, data, first_stage):
    out, summary = trained
    reranker = CrossEncoderReranker(out, threads=1)
    assert reranker.top_n == 10 and reranker.max_length == 64
    held = sorted(heldout_query_ids(out))
    ranked = dict(zip(held, first_stage([data.queries[q] for q in held]), strict=True))
    before, after, improved = {}, {}, []
    for q in held:
        hits = _hits(data, ranked[q])
        before[q] = {h.chunk_id: float(len(hits) - i) for i, h in enumerate(hits)}
        reranked = reranker.rerank(data.queries[q], hits)
        assert [h.rank for h in reranked] == list(range(1, len(reranked) + 1))
        assert all("rerank" in h.scores and h.scores["first_stage"] == h.scores["hybrid"] for h in reranked[:10])
        head = [h for h in reranked if "rerank" in h.scores]
        assert len(head) == min(10, len(hits))
        by_logit = sorted(head, key=lambda h: h.scores["rerank"])
        probs = [h.scores["rerank_prob"] for h in by_logit]   # calibrated: in [0, 1], rising with the logit
        assert all(0.0 <= p <= 1.0 for p in probs) and probs == sorted(probs)
        after[q] = {h.chunk_id: float(len(reranked) - i) for i, h in enumerate(reranked)}
        gold = next(iter(data.qrels[q]))
        old_rank = [h.chunk_id for h in hits].index(gold)
        new_rank = [h.chunk_id for h in reranked].index(gold)
        if new_rank < old_rank:
            improved.append(q)
    qrels = {q: data.qrels[q] for q in held}
    ndcg_before, ndcg_after = ndcg_at_10(qrels, before), ndcg_at_10(qrels, after)
    assert len(improved) >= 3, improved
    assert ndcg_after > ndcg_before + 0.05, (ndcg_before, ndcg_after)
    assert summary["heldout"]["blend_ndcg@10"] > summary["heldout"]["first_stage_ndcg@10"]


@pytest.mark.slow
@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-autocast"])
def test_training_is_deterministic_with_a_seed(tmp_path, minilm_path, first_stage, bf16):
    from rag.encoder_backends import bf16_supported

    if bf16 and not bf16_supported():
        pytest.skip("this CPU has no bf16 dot products")
    kw = dict(TINY, epochs=1, max_train_queries=4, evaluate=False, progress=False, base_model=minilm_path,
              first_stage=first_stage, bf16=bf16)
    a = train_reranker(FIXTURE, tmp_path / "a", **kw)
    b = train_reranker(FIXTURE, tmp_path / "b", **kw)
    assert a["final_loss"] == b["final_loss"] and a["bf16"] is bf16
    pairs = [("battery dies overnight", "Power profile P3 reset"), ("cracked screen", "Screen time settings")]
    sa = CrossEncoderReranker(tmp_path / "a").score(pairs[0][0], [p for _, p in pairs])
    sb = CrossEncoderReranker(tmp_path / "b").score(pairs[0][0], [p for _, p in pairs])
    np.testing.assert_array_equal(sa, sb)
    assert json.loads((tmp_path / "a" / CONFIG_NAME).read_text())["heldout_queries"] == \
        json.loads((tmp_path / "b" / CONFIG_NAME).read_text())["heldout_queries"]


def test_cli_reports_bad_input_without_a_traceback(tmp_path):
    from typer.testing import CliRunner

    from router.cli import app

    result = CliRunner().invoke(app, ["rag", "train-reranker", "--beir", str(tmp_path), "--out",
                                      str(tmp_path / "m"), "--json"])
    assert result.exit_code == 2          # bad input
    assert "not a BEIR directory" in json.loads(result.stdout)["error"]
    assert not (tmp_path / "m").exists()


def test_refuses_to_overwrite_a_foreign_folder(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "precious.txt").write_text("x")
    with pytest.raises(TrainingError, match="not a reranker folder"):
        train_reranker(FIXTURE, tmp_path / "m", base_model=tmp_path)
    assert (tmp_path / "m" / "precious.txt").exists()


def test_load_beir_and_split(data, tmp_path):
    assert len(data.corpus) == 14 and len(data.queries) == 36 and len(data.qrels) == 36
    a = split_queries(list(data.qrels), train_split=0.5, calib_split=0.25, seed=3)
    b = split_queries(list(reversed(list(data.qrels))), train_split=0.5, calib_split=0.25, seed=3)
    assert a == b                                     # independent of input order
    train, calib, held = a
    assert len(held) == 18 and len(calib) == round(18 * 0.25) and not set(train) & set(held)
    assert split_queries(list(data.qrels), train_split=0.5, calib_split=0.25, seed=4) != a
    with pytest.raises(TrainingError):
        split_queries(["q"], train_split=1.0, calib_split=0.0, seed=1)
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d", "text": "x"}\n')
    (tmp_path / "queries.jsonl").write_text("not json\n")
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\td\t1\n")
    with pytest.raises(TrainingError, match="queries.jsonl:1"):
        load_beir(tmp_path)


# ------------------------------------------------------------------ the blend


def test_blend_extremes():
    first = [0.9, 0.8, 0.5, 0.4, 0.1]
    rr = [-2.0, 3.0, 1.0]                       # only the top 3 were reranked
    for method in ("rrf", "minmax"):
        keep = np.argsort(-blend_scores(first, rr, Blend(0.0, method)), kind="stable")
        assert list(keep) == [0, 1, 2, 3, 4]    # weight 0 = first stage exactly
        flip = np.argsort(-blend_scores(first, rr, Blend(1.0, method)), kind="stable")
        assert list(flip[:3]) == [1, 2, 0]      # weight 1 = rerank order on the head
        assert set(flip[3:]) == {3, 4}          # the tail stays below the head
    with pytest.raises(ValueError):
        Blend(1.5)
    with pytest.raises(ValueError):
        Blend(0.5, "max")  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    first=st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=30),
    rr=st.lists(st.floats(-20, 20, allow_nan=False), max_size=30),
    w=st.floats(0, 1),
    method=st.sampled_from(["rrf", "minmax"]),
)
def test_blend_properties(first, rr, w, method):
    first = sorted(first, reverse=True)
    rr = rr[: len(first)]
    fused = blend_scores(first, rr, Blend(w, method))
    assert fused.shape == (len(first),) and np.all(np.isfinite(fused))
    m = len(rr)
    if m and m < len(first):
        assert fused[:m].min() >= fused[m:].max() - 1e-12      # head above tail
    tail = fused[m:]
    assert np.all(np.diff(tail) <= 1e-12)                      # tail keeps first-stage order


@pytest.mark.slow
def test_rerank_input_errors(trained):
    out, _ = trained
    reranker = CrossEncoderReranker(out)
    assert reranker.rerank("anything", []) == []
    with pytest.raises(ValueError, match="chunk text"):
        reranker.rerank("q", [Hit(chunk_id="x", score=1.0, rank=1)])
    with pytest.raises(FileNotFoundError):
        CrossEncoderReranker(FIXTURE)


@pytest.mark.slow
def test_bf16_scores_like_fp32(trained, data):
    """bf16 autocast (the default where the CPU has bf16) must not change what the reranker prefers."""
    out, _ = trained
    fp32, bf16 = CrossEncoderReranker(out), CrossEncoderReranker(out, bf16=True)
    assert bf16.bf16 and not fp32.bf16
    qid = sorted(data.qrels)[0]
    passages = [data.corpus[d][1] for d in sorted(data.corpus)[:8]]
    a, b = fp32.score(data.queries[qid], passages), bf16.score(data.queries[qid], passages)
    assert np.max(np.abs(a - b)) < 0.1 * (np.ptp(a) + 1e-6)
    assert int(np.argmax(a)) == int(np.argmax(b))


@pytest.mark.slow
def test_rerank_mode_keeps_the_first_stage_order_below_the_reranked_head(trained, data, pool, minilm_encoder,
                                                                       tmp_path):
    """Rerank reorders its top N only; deeper results (recall@100) are the first stage's, in its order."""
    from rag.lexical.tantivy import TantivyIndex
    from rag.service import KnowledgeBase

    out, _ = trained
    reranker = CrossEncoderReranker(out, threads=1)
    kb = KnowledgeBase(pool, minilm_encoder, TantivyIndex(tmp_path / "idx"), reranker=reranker)
    kb.rebuild(FIXTURE)
    n_docs = len(data.corpus)
    assert reranker.top_n < n_docs
    for q in sorted(heldout_query_ids(out))[:5]:
        hybrid = [h.chunk_id for h in kb.retrieve(data.queries[q], n_docs, "hybrid")]
        reranked = kb.retrieve(data.queries[q], n_docs, "rerank")
        ids = [h.chunk_id for h in reranked]
        assert len(ids) == len(hybrid) > reranker.top_n
        assert sorted(ids[:reranker.top_n]) == sorted(hybrid[:reranker.top_n])
        assert ids[reranker.top_n:] == hybrid[reranker.top_n:]
        assert [h.rank for h in reranked] == list(range(1, len(ids) + 1))


@pytest.mark.slow
def test_eval_cli_reranks_the_held_out_queries(trained, data, dsn, tmp_path, minilm_path, monkeypatch):
    """`rag eval --mode rerank --reranker DIR` scores only the queries the reranker never saw."""
    from typer.testing import CliRunner

    from router.cli import app

    out, _ = trained
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
    monkeypatch.setenv("SWITCHBOARD_EMBEDDING_MODEL", str(minilm_path))
    result = CliRunner().invoke(app, ["rag", "eval", "--beir", str(FIXTURE), "--mode", "rerank",
                                      "--reranker", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["mode"] == "rerank"
    assert report["n_queries"] == len(heldout_query_ids(out)) < len(data.qrels)
    assert 0.0 < report["ndcg@10"] <= 1.0 and report["recall@100"] == 1.0   # nothing lost below the head
