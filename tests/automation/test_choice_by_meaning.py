"""Choosing an option by meaning on the real multilingual encoder (automation/workflows/meaning.py).

e5's cosines sit high for any pair of short texts, so a pick by meaning is judged against a background (see the
module). False picks are far worse than asking again: on the set below nothing that names no order, and no
reference to another order, may be taken; the clear cross-language references are."""

from __future__ import annotations

import pytest

from automation.tools import Caller
from automation.workflows import understand as U
from automation.workflows.engine import FlowEngine
from automation.workflows.meaning import EncoderSimilarity, script
from automation.workflows.spec import load_workflows

STATUS = {"en": {"paid": "paid (not shipped yet)", "shipped": "shipped", "delivered": "delivered"},
          "zh": {"paid": "已付款（未发货）", "shipped": "已发货", "delivered": "已签收"}}
# the example shop's orders a refund offers (paid, shipped, delivered), per customer
ORDERS = {
    "c1": [("100230", "delivered", ["西湖龙井 250g"]), ("100234", "shipped", ["降噪蓝牙耳机", "耳机保护套"]),
           ("100235", "paid", ["陶瓷马克杯"])],
    "c2": [("100240", "delivered", ["Desk lamp", "LED bulb"]), ("100241", "shipped", ["Leather boots, size 12"]),
           ("100242", "paid", ["Garden hose 25 ft"])],
    "c5": [("100270", "delivered", ["不粘锅 28cm"]), ("100271", "paid", ["纯棉毛巾 4条装"])],
}
# (what the customer answers, who, the turn's language, the order meant or None)
REFERENCES = [
    ("the pan please", "c5", "en", "100270"), ("the pan", "c5", "en", "100270"), ("the frying pan", "c5", "en", "100270"),
    ("the non-stick pan", "c5", "en", "100270"), ("the towels", "c5", "en", "100271"), ("锅", "c5", "zh", "100270"),
    ("毛巾", "c5", "zh", "100271"), ("the mug", "c1", "en", "100235"), ("the cup", "c1", "en", "100235"),
    ("the coffee mug", "c1", "en", "100235"), ("the headphones", "c1", "en", "100234"),
    ("the earphones", "c1", "en", "100234"), ("the tea", "c1", "en", "100230"), ("the green tea", "c1", "en", "100230"),
    ("杯子", "c1", "zh", "100235"), ("耳机", "c1", "zh", "100234"), ("茶叶", "c1", "zh", "100230"),
    ("我要退那双靴子", "c2", "zh", "100241"), ("靴子", "c2", "zh", "100241"), ("皮靴", "c2", "zh", "100241"),
    ("台灯", "c2", "zh", "100240"), ("水管", "c2", "zh", "100242"), ("浇花的软管", "c2", "zh", "100242"),
    ("the boots", "c2", "en", "100241"),
]
NOTHING = [
    ("my sister bought it", "c1", "en"), ("my sister bought it", "c2", "en"), ("my sister bought it", "c5", "en"),
    ("the blue one", "c1", "en"), ("the blue one", "c2", "en"), ("the blue one", "c5", "en"),
    ("how long does shipping take?", "c1", "en"), ("how long does shipping take?", "c2", "en"),
    ("the blender one please", "c2", "en"), ("不粘锅那个", "c1", "zh"), ("the red one", "c5", "en"),
    ("I don't know", "c1", "en"), ("hmm", "c2", "en"), ("the expensive one", "c1", "en"), ("whatever", "c5", "en"),
    ("the laptop", "c2", "en"), ("手机", "c1", "zh"), ("the keyboard", "c5", "en"), ("我妹妹买的", "c1", "zh"),
    ("蓝色的那个", "c2", "zh"), ("快递多久到", "c5", "zh"), ("the one I bought last week", "c2", "en"),
    ("the gift", "c1", "en"), ("the shoes", "c1", "en"),
]


def rows(customer: str, lang: str) -> tuple[list[str], list[list[str]]]:
    """The options as the bundled refund's choose step reads them: the label, then its ``match`` columns."""
    ids, texts = [], []
    for oid, status, items in ORDERS[customer]:
        ids.append(oid)
        texts.append([f"{oid} ({STATUS[lang][status]}): {', '.join(items)}", *items, status])
    return ids, texts


@pytest.fixture(scope="module")
def meaning(e5_encoder):
    return EncoderSimilarity(e5_encoder)


