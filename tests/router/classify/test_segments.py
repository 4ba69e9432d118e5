"""Where a message is cut into requests (router.classify.segments): two requests that each name their own order
are cut where they join; one request about two orders, or the same order twice, stays whole."""

from __future__ import annotations

import pytest

from router.classify.segments import split_requests


@pytest.mark.parametrize("text, parts", [
    ("refund 100241 and an invoice for 100240", ["refund 100241", "an invoice for 100240"]),
    ("帮我取消订单100236，再给订单100230开个发票", ["帮我取消订单100236", "给订单100230开个发票"]),
    ("取消订单100236然后给100230开发票", ["取消订单100236", "给100230开发票"]),
    ("I want to cancel 100235 and refund 100241 too", ["I want to cancel 100235", "refund 100241 too"]),
    ("退款订单100234，另外帮我查一下订单100235的物流", ["退款订单100234", "帮我查一下订单100235的物流"]),
])
def test_two_requests_about_two_orders_are_cut_where_they_join(text, parts):
    assert split_requests(text) == parts


@pytest.mark.parametrize("text", [
    "cancel order 100235 and 100236",              # one request about two orders
    "cancel order 100235 and order 100236",
    "取消订单100236和订单100230",
    "refund 100241 and give me an invoice for 100241",   # the same order on both sides
    "I want a refund and an explanation",          # no order on either side
])
def test_one_request_about_orders_stays_whole(text):
    assert split_requests(text) == [text]


def _places(words: str) -> bool:
    """A stand-in for the classifier: only these words ask for something."""
    return any(w in words for w in ("invoice", "cancel", "refund", "发票", "物流", "取消"))


@pytest.mark.parametrize("text, parts", [
    ("refund order 100241 and the lamp one 100240", ["refund order 100241 and the lamp one 100240"]),
    ("退款订单100234，还有龙井那个100230", ["退款订单100234，还有龙井那个100230"]),
    ("refund order 100241 and the lamp one 100240, by the way how long do refunds take?",
     ["refund order 100241 and the lamp one 100240", "how long do refunds take"]),
    ("refund 100241 and an invoice for 100240", ["refund 100241", "an invoice for 100240"]),
    ("退款订单100234，另外帮我查一下订单100235的物流", ["退款订单100234", "帮我查一下订单100235的物流"]),
])
def test_a_part_that_only_names_another_order_stays_with_its_request(text, parts):
    """Whether the words after a join ask for something is the caller's to say (the router asks its classifier): a
    part that names another order and nothing else is another order of the request before it."""
    assert split_requests(text, asks=_places) == parts


def _answers(part: str) -> bool:
    """A stand-in for a waiting step that asked for a yes or an amount: these words answer it."""
    return part.strip(" .,。，!") in ("yes", "no", "好", "50")


@pytest.mark.parametrize("text, parts", [
    ("yes, and how long will it take to reach my card?", ["yes", "how long will it take to reach my card"]),
    ("好。另外退款多久到账？", ["好", "退款多久到账"]),
    ("50，另外退款多久到账？", ["50", "退款多久到账"]),
])
def test_a_short_answer_to_the_waiting_step_is_a_part_of_its_own(text, parts):
    assert split_requests(text, answers=_answers) == parts


@pytest.mark.parametrize("text", [
    "yes, and how long will it take to reach my card?",    # no step waits for it: no part of its own
    "ok, and how long do refunds take?",                    # waits, but "ok" answers nothing it asked
    "hi! how long do refunds take?",
])
def test_a_short_fragment_that_answers_nothing_is_no_part(text):
    waits = _answers if text.startswith(("ok", "hi")) else None
    assert split_requests(text, answers=waits) == [text]
