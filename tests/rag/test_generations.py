"""Blue/green generations: rebuild, verify, switch, rollback, sync, the rebuild lock, queries during a rebuild."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from rag.chunk import chunk_documents, embed_text
from rag.generations import RebuildInProgress
from rag.ingest import IngestError, load_documents
from rag.lexical.tantivy import TantivyIndex
from rag.service import SAMPLE_KB, KnowledgeBase

TOPICS = ("refund-timelines", "password-reset", "order-tracking")
# the "bigger" knowledge base of the rebuild-under-load test: the topics above plus five more
BIG = [f"{t}-{lang}.md" for t in (*TOPICS, "coupons", "account-frozen", "contact-hours", "invoice-reissue",
                                   "shipping-times") for lang in ("en", "zh")]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "kb"
    src.mkdir()
    for topic in TOPICS:
        for lang in ("en", "zh"):
            shutil.copy(SAMPLE_KB / f"{topic}-{lang}.md", src)
    return src


@pytest.fixture(scope="module")
def sample_vectors(minilm_encoder):
    """Vectors of every bundled chunk, computed once: tests that are not about embedding start warm."""
    chunks = [c for c in chunk_documents(load_documents(SAMPLE_KB)) if f"{c.doc_id}.md" in BIG]
    return [c.content_hash for c in chunks], minilm_encoder.encode_passages([embed_text(c) for c in chunks])


@pytest.fixture
def kb(pool, minilm_encoder, tmp_path: Path) -> KnowledgeBase:
    return KnowledgeBase(pool, minilm_encoder, TantivyIndex(tmp_path / "index"), encoder_name="minilm")


@pytest.fixture
def warm(kb, sample_vectors) -> KnowledgeBase:
    """The knowledge base with the embedding cache already holding every bundled chunk."""
    hashes, vectors = sample_vectors
    kb.dense.cache_vectors("minilm", hashes, vectors)
    return kb


def _doc_ids(hits):
    return {h.chunk.doc_id for h in hits}


def test_rebuild_switches_and_reuses_unchanged_embeddings(kb, source):
    assert kb.is_empty() and kb.ready()[0] is False
    first = kb.rebuild(source)
    assert first["docs"] == 6 and first["chunks"] > 6
    assert first["encoded"] == first["chunks"] and first["reused"] == 0 and first["previous"] is None
    assert kb.active_generation() == first["generation"]
    ok, detail = kb.ready()
    assert ok and first["generation"] in detail and "no reranker" in detail
    assert kb.lexical.count(first["generation"]) == kb.dense.count(first["generation"]) == first["chunks"]

    second = kb.rebuild(source)                    # nothing changed: no embedding, no re-tokenising
    assert second["encoded"] == 0 and second["reused"] == second["chunks"] == first["chunks"]
    assert first["lexical_reused"] == 0 and second["lexical_reused"] == second["chunks"]
    assert second["previous"] == first["generation"] and kb.active_generation() == second["generation"]

    third = kb.rebuild(source)                     # only active + previous are kept
    assert third["dropped"] == [first["generation"]]
    assert set(kb.lexical.generations()) == {second["generation"], third["generation"]}
    assert kb.dense.count(first["generation"]) == 0
    status = kb.generations.status()
    assert (status["active"], status["previous"]) == (third["generation"], second["generation"])


def test_rollback_serves_the_previous_generation(warm, source):
    kb = warm
    first = kb.rebuild(source)
    doc = source / "order-tracking-en.md"
    doc.write_text(doc.read_text(encoding="utf-8") + "\n\n## Zebra crossings\n\nParcels cross zebra roads.\n",
                   encoding="utf-8")
    second = kb.rebuild(source)
    assert 0 < second["encoded"] < second["chunks"]          # only the changed chunk(s) embedded ...
    assert second["lexical_reused"] == second["chunks"] - second["encoded"]   # ... and indexed
    assert "order-tracking-en" in _doc_ids(kb.search("zebra", 3, mode="bm25"))
    rolled = kb.rollback()
    assert rolled == {"active": first["generation"], "previous": second["generation"], "chunks": first["chunks"]}
    assert kb.search("zebra", 3, mode="bm25") == []
    kb.rollback()                                             # and back again
    assert kb.active_generation() == second["generation"]
    assert "order-tracking-en" in _doc_ids(kb.search("zebra", 3, mode="bm25"))


def test_sync_applies_adds_updates_and_deletes_in_place(warm, source):
    kb = warm
    first = kb.rebuild(source)
    (source / "password-reset-zh.md").unlink()
    shutil.copy(SAMPLE_KB / "coupons-en.md", source)
    doc = source / "refund-timelines-en.md"
    doc.write_text(doc.read_text(encoding="utf-8").replace("48 hours", "72 hours"), encoding="utf-8")
    result = kb.sync(source)
    assert (result["added_docs"], result["updated_docs"], result["deleted_docs"], result["unchanged_docs"]) == (1, 1, 1, 4)
    assert result["generation"] == first["generation"]        # in place: no new generation
    assert 0 < result["encoded"] <= result["chunks_added"]
    assert kb.dense.count(first["generation"]) == kb.lexical.count(first["generation"]) == result["chunks"]
    assert "coupons-en" in _doc_ids(kb.search("coupon voucher", 3, mode="bm25"))
    assert "password-reset-zh" not in _doc_ids(kb.search("重置密码", 10, mode="bm25"))
    texts = " ".join(h.chunk.text for h in kb.search("refund issued hours warehouse", 5, mode="bm25"))
    assert "72 hours" in texts and "48 hours" not in texts
    again = kb.sync(source)                                    # idempotent
    assert (again["added_docs"], again["updated_docs"], again["deleted_docs"], again["encoded"]) == (0, 0, 0, 0)


def test_one_rebuild_at_a_time(warm, source):
    kb = warm
    with kb.generations.lock():
        with pytest.raises(RebuildInProgress):
            kb.rebuild(source)
        with pytest.raises(RebuildInProgress):
            kb.rollback()
    kb.rebuild(source)


def test_a_failed_rebuild_leaves_the_active_generation_alone(warm, source):
    kb = warm
    first = kb.rebuild(source)
    (source / "broken.md").write_text("---\ntitle: [unclosed\n---\n", encoding="utf-8")
    with pytest.raises(IngestError):
        kb.rebuild(source)
    assert kb.active_generation() == first["generation"]
    assert kb.ready()[0]
    with pytest.raises(Exception, match="no previous generation"):
        kb.rollback()


def test_queries_keep_answering_during_a_rebuild(kb, source, tmp_path, sample_vectors):
    kb.rebuild(source)
    big = tmp_path / "big"
    big.mkdir()
    for name in BIG:                                           # a bigger rebuild ...
        shutil.copy(SAMPLE_KB / name, big)
    hashes, vectors = sample_vectors
    kb.dense.cache_vectors("minilm", hashes[40:], vectors[40:])   # ... with some chunks still to embed
    old = kb.active_generation()
    errors: list[BaseException] = []
    result: dict = {}

    def rebuild() -> None:
        try:
            result.update(kb.rebuild(big))
        except BaseException as exc:   # noqa: BLE001 - reported below
            errors.append(exc)

    worker = threading.Thread(target=rebuild)
    worker.start()
    during = 0
    while worker.is_alive():
        hits = kb.search("How long does a refund to Alipay take?", 5, mode="hybrid")
        assert hits and hits[0].chunk.doc_id.startswith("refund-timelines")
        if worker.is_alive() and kb.active_generation() == old:
            during += 1                                        # answered by the old generation mid-rebuild
    worker.join()
    assert not errors and during >= 1
    assert result["encoded"] > 0 and result["previous"] == old
    assert kb.active_generation() == result["generation"] and result["docs"] == len(BIG)
    assert "coupons-en" in _doc_ids(kb.search("coupon voucher discount", 5, mode="hybrid"))


def test_sample_is_loaded_only_into_an_empty_knowledge_base(warm, pool, minilm_encoder, tmp_path, source):
    kb = KnowledgeBase(pool, minilm_encoder, TantivyIndex(tmp_path / "i2"), encoder_name="minilm", sample_dir=source)
    loaded = kb.load_sample_if_empty()
    assert loaded and loaded["docs"] == 6
    assert kb.load_sample_if_empty() is None
