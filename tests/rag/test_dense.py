"""pgvector store: partitions per generation, HNSW cosine search, the embedding cache by content hash."""

from __future__ import annotations

import numpy as np
import pytest

from rag.chunk import chunk_documents, embed_text
from rag.dense import DenseStore, partition_name
from rag.ingest import load_documents
from rag.service import SAMPLE_KB

DOCS = ("refund-timelines-en", "password-reset-en", "order-tracking-en", "invoice-electronic-en", "coupons-en")


@pytest.fixture(scope="module")
def chunks():
    return [c for c in chunk_documents(load_documents(SAMPLE_KB)) if c.doc_id in DOCS]


@pytest.fixture
def store(pool):
    return DenseStore(pool, dim=384, ef_search=40)


def _loaded(store, encoder, chunks, generation="g1"):
    encoded, reused = store.embed_missing(encoder, "minilm", chunks, embed_text)
    store.create_generation(generation)
    store.load_chunks(generation, "minilm", chunks)
    store.build_index(generation)
    return encoded, reused


def test_search_ranks_by_cosine_and_returns_rows(store, minilm_encoder, chunks):
    _loaded(store, minilm_encoder, chunks)
    assert store.count("g1") == len(chunks)
    q = minilm_encoder.encode_queries(["I forgot my password and cannot log in"])[0]
    hits = store.search("g1", q, 5)
    assert hits[0].chunk.doc_id == "password-reset-en"
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))
    # the score is the cosine similarity of the stored vector
    vec = minilm_encoder.encode_passages([embed_text(hits[0].chunk)])[0]
    assert hits[0].score == pytest.approx(float(vec @ q), abs=1e-4)
    assert hits[0].scores["dense"] == hits[0].score and hits[0].chunk.content_hash


def test_hnsw_index_serves_the_query(store, pool, minilm_encoder, chunks):
    _loaded(store, minilm_encoder, chunks)
    with pool.connection() as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute(
            f"EXPLAIN SELECT chunk_id FROM {partition_name('g1')} ORDER BY embedding <=> %s LIMIT 5",
            (np.ones(384, dtype=np.float32),)).fetchall())
    assert "_hnsw" in plan


def test_embeddings_are_cached_by_content_hash(store, minilm_encoder, chunks):
    encoded, reused = _loaded(store, minilm_encoder, chunks)
    unique = len({c.content_hash for c in chunks})
    assert (encoded, reused) == (unique, 0)
    assert store.cache_size("minilm") == unique
    # a second generation of the same text embeds nothing
    encoded, reused = _loaded(store, minilm_encoder, chunks, generation="g2")
    assert (encoded, reused) == (0, unique)
    assert store.count("g2") == len(chunks)
    # another encoder name is another cache
    assert store.missing_hashes("other-encoder", [chunks[0].content_hash]) == {chunks[0].content_hash}


def test_loading_without_cached_vectors_fails_and_leaves_nothing(store, chunks):
    store.create_generation("g1")
    with pytest.raises(RuntimeError, match="no cached vector"):
        store.load_chunks("g1", "never-used", chunks[:3])
    assert store.count("g1") == 0


def test_reload_is_idempotent_delete_and_fetch(store, minilm_encoder, chunks):
    _loaded(store, minilm_encoder, chunks)
    store.load_chunks("g1", "minilm", chunks[:4])            # a retried batch replaces, never duplicates
    assert store.count("g1") == len(chunks)
    assert store.delete_chunks("g1", [chunks[0].chunk_id]) == 1
    got = store.fetch("g1", [chunks[0].chunk_id, chunks[1].chunk_id])
    assert set(got) == {chunks[1].chunk_id} and got[chunks[1].chunk_id].text == chunks[1].text
    assert store.chunk_hashes("g1")[chunks[1].chunk_id] == (chunks[1].doc_id, chunks[1].content_hash)
    store.drop_generation("g1")
    assert store.count("g1") == 0


def test_language_filter_and_bad_input(store, minilm_encoder, chunks):
    _loaded(store, minilm_encoder, chunks)
    q = minilm_encoder.encode_queries(["refund"])[0]
    assert store.search("g1", q, 5, lang="zh") == []
    assert len(store.search("g1", q, 5, lang="en")) == 5
    with pytest.raises(ValueError):
        store.search("g1", q[:10], 5)
    with pytest.raises(ValueError):
        store.create_generation("Robert'); DROP TABLE kb_chunks;--")
