"""An answer says each sentence whole or not at all: never a clause cut off its sentence ("… For a special VAT
invoice," / "…税号必须和单位名称一致，").

A sentence too long for one chunk is cut at a comma (rag.chunk.pack); the next chunk goes on with it, so the
article's line is read across the chunks whole, and an extract of one chunk leaves the cut sentence out."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rag.answer import extract
from rag.chunk import Document, Section, chunk_document, unfinished, whole_sentences
from rag.compose import article_lines, render
from rag.rewrite import get_tokenizer
from rag.types import Chunk

ROUTER_KITS = str(Path(__file__).resolve().parents[1] / "router")

# one sentence that lists more categories than a chunk holds (DEFAULT_MAX_CHARS): the chunker cuts it at a "、"
CATEGORIES = "、".join(f"第{i}类定制商品" for i in range(1, 160))
LONG = f"以下商品由品牌方直接发货：{CATEGORIES}，这些商品只能开具电子普通发票，不能开具增值税专用发票。"
ARTICLE = f"# 定制商品发票\n\n定制商品的发票由品牌方开具。\n\n## 哪些商品只能开电子普通发票？\n\n{LONG}\n\n如有疑问请联系客服。\n"


def _chunks() -> list[Chunk]:
    doc = Document(doc_id="custom-zh", title="定制商品发票", lang="zh",
                   sections=[Section(["哪些商品只能开电子普通发票？"], f"{LONG}\n如有疑问请联系客服。")])
    return chunk_document(doc)


def test_a_sentence_cut_between_chunks_is_one_line_of_the_article():
    chunks = _chunks()
    assert len(chunks) >= 2 and unfinished(chunks[0].text), [c.text[-20:] for c in chunks]   # cut at a "、"
    lines = article_lines(chunks)
    assert [ln.text for ln in lines] == [LONG, "如有疑问请联系客服。"], [ln.text[-30:] for ln in lines]
    assert render(lines[:1]) == LONG


def test_an_extract_of_a_chunk_never_ends_on_a_comma():
    first = _chunks()[0].text
    said = extract(first, ["定制", "商品"], get_tokenizer())
    assert not unfinished(said) and "第1类定制商品" not in said, said[-40:]


def test_a_paragraph_that_stops_inside_a_sentence_loses_that_sentence_only():
    text = "Choose a company title and enter the taxpayer ID. For a special VAT invoice,"
    assert whole_sentences(text) == "Choose a company title and enter the taxpayer ID."
    assert whole_sentences("请仔细核对，税号必须和单位名称一致，") == ""
    chunk = Chunk(chunk_id="i#0", doc_id="invoices", text=f"Invoices are issued within 48 hours. {text}",
                  title="Invoices", section="", lang="en")
    assert render(article_lines([chunk])) == ("Invoices are issued within 48 hours. "
                                              "Choose a company title and enter the taxpayer ID.")


@pytest.fixture(scope="module")
def custom_kb(pg_server, template_dsn, e5_encoder, tmp_path_factory):
    """A knowledge base of the article above and the pack's invoice article, on the real encoder."""
    from test_answer import _own_database

    from rag.lexical.tantivy import TantivyIndex
    from rag.rewrite import load_glossary
    from rag.service import SAMPLE_KB, KnowledgeBase

    if ROUTER_KITS not in sys.path:
        sys.path.insert(0, ROUTER_KITS)
    from routing_kit import add_known_vectors

    src = tmp_path_factory.mktemp("kb") / "kb"
    src.mkdir()
    (src / "custom-zh.md").write_text(f"---\nid: custom-zh\nlang: zh\n---\n\n{ARTICLE}", encoding="utf-8")
    (src / "invoice-electronic-zh.md").write_text((SAMPLE_KB / "invoice-electronic-zh.md").read_text("utf-8"),
                                                  encoding="utf-8")
    gen = _own_database(template_dsn)
    pool = next(gen)
    add_known_vectors(pg_server[1], pool.conninfo)
    glossary = load_glossary(src)
    kb = KnowledgeBase(pool, e5_encoder, TantivyIndex(tmp_path_factory.mktemp("index"),
                                                      tokenizer=get_tokenizer(glossary.words())),
                       glossary=glossary, sample_dir=src)
    kb.load_sample_if_empty()
    yield kb
    next(gen, None)


def test_the_answer_says_the_long_sentence_whole(custom_kb):
    answer = custom_kb.answer("哪些商品只能开电子普通发票？")
    text = answer.text or answer.draft or ""
    assert answer.citations and answer.citations[0]["doc_id"] == "custom-zh", answer.citations[:1]
    assert LONG in text and not any(unfinished(ln) for ln in text.splitlines()), text[-80:]
