"""Ingestion of every supported format into documents with metadata, and clear errors for bad files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rag.chunk import chunk_documents, embed_text
from rag.ingest import IngestError, load_documents, load_file
from rag.service import SAMPLE_KB


def test_markdown_front_matter_headings_and_tables():
    [doc] = list(load_file(SAMPLE_KB / "refund-timelines-en.md", root=SAMPLE_KB))
    assert (doc.doc_id, doc.title, doc.lang, doc.category, doc.source, doc.updated_at) == (
        "refund-timelines-en", "How long refunds take", "en", "refunds", "help-center", "2026-10-12")
    paths = [" > ".join(s.path) for s in doc.sections]
    assert "When the money arrives" in paths and "FAQ" in paths
    money = doc.sections[paths.index("When the money arrives")].text
    assert "Alipay: 1–3 business days" in money.splitlines()         # table row -> "cell: cell"
    assert "**" not in doc.text and "|" not in money


def test_an_ordered_list_keeps_its_numbers_and_a_bullet_list_its_plain_items():
    """Steps are read in order: their numbers are the article's words; bullets carry no order."""
    from rag.ingest import parse_markdown

    doc = parse_markdown("# T\n\n## Steps\n\n1. Open **My Orders**.\n2. Choose the type:\n   - **Return** – send it;\n"
                         "   - **Exchange** – swap it.\n3. Submit. We reply in **24 hours**.\n\n- a bullet;\n- another.\n",
                         doc_id="steps")
    assert doc.sections[0].text.splitlines() == ["1. Open My Orders.", "2. Choose the type:", "Return – send it;",
                                                 "Exchange – swap it.", "3. Submit. We reply in 24 hours.",
                                                 "a bullet;", "another."]


def test_bundled_knowledge_base_loads_in_both_languages():
    docs = load_documents(SAMPLE_KB)
    assert len(docs) == len(list(SAMPLE_KB.glob("*.md")))
    assert {d.lang for d in docs} == {"zh", "en"}
    chunks = list(chunk_documents(docs))
    assert all(c.doc_id and c.chunk_id and c.content_hash and c.title and c.lang for c in chunks)
    zh = [c for c in chunks if c.doc_id == "refund-timelines-zh"]
    assert any(c.section == "多久能到账？" and "支付宝：1–3个工作日" in c.text for c in zh)


def test_html(tmp_path: Path):
    page = tmp_path / "help" / "returns.html"
    page.parent.mkdir()
    page.write_text(
        """<html lang="en-GB"><head><title>Returns</title><meta name="category" content="returns">
        <script>var x = "not content";</script></head><body><nav>Home | Help</nav>
        <h1>Returns</h1><p>You can return most items within <b>7 days</b>.</p>
        <h2>Costs</h2><ul><li>Quality problem: we pay.</li><li>Change of mind: you pay.</li></ul>
        <table><tr><th>Carrier</th><th>Fee</th></tr><tr><td>SF</td><td>12 CNY</td></tr></table>
        </body></html>""", encoding="utf-8")
    [doc] = list(load_file(page, root=tmp_path))
    assert (doc.doc_id, doc.title, doc.lang, doc.category, doc.source) == (
        "help-returns", "Returns", "en", "returns", "help/returns.html")
    assert doc.sections[0].text == "You can return most items within 7 days."
    costs = doc.sections[1]
    assert costs.path == ["Costs"]
    assert costs.text.splitlines() == ["Quality problem: we pay.", "Change of mind: you pay.", "Carrier: Fee",
                                       "SF: 12 CNY"]
    assert "not content" not in doc.text and "Home" not in doc.text


def test_faq_csv_and_jsonl(tmp_path: Path):
    (tmp_path / "faq.csv").write_text(
        "id,question,answer,category,lang\n"
        "f1,How long do refunds take?,\"Refunds take 1-3 days, sometimes more.\",refunds,en\n"
        "f2,退款多久到账？,一般1到3个工作日。,refunds,zh\n", encoding="utf-8")
    (tmp_path / "more.jsonl").write_text(
        json.dumps({"question": "Can I change my address?", "answer": "Yes, before the order ships."}) + "\n"
        + json.dumps({"q": "能改地址吗？", "a": "发货前可以修改。", "id": "j2"}, ensure_ascii=False) + "\n",
        encoding="utf-8")
    docs = {d.doc_id: d for d in load_documents(tmp_path)}
    assert set(docs) == {"f1", "f2", "more-1", "j2"}
    assert docs["f1"].title == "How long do refunds take?"
    assert docs["f1"].text == "Refunds take 1-3 days, sometimes more."
    assert (docs["f2"].lang, docs["f2"].category) == ("zh", "refunds")
    assert docs["j2"].lang == "zh" and docs["more-1"].lang == "en"       # detected when not given


