"""One courtesy stripper for every reader: an address said in a request, a value named in a message, an answer
that only points at an option."""

from __future__ import annotations

import pytest

from text.courtesy import without_courtesy


@pytest.mark.parametrize("said,meant", [
    ("21 Oak Road, Portland, OR 97201 instead, thanks", "21 Oak Road, Portland, OR 97201"),
    ("12 Baker Street, London NW1 6XE please!", "12 Baker Street, London NW1 6XE"),
    ("12 Baker Street asap", "12 Baker Street"),
    ("Acme Trading Ltd, thank you", "Acme Trading Ltd"),
    ("Acme Trading Ltd plz", "Acme Trading Ltd"),
    ("the first one i think", "the first one"),
    ("the blue one then", "the blue one"),
    ("the lamp one, thx", "the lamp one"),
    ("上海市浦东新区世纪大道100号吧，谢谢", "上海市浦东新区世纪大道100号"),
    ("杭州某某科技有限公司就行", "杭州某某科技有限公司"),
    ("北京市朝阳区建国路88号，麻烦你了", "北京市朝阳区建国路88号"),
    ("杭州市西湖区文三路90号可以吗？", "杭州市西湖区文三路90号"),
    ("张三即可。", "张三"),
    ("谢谢", ""),
])
def test_the_courtesy_after_a_value_is_stripped(said, meant):
    assert without_courtesy(said).strip() == meant


@pytest.mark.parametrize("kept", ["please", "Thanks Ltd", "Then & Now Studio Ltd", "thankful", "pleased to meet",
                                  "12 Knowhere Lane", "the Nowhere Inn"])
def test_a_word_that_only_looks_like_courtesy_is_kept(kept):
    assert without_courtesy(kept) == kept
