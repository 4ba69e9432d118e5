"""One normalisation for guards, rules, entities, retrieval and the workflows: the same folds as the copies
it replaced (their formulas are kept here as the reference), and an offset map back to the original."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import opencc
from hypothesis import given, settings
from hypothesis import strategies as st

from automation.workflows import requests as workflow_requests
from automation.workflows import understand as workflow_understand
from rag.rewrite import fold as rag_fold
from rag.rewrite import normalize as rag_normalize
from router.classify.entities import normalise as entities_normalise
from router.classify.rules import fold as rules_fold
from router.turn.guards import normalise as harness_normalise
from text.normalise import normalise, normalise_mapped

_T2S = opencc.OpenCC("t2s")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


# the four folds as they were written before they shared one module
def old_harness(text):
    text = unicodedata.normalize("NFKC", text or "").lower()
    if _CJK.search(text):
        text = _T2S.convert(text)
    return " ".join(text.split())


def old_rules(text):
    return _T2S.convert(unicodedata.normalize("NFKC", text)).casefold()


def old_entities(text):
    return unicodedata.normalize("NFKC", text).replace("￥", "¥")


def old_rag_fold(text):
    text = unicodedata.normalize("NFKC", text or "")
    if re.search(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]", text):
        text = _T2S.convert(text)
    return re.sub(r"\s+", " ", text).strip()


def old_understand_norm(text):
    text = unicodedata.normalize("NFKC", text or "").strip().lower()
    return re.sub(r"[\s,.!?;:，。！？；：、~]+", " ", text).strip()


def old_requests_norm(text):
    return unicodedata.normalize("NFKC", text or "").strip().lower()


texts = st.one_of(
    st.text(max_size=60),
    st.text(alphabet="轉人工退款這個問題請幫我查訂單ＳＴＯＰｓｔｏｐ１２３￥＄ 　\t\nAbCßİΣ的了é\u0301ｶﾞ", max_size=40),
    st.sampled_from(["STOP", "ｓｔｏｐ", "轉人工", "  我要  退款 ", "Straße", "６００元", "￥5", "ＯＲＤ-２０２４"]),
)


@settings(max_examples=300, deadline=None)
@given(texts)
def test_each_caller_folds_exactly_as_before(text):
    assert harness_normalise(text) == old_harness(text)
    assert rules_fold(text) == old_rules(text)
    assert entities_normalise(text) == old_entities(text)
    assert rag_fold(text) == old_rag_fold(text)
    assert rag_normalize(text) == old_rag_fold(text).lower()
    assert workflow_understand.norm(text) == old_understand_norm(text)
    assert workflow_requests._norm(text) == old_requests_norm(text)


def test_no_package_folds_text_on_its_own():
    """Unicode normalisation lives in text/ only: every other package calls it (one set of folds to keep)."""
    repo = Path(__file__).resolve().parents[2]
    pending = {"router/classify/rules.py"}   # folds its regex patterns; moves to text/ with the classify rework
    found = sorted(str(p.relative_to(repo)) for package in ("router", "rag", "handoff", "automation", "failures")
                   for p in (repo / package).rglob("*.py") if "unicodedata.normalize(" in p.read_text("utf-8"))
    assert set(found) - pending == set(), found


def test_the_options_name_the_differences():
    assert normalise("Straße  轉人工 ") == "straße 转人工"
    assert normalise("Straße", case="casefold") == "strasse"
    assert normalise("Straße 轉", case="keep", simplify="never", spaces="keep") == "Straße 轉"
    assert normalise(None) == ""
    assert normalise("ｓｔｏｐ") == "stop" and normalise("１３８　１２３４") == "138 1234"


@settings(max_examples=300, deadline=None)
@given(texts)
def test_every_folded_character_maps_back_into_the_original(text):
    m = normalise_mapped(text)
    assert len(m.starts) == len(m.ends) == len(m.text)
    for i, ch in enumerate(m.text):
        s, e = m.starts[i], m.ends[i]
        assert 0 <= s < e <= len(text)
        if ch != " ":   # squashed whitespace maps to the whole run; final sigma folds by its context
            assert ch.casefold() in normalise(text[s:e], spaces="keep").casefold()
    # the same text as normalise() unless NFKC composes across characters (e + U+0301, ｶ + ﾞ)
    if "".join(unicodedata.normalize("NFKC", c) for c in text) == unicodedata.normalize("NFKC", text):
        assert m.text.replace("ς", "σ") == normalise(text).replace("ς", "σ")   # final sigma: by context


def test_a_value_typed_full_width_maps_back_whole():
    text = "电话：１３８　１２３４　５６７８，謝謝"
    m = normalise_mapped(text, spaces="keep")
    i = m.text.index("138 1234 5678")
    s, e = m.span(i, i + len("138 1234 5678"))
    assert text[s:e] == "１３８　１２３４　５６７８"
    assert m.text.endswith("谢谢")     # traditional -> simplified, same offsets
