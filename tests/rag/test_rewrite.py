"""Query rewriting: width/case folding, traditional -> simplified, fillers, jieba keywords, glossary synonyms."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag.rewrite import QueryRewriter, fold, get_tokenizer, load_glossary, normalize, parse_glossary, uncontracted
from rag.service import SAMPLE_KB


@pytest.fixture(scope="module")
def rewriter():
    glossary = load_glossary(SAMPLE_KB)
    return QueryRewriter(get_tokenizer(glossary.words()), glossary)


def test_width_case_and_traditional_folding():
    assert fold("ＡＢＣ１２３　退貨運費") == "ABC123 退货运费"
    assert normalize("Ｒｅｆｕｎｄ 帳戶") == "refund 帐户"


def test_fillers_and_particles_are_dropped_from_keywords(rewriter):
    rw = rewriter.rewrite("请问一下，退款要多久呢？谢谢")
    assert "请问" not in rw.lexical and "谢谢" not in rw.lexical and "呢" not in rw.keywords
    assert "退款" in rw.keywords and "多久" in rw.keywords
    en = rewriter.rewrite("Hi, can you tell me how long a refund takes? Thanks")
    assert en.keywords[:3] == ["how", "long", "refund"] and "hi" not in en.keywords and "thanks" not in en.keywords
    assert en.lang == "en" and rewriter.rewrite("退款").lang == "zh"


def test_glossary_variants_add_canonical_terms_in_both_languages(rewriter):
    zh = rewriter.rewrite("退錢要多久")             # traditional variant of a glossary synonym
    assert "退款" in zh.expansions and "退款" in zh.lexical.split()
    en = rewriter.rewrite("where is my parcel")
    assert en.expansions == ["tracking"]
    assert rewriter.rewrite("退款要多久").expansions == []      # canonical term already there


def test_glossary_matches_say_which_variant_stands_for_which_term(rewriter):
    """The composer reads a customer's word the knowledge base never uses as the term it stands for."""
    assert ("amex", "American Express") in rewriter.glossary.matches(normalize("Do you accept AMEX?"))
    assert rewriter.glossary.matches(normalize("do you accept American Express?")) == []   # the term itself


def test_a_question_is_said_in_the_glossarys_terms_for_the_words_an_article_never_says(rewriter):
    """The articles' names are in the glossary's terms: "discount code" is read as "coupon" to compare a question with
    them, unless the article says the customer's words itself."""
    g = rewriter.glossary
    assert g.in_terms("How do I use a Discount Code?") == "How do I use a coupon?"
    assert g.in_terms("how do I use a discount code?", "Enter your discount code at checkout") == (
        "how do I use a discount code?")
    assert g.in_terms("可以开发票吗") == "可以开发票吗"        # the variant holds its term: said already


def test_an_entry_on_a_term_that_holds_the_asked_one_is_narrower(rewriter):
    """"重开发票" (reissue an invoice) holds "发票": an entry asking about it answers less than "可以开发票吗"; one that
    asks about the term itself, or a question that names the narrower term, is not narrower."""
    g = rewriter.glossary
    assert g.narrower("可以开发票吗", "一年前的订单还能重开发票吗？")
    assert g.narrower("can I get an invoice?", "Can I re-issue an invoice after a year?")
    assert not g.narrower("可以开发票吗", "下单时忘了选发票怎么办？")
    assert not g.narrower("怎么重开发票", "一年前的订单还能重开发票吗？")
    assert not g.narrower("how long does a refund take?", "When is the refund issued?")
    assert not g.narrower("付款一直失败", "外卡付款失败怎么办？")      # "失败" is asked too


def test_latin_variants_match_whole_words_only(rewriter):
    # "tier" is a variant of "member tier": it must not fire inside "frontier"
    assert "member tier" not in rewriter.rewrite("frontier shipping").expansions
    assert "member tier" in rewriter.rewrite("what tier am I").expansions


def test_the_dense_query_keeps_the_sentence(rewriter):
    rw = rewriter.rewrite("請問，iPhone 可以用花唄分期嗎？")
    assert rw.dense == "请问,iPhone 可以用花呗分期吗?"    # NFKC folds full-width punctuation, t2s the characters
    assert "花呗" in rw.keywords          # glossary words join jieba's dictionary


def test_glossary_words_join_the_tokenizer_dictionary():
    plain = get_tokenizer()
    with_words = get_tokenizer(["用花呗"])
    assert "用花呗" not in plain.tokenize("我想用花呗")
    assert "用花呗" in with_words.tokenize("我想用花呗")
    assert get_tokenizer(["用花呗"]) is with_words               # shared per word set


def test_glossary_formats(tmp_path: Path):
    assert parse_glossary({"terms": {"退款": "退钱, 返款"}}).terms == {"退款": ["退钱", "返款"]}
    assert parse_glossary([{"term": "refund", "synonyms": ["money back"]}]).terms == {"refund": ["money back"]}
    assert len(load_glossary(tmp_path)) == 0                  # a folder without a glossary
    with pytest.raises(ValueError):
        parse_glossary("not a mapping")


def test_a_query_of_only_stop_words_still_searches(rewriter):
    rw = rewriter.rewrite("what is it")
    assert rw.keywords and rw.lexical


def test_contractions_leave_no_stubs_among_the_keywords(rewriter):
    """"isn't", "can't", "what's" are said whole before the words are cut: no "isn", "t" or "s" stands for a word
    the answer must contain."""
    assert rewriter.rewrite("my discount code isn't working").keywords == ["discount", "code", "working"]
    assert rewriter.rewrite("why can't I pay with my card?").keywords == ["why", "pay", "card"]
    assert rewriter.rewrite("what's your phone number?").keywords == ["phone", "number"]
    assert uncontracted("it won’t turn on and i didn't drop it") == "it will not turn on and i did not drop it"
    assert uncontracted("the shop's policy") == "the shop policy"


def test_a_turn_aside_at_the_start_names_nothing_asked(rewriter):
    """"wait, ...", "等一下，..." open a question asked beside a task: its words are no keywords (jieba cut "等一下" as
    "等" + "一下", which drew the entry "退货地址在哪里看" for "等一下，退款会退到哪里"); later in a question "wait" may be
    what is asked."""
    assert rewriter.rewrite("等一下，退款会退到哪里").keywords == rewriter.rewrite("退款会退到哪里").keywords
    assert rewriter.rewrite("对了，运费多少").keywords == rewriter.rewrite("运费多少").keywords
    assert rewriter.rewrite("wait, where does the refund go?").keywords == ["where", "refund", "go"]
    assert "wait" in rewriter.rewrite("how long do I wait for a refund?").keywords
    assert rewriter.rewrite("另外的订单呢").keywords == ["另外", "订单"]
    assert rewriter.rewrite("Wait, where does the refund go?").dense == "where does the refund go?"   # the encoder's too
