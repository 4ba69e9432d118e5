"""Answerability on real parts: multilingual-e5 and a real index over the small BEIR fixture with the
documents of some questions removed. A question whose article is gone gets no answer (the evidence goes
to L2); one whose article is there is answered with a citation; the question-similarity signal is what
tells them apart."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest

from rag.eval import load_beir
from rag.ingest import beir_document
from rag.lexical.tantivy import TantivyIndex
from rag.rewrite import get_tokenizer
from rag.service import KnowledgeBase, question_units
from rag.types import Chunk

BEIR = Path(__file__).resolve().parent.parent / "fixtures" / "beir_small"
REMOVED = {"d02", "z03"}      # the refund timeline (en) and parcel tracking (zh) articles


@pytest.fixture(scope="module")
def module_pool(pg_server, template_dsn):
    from router.db import open_pool

    base, _, query = template_dsn.partition("?")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = base.rsplit("/", 1)[0] + "/postgres" + (f"?{query}" if query else "")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "switchboard_template"')
    pool = open_pool(base.rsplit("/", 1)[0] + f"/{name}" + (f"?{query}" if query else ""), min_size=1, max_size=4)
    yield pool
    pool.close()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def kb_gen(module_pool, e5_encoder, tmp_path_factory):
    """The knowledge base (default answer settings) and a generation without the removed articles."""
    data = load_beir(BEIR)
    lexical = TantivyIndex(tmp_path_factory.mktemp("index"), tokenizer=get_tokenizer())
    kb = KnowledgeBase(module_pool, e5_encoder, lexical)
    docs = [beir_document(d, source="beir_small") for d in data.corpus if d["_id"] not in REMOVED]
    gen = kb.generations.build(docs, source=str(BEIR), purpose="eval")["generation"]
    return kb, gen


@pytest.mark.slow
@pytest.mark.parametrize("query, doc", [
    ("I forgot my password, how do I get back in?", "d01"),
    ("can I cancel before it ships", "d04"),
    ("密码忘了登不上去", "z01"),
    ("退款几天能到支付宝", "z02"),
])
def test_a_question_whose_article_is_indexed_is_answered_with_its_citation(kb_gen, query, doc):
    kb, gen = kb_gen
    answer = kb.answer(query, generation=gen)
    assert answer.answered, (answer.reason, answer.signals)
    assert answer.citations[0]["doc_id"] == doc
    assert answer.confidence >= kb.config.answer_threshold
    assert answer.signals["question"] is not None and answer.signals["cosine"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("query", ["when will my money come back to alipay", "我的包裹到哪里了"])
def test_a_question_whose_article_was_removed_abstains_with_the_evidence(kb_gen, query):
    kb, gen = kb_gen
    answer = kb.answer(query, generation=gen)
    assert not answer.answered and answer.text is None, (answer.citations[:1], answer.signals)
    assert answer.passages and answer.citations                        # the evidence still goes to L2
    assert {c["doc_id"] for c in answer.citations}.isdisjoint(REMOVED)
    assert answer.confidence < kb.config.answer_threshold
    assert "below the answer threshold" in answer.reason


@pytest.mark.slow
def test_the_question_signal_is_higher_for_a_paraphrase_of_the_articles_question(kb_gen):
    kb, gen = kb_gen
    answerable = kb.answer("I forgot my password, how do I get back in?", generation=gen).signals
    removed = kb.answer("when will my money come back to alipay", generation=gen).signals
    assert answerable["question"] > removed["question"]
    # and the confidence weighs it: the same cosine with a worse question match is less confident
    rw = kb.rewriter.rewrite("when will my money come back to alipay")
    hits = kb.retrieve("when will my money come back to alipay", 10, generation=gen, rewritten=rw)
    sig = kb.signals(rw, hits)
    if kb.config.question_weight > 0:
        assert kb.confidence(rw, hits, {**sig, "question": sig["cosine"] + 0.05}) > kb.confidence(rw, hits, sig)


def test_question_units_are_headings_faq_questions_and_short_texts():
    faq = Chunk(chunk_id="a#0", doc_id="a", title="Refunds", section="Timelines", lang="en",
                text="Q: How long does a refund take?\nA: 3 days.\nQ: 能退到花呗吗？\nA: 能。")
    assert len(faq.text) <= 160      # short enough to be a unit itself too
    assert question_units(faq) == ["Refunds", "Timelines", "How long does a refund take?", "能退到花呗吗？", faq.text]
    short = Chunk(chunk_id="b#0", doc_id="b", text="网易云音乐关闭", title="", section="", lang="zh")
    assert question_units(short) == ["网易云音乐关闭"]
    long_text = "word " * 80
    long_chunk = Chunk(chunk_id="c#0", doc_id="c", text=long_text, title="T", section="T", lang="en")
    assert question_units(long_chunk) == ["T"]