def measure(meaning) -> dict[str, list[str]]:
    """The rule on the set: references taken right, taken wrong, not taken (by meaning: words took them
    before the encoder is asked), and answers naming nothing that were taken."""
    out: dict[str, list[str]] = {"right": [], "wrong": [], "missed": [], "by_words": [], "false": []}
    for said, who, lang, meant in REFERENCES:
        ids, texts = rows(who, lang)
        if U.choose(said, ids, texts).index is not None:
            out["by_words"].append(said)
            continue
        got = U.choose(said, ids, texts, similarity=meaning)
        key = "missed" if got.index is None else "right" if ids[got.index] == meant else "wrong"
        out[key].append(said)
    for said, who, lang in NOTHING:
        ids, texts = rows(who, lang)
        if U.choose(said, ids, texts, similarity=meaning).index is not None:
            out["false"].append(f"{said} ({who})")
    return out


def test_no_false_pick_and_the_clear_cross_language_references_are_taken(meaning):
    got = measure(meaning)
    assert got["false"] == [] and got["wrong"] == [], got
    assert {"the pan please", "the non-stick pan", "the towels", "台灯"} <= set(got["right"]), got


def test_a_raw_cosine_threshold_would_take_what_names_nothing(e5_encoder):
    """Why the background: on raw e5 cosines the old rule (0.85, lead 0.05) never takes "the pan please", and
    cosines of answers naming nothing reach those of the references."""
    def cosine(text, options):
        v = e5_encoder.encode_queries([text, *options])
        return [float(v[0] @ o) for o in v[1:]]

    ids, texts = rows("c5", "en")
    assert U.choose("the pan please", ids, texts, similarity=cosine).index is None
    pan = max(U.by_meaning(cosine, "the pan please", ids, texts))
    assert max(max(U.by_meaning(cosine, said, *rows(who, lang))) for said, who, lang in NOTHING) > pan


def test_meaning_texts_leave_out_the_label_the_id_and_codes():
    assert U.meaning_texts("100270", ["100270 (delivered): 不粘锅 28cm", "不粘锅 28cm", "delivered"]) == ["不粘锅 28cm"]
    assert U.meaning_texts("A1", ["A1: Garden Hose (green)"]) == ["Garden Hose (green)"]
    assert U.meaning_texts("", ["Desk Lamp (brass)"]) == ["Desk Lamp (brass)"]
    assert U.meaning_texts("W1", ["W1 (paid): Wool scarf", "paid"]) == ["(paid): Wool scarf"]   # codes only: the label
    assert (script("不粘锅 28cm"), script("Leather boots, size 12"), script("the 锅")) == ("zh", "en", "zh")


# ------------------------------------------------------------------ the bundled refund on the example shop

@pytest.fixture
def shop_engine(shop_gateway, approvals, e5_encoder):
    return FlowEngine(load_workflows(None, tools=shop_gateway), shop_gateway, approvals,
                      similarity=EncoderSimilarity(e5_encoder))


C5 = Caller(channel="web", customer_id="c5", conversation_id="meaning-c5")
C1 = Caller(channel="web", customer_id="c1", conversation_id="meaning-c1")
C2 = Caller(channel="web", customer_id="c2", conversation_id="meaning-c2")


def test_the_pan_please_picks_the_order_of_the_non_stick_pan(shop_engine, turn):
    t = turn(shop_engine.start, "refund", C5, "I want a refund", {}, "en")
    assert t.awaiting == "order_id" and "100270" in t.reply and "100271" in t.reply, t.reply
    t = turn(shop_engine.advance, t.instance_id, C5, "the pan please", {}, "en")
    assert t.awaiting == "amount", t.reply
    t = turn(shop_engine.advance, t.instance_id, C5, "all of it", {}, "en")
    assert t.awaiting == "confirmation" and t.pending_action["arguments"]["order_id"] == "100270", t.reply


@pytest.mark.parametrize("who, lang, said", [
    (C5, "en", "my sister bought it"), (C5, "en", "the blue one"), (C1, "en", "the blue one"),
    (C2, "en", "my sister bought it"), (C1, "zh", "不粘锅那个"), (C2, "zh", "蓝色的那个"),
])
def test_an_answer_that_names_no_order_picks_none_and_the_list_is_asked_again(shop_engine, turn, who, lang, said):
    t = turn(shop_engine.start, "refund", who, "I want a refund" if lang == "en" else "我想退款", {}, lang)
    assert t.awaiting == "order_id", t.reply
    t = turn(shop_engine.advance, t.instance_id, who, said, {}, lang)
    assert t.status == "waiting" and t.awaiting == "order_id", t.reply


def test_a_shipping_question_at_the_choice_picks_no_order(shop_engine, turn):
    t = turn(shop_engine.start, "refund", C5, "I want a refund", {}, "en")
    t = turn(shop_engine.advance, t.instance_id, C5, "how long does shipping take?", {}, "en")
    assert t.awaiting != "amount" and t.pending_action is None, t.reply