def test_beir_corpus(tmp_path: Path):
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "beir_small" / "corpus.jsonl"
    docs = load_documents(fixture)
    assert len(docs) == sum(1 for line in fixture.read_text(encoding="utf-8").splitlines() if line.strip())
    by_id = {d.doc_id: d for d in docs}
    assert by_id["d02"].title == "How long refunds take" and by_id["d02"].lang == "en"
    assert by_id["z02"].lang == "zh" and "支付宝" in by_id["z02"].text


@pytest.mark.parametrize("name, content, message", [
    ("bad.md", "---\ntitle: [unclosed\n---\nbody", "bad front matter"),
    ("bad.csv", "foo,bar\n1,2\n", "question and answer columns"),
    ("bad.jsonl", '{"question": "q", "answer": "a"}\nnot json\n', "bad.jsonl:2"),
    ("empty.csv", "question,answer\nWhy?,\n", "has no answer"),
])
def test_bad_files_name_the_file_and_the_problem(tmp_path: Path, name, content, message):
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(IngestError, match=message.replace("[", r"\[")):
        load_documents(tmp_path)


def test_non_utf8_duplicate_ids_and_missing_folder(tmp_path: Path):
    (tmp_path / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(IngestError, match="not UTF-8"):
        load_documents(tmp_path)
    (tmp_path / "latin1.md").unlink()
    (tmp_path / "a.md").write_text("---\nid: same\n---\nA.", encoding="utf-8")
    (tmp_path / "b.md").write_text("---\nid: same\n---\nB.", encoding="utf-8")
    with pytest.raises(IngestError, match="appears twice"):
        load_documents(tmp_path)
    with pytest.raises(IngestError, match="no such file"):
        load_documents(tmp_path / "nope")


def test_hidden_files_and_glossary_are_not_documents(tmp_path: Path):
    (tmp_path / ".draft.md").write_text("secret draft", encoding="utf-8")
    (tmp_path / "glossary.yaml").write_text("退款: [退钱]\n", encoding="utf-8")
    (tmp_path / "a.md").write_text("# A\n\nText.", encoding="utf-8")
    assert [d.doc_id for d in load_documents(tmp_path)] == ["a"]


def test_an_article_says_what_customers_call_it(tmp_path: Path):
    """Keywords: the front matter's list or string, an HTML page's meta keywords, an FAQ table's column; every
    chunk of the article carries them, and they are part of what is embedded and hashed (a sync sees a change)."""
    (tmp_path / "returns.md").write_text(
        "---\nid: returns\ntitle: 7-day no-reason returns\nkeywords: [return policy, \"returns policy\", return policy]\n"
        "---\n# 7-day no-reason returns\n\nMost items can be returned within 7 days.\n\n## Conditions\n\nUnused.\n",
        encoding="utf-8")
    (tmp_path / "ship.md").write_text("---\nid: ship\nkeywords: 配送时间，到货时间、shipping time\n---\n# 配送\n\n一般1–2天。\n",
                                      encoding="utf-8")
    (tmp_path / "page.html").write_text('<html><head><title>Coupons</title><meta name="keywords" content="promo code,'
                                        ' voucher"></head><body><p>Coupons apply at checkout.</p></body></html>',
                                        encoding="utf-8")
    (tmp_path / "faq.csv").write_text("id,question,answer,Keywords\nf1,Can I pay later?,Yes.,buy now pay later; BNPL\n",
                                      encoding="utf-8")
    docs = {d.doc_id: d for d in load_documents(tmp_path)}
    assert docs["returns"].keywords == ("return policy", "returns policy")
    assert docs["ship"].keywords == ("配送时间", "到货时间", "shipping time")
    assert docs["page"].keywords == ("promo code", "voucher")
    assert docs["f1"].keywords == ("buy now pay later", "BNPL")
    chunks = list(chunk_documents([docs["returns"]]))
    assert len(chunks) == 2 and all(c.keywords == ("return policy", "returns policy") for c in chunks)
    assert embed_text(chunks[0]).startswith("7-day no-reason returns (return policy; returns policy)")
    unnamed = replace(docs["returns"], keywords=())
    assert [c.content_hash for c in chunk_documents([unnamed])] != [c.content_hash for c in chunks]
