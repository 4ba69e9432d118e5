"""Chunking: sentence ends in both languages, sections never mixed, size and overlap, content hashes."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from rag.chunk import Document, Section, chunk_document, detect_lang, embed_text, split_sentences


def test_sentences_split_on_zh_and_en_terminators_but_not_inside_numbers():
    text = "Refunds take 3.5 days. See e.g. the table! Really? 退款多久到账？一般1–3个工作日。好的！"
    assert split_sentences(text) == [
        "Refunds take 3.5 days.", "See e.g. the table!", "Really?", "退款多久到账？", "一般1–3个工作日。", "好的！",
    ]


def test_line_breaks_end_sentences():
    assert split_sentences("Alipay: 1–3 days\nPayPal: 3–5 days") == ["Alipay: 1–3 days", "PayPal: 3–5 days"]


def test_a_step_number_begins_its_sentence_rather_than_ending_one():
    assert split_sentences("1. Open My Orders. Then tap Logistics.\n2. 提交申请。\nIt costs 3.5 yuan. 10. x") == [
        "1. Open My Orders.", "Then tap Logistics.", "2. 提交申请。", "It costs 3.5 yuan.", "10.", "x"]


def test_language_detection():
    assert detect_lang("退款多久到账") == "zh"
    assert detect_lang("How long does a refund take?") == "en"
    assert detect_lang("iPhone 退货怎么办") == "zh"


def _doc(sections):
    return Document(doc_id="d", title="Title", sections=[Section(path=p, text=t) for p, t in sections])


def test_chunks_never_cross_sections_and_carry_their_heading_path():
    doc = _doc([(["A"], "First section sentence. " * 3), (["A", "B"], "第二节的内容。" * 3)])
    chunks = chunk_document(doc, target_chars=1000)
    assert [c.section for c in chunks] == ["A", "A > B"]
    assert "第二节" not in chunks[0].text and "First" not in chunks[1].text
    assert [c.chunk_id for c in chunks] == ["d#0", "d#1"]
    assert chunks[1].lang == "en" or chunks[1].lang == "zh"   # doc-level detection, same for all chunks
    assert len({c.lang for c in chunks}) == 1


def test_long_sections_split_near_the_target_with_sentence_overlap():
    sentences = [f"Sentence number {i} is here." for i in range(60)]
    doc = _doc([(["S"], " ".join(sentences))])
    chunks = chunk_document(doc, target_chars=200, overlap_chars=60, max_chars=400)
    assert len(chunks) > 5
    for c in chunks:
        assert len(c.text) <= 260
        assert c.text.endswith(".")                     # breaks only at sentence ends
    for a, b in zip(chunks, chunks[1:], strict=False):
        tail = split_sentences(a.text)
        carried = [s for s in tail if b.text.startswith(s)]
        assert carried and b.text.count(tail[-1]) == 1  # the next chunk repeats the last sentence(s) ...
        assert sum(len(s) + 1 for s in tail[tail.index(carried[0]):]) <= 60 + 1   # ... within the overlap


def test_zh_sections_split_at_zh_sentence_ends():
    doc = _doc([([], "这是一句很长的中文句子，用来测试分块。" * 40)])
    chunks = chunk_document(doc, target_chars=120, overlap_chars=0, max_chars=300)
    assert len(chunks) > 3
    assert all(c.text.endswith("。") for c in chunks)
    assert all(c.lang == "zh" for c in chunks)


def test_a_single_sentence_longer_than_max_is_hard_split():
    doc = _doc([([], "word " * 500)])
    chunks = chunk_document(doc, target_chars=200, overlap_chars=0, max_chars=300)
    assert all(len(c.text) <= 300 for c in chunks)
    assert sum(len(c.text.split()) for c in chunks) == 500


def test_each_faq_entry_is_a_chunk_of_its_own_with_its_whole_answer():
    faq = ("Common questions.\nQ: How long does a refund to Alipay take?\nA: 1–3 business days.\n"
           "Q: I paid with a Visa card. When will I see my refund?\nA: Card refunds take 3–7 business days.\n"
           "Q: Where is my refund?\nA: Check the payment method. Then contact us.\n"
           "问：退款到支付宝要多久？\n答：1–3个工作日到账。")
    chunks = chunk_document(_doc([(["FAQ"], faq)]), target_chars=400, overlap_chars=80)
    assert [c.text for c in chunks] == [
        "Common questions.",
        "Q: How long does a refund to Alipay take?\nA: 1–3 business days.",
        "Q: I paid with a Visa card. When will I see my refund?\nA: Card refunds take 3–7 business days.",
        "Q: Where is my refund?\nA: Check the payment method. Then contact us.",
        "问：退款到支付宝要多久？\n答：1–3个工作日到账。"]
    # a "Q:" inside a sentence is not an entry
    [one] = chunk_document(_doc([(["S"], "Write Q: then the question. It is read.")]))
    assert one.text == "Write Q: then the question. It is read."


def test_content_hash_covers_title_section_and_text():
    a = chunk_document(_doc([(["S"], "Same text.")]))[0]
    b = chunk_document(_doc([(["S"], "Same text.")]))[0]
    c = chunk_document(_doc([(["Other"], "Same text.")]))[0]
    d = chunk_document(_doc([(["S"], "Changed text.")]))[0]
    assert a.content_hash == b.content_hash
    assert len({a.content_hash, c.content_hash, d.content_hash}) == 3
    assert embed_text(a) == "Title > S\nSame text."


_SENTENCE = st.one_of(
    st.from_regex(r"[A-Za-z]{1,12}( [A-Za-z]{1,12}){0,12}[.?!]", fullmatch=True),
    st.from_regex(r"[\u4e00-\u9fa5]{1,30}[。！？]", fullmatch=True),
)


@settings(max_examples=30, deadline=None)
@given(sections=st.lists(st.lists(_SENTENCE, min_size=1, max_size=25), min_size=1, max_size=4),
       target=st.integers(40, 400), overlap=st.integers(0, 80))
def test_every_sentence_lands_in_a_chunk_of_its_section(sections, target, overlap):
    doc = _doc([([f"S{i}"], " ".join(s)) for i, s in enumerate(sections)])
    chunks = chunk_document(doc, target_chars=target, overlap_chars=overlap, max_chars=max(target, 400))
    for i, sents in enumerate(sections):
        mine = " ".join(c.text for c in chunks if c.section == f"S{i}")
        squashed = re.sub(r"\s+", "", mine)
        for s in sents:
            assert re.sub(r"\s+", "", s) in squashed
    assert all(len(c.text) <= max(target, 400) + 1 for c in chunks)
    assert len({c.chunk_id for c in chunks}) == len(chunks)
