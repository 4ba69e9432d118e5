"""Several requests in one message, option words, the cheapest choice and partial addresses (no database)."""

from __future__ import annotations


import pytest

from automation.workflows import requests as R
from automation.workflows.expr import evaluate
from automation.workflows.spec import WorkflowConfigError, load_workflows, parse_workflows

KINDS = {"return": ["return", "send back", "退掉", "退"], "exchange": ["swap", "exchange", "换"]}
VOCAB = {"size": {"M": ["medium", "中号"], "L": ["large"]}, "style": {"half zipper": ["half zip", "半拉链"]},
         "material": {"waterproof": ["防水"]}, "color": {"brown": ["棕色"]}, "title": {"Garden Hose": ["水管"]}}
FLEECE = [{"options": {"style": "half zipper", "size": "S", "color": "grey"}},
          {"options": {"style": "full zipper", "size": "M", "color": "navy"}}]
BOOTS = [{"options": {"material": "leather", "size": "12"}}, {"options": {"material": "waterproof", "size": "12"}}]


@pytest.fixture(autouse=True)
def vocabulary():
    token = R.VOCABULARY.set(VOCAB)
    yield
    R.VOCABULARY.reset(token)


def test_a_message_splits_into_its_requests_in_both_languages():
    en = R.split("Return the hose and swap the boots for the waterproof ones", KINDS)
    assert [(r["kind"], r["item"], r["change"]) for r in en] == [
        ("return", "the hose", "the hose"), ("exchange", "the boots", "the waterproof ones")]
    zh = R.split("退掉水管，把靴子换成防水的", KINDS)
    assert [(r["kind"], r["item"], r["change"]) for r in zh] == [("return", "水管", "水管"), ("exchange", "靴子", "防水")]
    # a piece without a kind word is another request of the same kind; a bare preference belongs to the one before
    assert [r["item"] for r in R.split("return the hose and the lamp", KINDS)] == ["the hose", "the lamp"]
    last = R.split("swap the fleece for a full zip, the cheapest one", KINDS)
    assert len(last) == 1 and last[0]["cheapest"] and "cheapest" in last[0]["change"]
    assert R.split("I have a problem with my order", KINDS) == []


def test_words_about_the_current_item_are_told_apart_from_the_wanted_change():
    (r,) = R.split("swap my black boots for brown", KINDS)
    assert "black" in r["item"] and r["change"] == "brown"
    assert R.options_in(r["change"], [{"options": {"color": "black"}}, {"options": {"color": "brown"}}]) == {"color": "brown"}


def test_option_words_map_to_the_shops_own_values_then_fuzzily():
    assert R.options_in("medium", BOOTS) == {}                                     # no size M among these variants
    variants = FLEECE + [{"options": {"style": "half zipper", "size": "M", "color": "grey"}}]
    assert R.options_in("a half zip in medium", variants) == {"style": "half zipper", "size": "M"}
    assert R.options_in("中号，半拉链", variants) == {"size": "M", "style": "half zipper"}
    assert R.options_in("waterprof ones", BOOTS) == {"material": "waterproof"}        # a typo of a value
    assert R.options_in("防水的", BOOTS) == {"material": "waterproof"}
    assert R.options_in("I'm fine", variants) == {}                                 # a lone letter is not size M
    assert R.synonyms("garden hose") == ["水管"]


def test_the_cheapest_in_both_languages():
    assert R.prefers_cheapest("the cheapest one") and R.prefers_cheapest("要最便宜的")
    assert not R.prefers_cheapest("the waterproof ones")


def test_addresses_given_in_part_keep_the_rest():
    base = {"line1": "9 Elm St", "line2": "", "city": "Seattle", "state": "WA", "zip": "98101", "country": "US"}
    assert R.address_edit("Suite 641, otherwise the same", base) == {**base, "line2": "Suite 641"}
    assert R.address_edit("门牌改成641，其他不变", base) == {**base, "line2": "641"}
    assert R.address_edit("邮编改成98109", base) == {**base, "zip": "98109"}
    assert R.address_edit("send it to 20 Oak Ave", base) == {**base, "line1": "20 Oak Ave"}
    assert R.address_edit("same as my other order", base) is None
    # in CEL, from a workflow
    assert evaluate("address_edit(t, a).line2", {"t": "apt 3B", "a": base}) == "Apt 3B"
    assert evaluate("address_edit(t, a) == null", {"t": "my default address", "a": base}) is True
    assert evaluate("options_in('large', vs)", {"vs": [{"options": {"size": "L"}}]}) == {"size": "L"}


SPLIT_FLOW = """\
vocabulary:
  size: {M: [medium]}
workflows:
  several:
    slots:
      requests: {}
      line: {}
    steps:
      - id: split
        split: requests
        kinds: {return: {en: [return], zh: [退]}}
        prompt: {zh: "要退什么？", en: "What should be returned?"}
      - id: each
        foreach: slots.requests
        as: req
        reset: [line]
        steps:
          - id: pick
            choose: line
            options: "[{'t': 'hose'}]"
            label: "{{ option.t }}"
            text: req.item
            cheapest: option.price
            required: false
            prompt: {zh: "哪件？", en: "Which one?"}
      - id: ok
        confirm: {zh: "好吗？", en: "OK?"}
        pending_action:
          - {tool: t, arguments: {}, summary: {zh: 一, en: one}, when: size(slots.requests) > 0}
          - {tool: t, arguments: {}, summary: {zh: 二, en: two}}
      - end: completed
"""


def test_the_new_constructs_load_and_their_mistakes_are_named_with_line_and_field(tmp_path):
    ws = parse_workflows(SPLIT_FLOW, file="shop.yaml")
    assert ws["several"].vocabulary == {"size": {"M": ["medium"]}}
    bad = (SPLIT_FLOW.replace("kinds: {return: {en: [return], zh: [退]}}", "kinds: {}")
           .replace("text: req.item", "text: req.item +")
           .replace("required: false", "required: maybe")
           .replace("when: size(slots.requests) > 0", "when: slots.nope")
           .replace("size: {M: [medium]}", "size: {M: medium}"))
    with pytest.raises(WorkflowConfigError) as exc:
        parse_workflows(bad, file="shop.yaml")
    fields = {e["field"]: e["line"] for e in exc.value.errors}
    assert "vocabulary.size.M" in fields
    assert "workflows.several.steps[0].kinds" in fields
    assert "workflows.several.steps[1].steps[0].text" in fields
    assert "workflows.several.steps[1].steps[0].required" in fields
    assert fields["workflows.several.steps[2].pending_action[0].when"] == 29
    assert all(e["file"] == "shop.yaml" for e in exc.value.errors)


def test_the_second_shops_workflows_load_without_a_gateway():
    from flow_testkit import SECOND_SHOP

    ws = load_workflows(SECOND_SHOP / "workflows.yaml")
    assert {"return_and_exchange", "change_pending_items", "change_order_address"} <= set(ws.names())
    assert ws["return_and_exchange"].vocabulary["size"]["M"][0] == "medium"
