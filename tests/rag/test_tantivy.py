"""The embedded tantivy backend: jieba-cut text, term queries only, generations, one writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.chunk import chunk_documents
from rag.ingest import load_documents
from rag.lexical.base import LexicalIndex
from rag.lexical.tantivy import GenerationNotFound, TantivyIndex
from rag.rewrite import get_tokenizer, load_glossary
from rag.service import SAMPLE_KB
from rag.types import Chunk


@pytest.fixture(scope="module")
def chunks():
    return list(chunk_documents(load_documents(SAMPLE_KB)))


@pytest.fixture(scope="module")
def tokenizer():
    return get_tokenizer(load_glossary(SAMPLE_KB).words())


@pytest.fixture
def index(tmp_path: Path, chunks, tokenizer):
    idx = TantivyIndex(tmp_path / "tantivy", tokenizer=tokenizer)
    idx.create_generation("g1")
    idx.add("g1", chunks)
    idx.activate("g1")
    return idx


def test_protocol_and_counts(index, chunks):
    assert isinstance(index, LexicalIndex)
    assert index.count("g1") == len(chunks)
    assert index.active() == "g1" and index.generations() == ["g1"]


@pytest.mark.parametrize("query, doc", [
    ("退款到支付宝要多久", "refund-timelines-zh"),
    ("花呗分期", "installments-huabei-zh"),
    ("How long does a refund to Alipay take?", "refund-timelines-en"),
    ("reset my password", "password-reset-en"),
])
def test_bm25_finds_the_article_in_its_language(index, query, doc):
    hits = index.search(query, 5)
    assert hits and hits[0].chunk_id.startswith(doc + "#")
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(h.scores["bm25"] == h.score for h in hits)


def test_query_syntax_is_just_words(index):
    for q in ['title:x AND (', '"unbalanced', "refund^100 OR *", "NOT", ")))", "-", ""]:
        index.search(q, 5)            # never a parse error
    # operators are ordinary (lower-cased) words: the same hits as the plain words
    ids = [h.chunk_id for h in index.search("refund AND alipay", 10)]
    assert ids and ids == [h.chunk_id for h in index.search("refund and alipay", 10)]
    assert [h.chunk_id for h in index.search("title:parrot", 10)] == [h.chunk_id for h in index.search("title parrot", 10)]


def test_traditional_and_full_width_queries_match_simplified_text(index):
    hits = index.search("退款到支付寶要多久", 3)
    assert hits[0].chunk_id.startswith("refund-timelines-zh#")


def test_language_filter(index):
    assert all(h.chunk_id.split("#")[0].endswith("-en") for h in index.search("Alipay 支付宝", 20, lang="en"))
    assert all(h.chunk_id.split("#")[0].endswith("-zh") for h in index.search("Alipay 支付宝", 20, lang="zh"))


def test_reopen_registers_the_analyzer_again(index, tmp_path, tokenizer):
    fresh = TantivyIndex(tmp_path / "tantivy", tokenizer=tokenizer)     # a new process, in effect
    assert fresh.active() == "g1"
    hits = fresh.search("Refunds refunded", 3)                         # stemming needs the analyzer
    assert hits and "refund" in hits[0].chunk_id


def test_delete_and_generations(index, chunks):
    victims = [c.chunk_id for c in chunks if c.doc_id == "refund-timelines-en"]
    assert index.delete("g1", victims + ["does-not-exist#0"]) == len(victims)
    assert index.count("g1") == len(chunks) - len(victims)
    assert not any(h.chunk_id in victims for h in index.search("refund Alipay business days", 50))
    index.create_generation("g2")
    index.add("g2", [Chunk(chunk_id="x#0", doc_id="x", text="a brand new article about parrots")])
    assert index.search("parrots", 5) == []                              # g1 is active
    assert [h.chunk_id for h in index.search("parrots", 5, generation="g2")] == ["x#0"]
    index.activate("g2")
    assert index.active() == "g2"
    index.drop_generation("g1")
    assert index.generations() == ["g2"]
    with pytest.raises(GenerationNotFound):
        index.search("refund", 5, generation="g1")
    with pytest.raises(ValueError):
        index.create_generation("../escape")


def test_a_second_writer_on_the_same_generation_is_refused(index, tmp_path, tokenizer):
    """tantivy's directory lock: only one writer per index, across objects (and processes)."""
    import tantivy

    raw = tantivy.Index.open(str(tmp_path / "tantivy" / "g1"))
    writer = raw.writer(heap_size=15_000_000, num_threads=1)
    try:
        with pytest.raises(ValueError):
            index.add("g1", [Chunk(chunk_id="y#0", doc_id="y", text="blocked")])
    finally:
        writer.rollback()
        writer.wait_merging_threads()
    index.add("g1", [Chunk(chunk_id="y#0", doc_id="y", text="now it works")])
    assert index.search("works", 3)[0].chunk_id == "y#0"


def test_a_generation_is_cloned_only_with_the_same_tokenizer(index, tmp_path, tokenizer, chunks):
    assert index.clone_generation("g1", "g2")
    assert index.count("g2") == len(chunks)
    assert not index.clone_generation("g1", "g2")                         # never over an existing one
    other = TantivyIndex(tmp_path / "tantivy", tokenizer=get_tokenizer(["另一个词表"]))
    assert not other.clone_generation("g1", "g3")                         # another dictionary: re-index
    assert not index.clone_generation("missing", "g4")
