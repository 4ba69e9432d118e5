"""text.places: countries and regions, and "abroad" in a word, that a customer names as a destination (zh and en);
a question whose object is a destination asks what the shop does, however politely it is put (text.form)."""

from __future__ import annotations

import pytest

from text.form import read_form
from text.places import abroad_in, asks_destination, elsewhere_in, places_in


def test_places_are_found_in_both_languages_and_short_names_only_where_a_place_is_said():
    assert places_in("do you ship to Canada?") == ["canada"]
    assert places_in("can you deliver to the US?") == ["us"]
    assert places_in("Shipping to the United States or New Zealand") == ["united states", "new zealand"]
    assert places_in("你们能寄到美国吗") == ["美国"]
    assert places_in("can you send us the invoice") == [] and places_in("let us know") == []
    assert abroad_in("do you deliver overseas?") == ["overseas"] and abroad_in("支持海外配送吗") == ["海外"]
    assert elsewhere_in("We do not ship to other countries or regions at the moment.")
    assert elsewhere_in("目前暂不支持寄往其他国家和地区。") and not elsewhere_in("其他地区多为中通或圆通")


@pytest.mark.parametrize("text", ["do you ship to Canada?", "can you deliver to the US?", "do you ship internationally",
                                  "could you send parcels to Japan?", "is shipping to Japan possible?",
                                  "你们能寄到美国吗", "可以发货到日本吗", "你们支持海外配送吗", "香港能送吗"])
def test_a_question_about_sending_to_a_place_is_a_question(text):
    assert asks_destination(text) and read_form(text) == "question"


@pytest.mark.parametrize("text", ["can you ship my order to Canada", "please ship it to Canada", "帮我寄到美国",
                                  "can you cancel my order", "can you send it to my office?"])
def test_an_act_on_the_customers_own_order_stays_a_request(text):
    assert read_form(text) == "request"


@pytest.mark.parametrize("text", ["do you sell phone cases in Canada?", "where is my order", "I live in Japan",
                                  "can you send us the invoice", "美国运通卡能用吗"])
def test_a_place_without_sending_to_it_is_no_destination(text):
    assert not asks_destination(text)
