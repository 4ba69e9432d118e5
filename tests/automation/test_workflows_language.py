"""The workflow language as a deployer writes it: requests split with option lists, addresses and either word
order; unset slots read as null; `match` as one expression, `end` with its reply, YAML scalars where text is
expected; `choose` with an evidence floor, an empty optional choice and asking again; one address model
mapped to a shop's fields; `cel.bind`; a CEL error that ends the flow truthfully."""

from __future__ import annotations

import pytest

from automation.tools.base import Caller
from automation.workflows import requests as R
from automation.workflows import store
from automation.workflows import understand as U
from automation.workflows.engine import FlowEngine
from automation.workflows.expr import ExpressionError, Scope, evaluate, roots
from automation.workflows.spec import WorkflowConfigError, parse_workflows
from automation.workflows.steps.choose import FROM_TEXT_FLOOR
from text.address import parse as parse_address

ANN = Caller(channel="web", customer_id="cus_ann", conversation_id="conv-ann-lang")

KINDS = {"return": ["return", "send back", "退掉", "退"], "exchange": ["swap", "exchange", "换"],
         "address": ["ship it to", "send it to", "寄到"]}


def _split(text: str) -> list[tuple[str, str, str, str | None]]:
    return [(r["kind"], r["item"], r["change"], r["order"]) for r in R.split(text, KINDS)]


# ------------------------------------------------------------------ 1. split

@pytest.mark.parametrize("text, expected", [
    # an option list is one request with several options
    ("swap the jacket for a large, blue, waterproof one",
     [("exchange", "the jacket", "a large, blue, waterproof one", None)]),
    ("把外套换成大号，蓝色，防水的", [("exchange", "外套", "大号, 蓝色, 防水的", None)]),
    # ... and the request after it is still its own
    ("swap the jacket for a large, blue, waterproof one and return the hose",
     [("exchange", "the jacket", "a large, blue, waterproof one", None), ("return", "the hose", "the hose", None)]),
    # an item named with an article is another request of the same kind
    ("return the hose and the lamp", [("return", "the hose", "the hose", None), ("return", "the lamp", "the lamp", None)]),
    ("swap the jacket for large and the boots for medium",
     [("exchange", "the jacket", "large", None), ("exchange", "the boots", "medium", None)]),
    # an address is one request, whatever its commas
    ("ship it to 77 Harbor Road, Suite 12, Portland, OR 97201",
     [("address", "77 Harbor Road, Suite 12, Portland, OR 97201", "77 Harbor Road, Suite 12, Portland, OR 97201", None)]),
    # the item before the kind word, in either order
    ("the jacket I want to exchange for a large", [("exchange", "the jacket", "a large", None)]),
    ("the jacket, I want to exchange it for a large", [("exchange", "the jacket", "a large", None)]),
    ("退掉水管，把靴子换成防水的", [("return", "水管", "水管", None), ("exchange", "靴子", "防水", None)]),
    # a leading order id is kept, for every request after it
    ("W1001: swap the jacket for a large", [("exchange", "the jacket", "a large", "W1001")]),
    ("For order W1001, swap the jacket for a large and return the lamp",
     [("exchange", "the jacket", "a large", "W1001"), ("return", "the lamp", "the lamp", "W1001")]),
    ("W1001 的外套换成大号", [("exchange", "外套", "大号", "W1001")]),
    # the target before the item: "change the size to large for my jacket"
    ("swap the size to large for my jacket", [("exchange", "my jacket", "the size large", None)]),
    ("exchange the boots to size 12 for W1003", [("exchange", "the boots", "size 12", "W1003")]),
])
def test_split_keeps_option_lists_addresses_and_either_word_order(text, expected):
    assert _split(text) == expected


# ------------------------------------------------------------------ 2, 3, 6: the language's shapes

FLOW = """\
address:
  fields: {line1: address1, line2: address2, city: city, state: province, zip: zip, country: country}
  defaults: {country: US}
workflows:
  notes:
    slots:
      note: {prompt: {zh: "备注？", en: "A note?"}}
      size: {validate: {enum: [S, M, L]}, prompt: {zh: "尺码？", en: "Which size?"}}
    steps:
      - {id: unset_is_null, check: "slots.note == null && slots.size == null", refuse: "unset slots are not null"}
      - id: pick
        choose: size
        options: "['S', 'M', 'L']"
        label: "{{ option }}"
        match: "option == 'L' ? ['large', 'big'] : []"
        ask_again: true
        prompt: {zh: "哪个尺码？", en: "Which size?"}
      - id: words
        set:
          parts: "cel.bind(p, 'a, b, c'.split(', '), size(p) > 1 ? p[1] : p[0])"
          home: "parse_address('18 Oak Lane, Apt 5, San Jose, CA 95112, USA')"
        next: [{when: "slots.size == 'S'", goto: pick}]
      - {id: done, end: completed, reply: "{{ slots.size }} {{ slots.parts }} {{ slots.home.address1 }} {{ slots.home.province }}"}
"""


def test_unset_slots_read_null_match_is_one_expression_bind_and_end_reply(turn, approvals, db):
    engine = FlowEngine(parse_workflows(FLOW, file="notes.yaml"), None, approvals)
    t = turn(engine.start, "notes", ANN, "", {}, "en")
    assert (t.status, t.step) == ("waiting", "pick")
    t = turn(engine.advance, t.instance_id, ANN, "the small one, S", {}, "en")
    # ask_again: going back to the choice asks it anew although its slot is set
    assert (t.status, t.step) == ("waiting", "pick")
    t = turn(engine.advance, t.instance_id, ANN, "a big one", {}, "en")   # `match` given as one CEL string
    assert (t.status, t.reply) == ("completed", "L b 18 Oak Lane CA")
    with db() as conn:
        inst = store.get(conn, t.instance_id)
    assert inst["slots"]["home"] == {"address1": "18 Oak Lane", "address2": "Apt 5", "city": "San Jose",
                                     "province": "CA", "zip": "95112", "country": "US"}


def test_cel_bind_names_a_value_once():
    scope = Scope({"slots": {"a": "x, y"}})
    assert evaluate("cel.bind(p, slots.a.split(', '), p[size(p) - 1] + p[0])", scope) == "yx"
    assert evaluate("cel.bind(p, [1, 2], cel.bind(q, size(p), q * 10))", scope) == 20
    assert roots("cel.bind(p, slots.a, p)") == ({"slots"}, {"a"})     # the bound name is no unknown name
    assert evaluate("'cel.bind(x' + slots.a", scope) == "cel.bind(xx, y"   # text is never rewritten
    # an escaped quote does not end the text: what follows it is still text, never rewritten
    assert evaluate("'it\\'s cel.bind(p, 1, p)' + slots.a", scope) == "it's cel.bind(p, 1, p)x, y"
    with pytest.raises(ExpressionError, match="cel.bind takes"):
        evaluate("cel.bind(p, 1)", scope)


@pytest.mark.parametrize("source", ["'a'.split(', ')[1]", "{'a': 1}['b']", "[1][3]", "1 / 0"])
def test_every_cel_failure_is_an_expression_error(source):
    with pytest.raises(ExpressionError):
        evaluate(source, Scope({}))


@pytest.mark.parametrize("old, new, field, message", [
    ('refuse: "unset slots are not null"', "refuse: yes", "workflows.notes.steps[0].refuse",
     "expected text, but YAML read a boolean here: quote it"),
    ('prompt: {zh: "哪个尺码？", en: "Which size?"}', "prompt: 2", "workflows.notes.steps[1].prompt",
     "expected text, but YAML read a number here: quote it"),
    ('prompt: {zh: "哪个尺码？", en: "Which size?"}', "prompt: {zh: 是, en: no}", "workflows.notes.steps[1].prompt.en",
     "expected text, but YAML read a boolean here: quote it"),
    ("match: \"option == 'L' ? ['large', 'big'] : []\"", "match: 3", "workflows.notes.steps[1].match",
     "expected a CEL expression over 'option' or a list of them"),
    ("ask_again: true", "ask_again: maybe", "workflows.notes.steps[1].ask_again", "ask_again is true or false"),
    ("ask_again: true", "ask_again: true\n        reset: [[size]]", "workflows.notes.steps[1].reset[0]",
     "unknown slot ['size'] (declared: home, note, parts, size)"),
    ("defaults: {country: US}", "defaults: {country: 1}", "address.defaults.country",
     "expected text (quote it: YAML reads yes, no, on and digits as other types)"),
    ("line1: address1,", "street: address1,", "address.fields.street",
     "unknown address field 'street' (line1, line2, district, city, state, zip, country)"),
])
def test_yaml_scalars_where_text_is_expected_are_clear_load_errors(old, new, field, message):
    assert old in FLOW
    with pytest.raises(WorkflowConfigError) as exc:
        parse_workflows(FLOW.replace(old, new), file="notes.yaml")
    assert (field, message) in [(e["field"], e["message"]) for e in exc.value.errors]
    assert all(e["file"] == "notes.yaml" and e["line"] for e in exc.value.errors)


# ------------------------------------------------------------------ 4. choose with a floor

REASONS = (["no_longer_needed", "ordered_by_mistake"], [["no longer needed"], ["ordered by mistake"]])
ITEMS = (["L1", "L2", "L3"], [["Smartphone (color: silver, storage: 512GB)", "Smartphone"],
                              ["Wireless Earbuds (color: black)", "Wireless Earbuds"],
                              ["Garden Hose (length: 50ft)", "Garden Hose", "水管"]])
ORDERS = (["W1001", "W1002", "W1003"], [["W1001: Smartphone, Garden Hose", "Smartphone", "Garden Hose"],
                                        ["W1002: Hiking Boots", "Hiking Boots", "靴子"],
                                        ["W1003: Desk Lamp, Kettle", "Desk Lamp", "Kettle"]])
ZH_ORDERS = (["100236", "100235", "100234", "100230"], [["帆布托特包"], ["陶瓷马克杯"], ["降噪蓝牙耳机", "耳机保护套"],
                                                       ["西湖龙井 250g"]])
WEAK = [(ZH_ORDERS, "不是耳机"), (ZH_ORDERS, "我不确定是哪个"), (REASONS, "I want to cancel all my pending orders"), (REASONS, "I want to cancel the order"),
        (REASONS, "just cancel it"), (ORDERS, "I'm not sure, can you look it up?"),
        (ORDERS, "I don't remember which order"), (ORDERS, "the one I ordered last week"), (ORDERS, "my order"),
        (ORDERS, "the order with the jacket"), (ORDERS, "我不确定，你能帮我查一下吗？"), (ORDERS, "订单"),
        (ITEMS, "Laptop (screen: 15-inch, color: silver, storage: 512GB)"), (ITEMS, "silver laptop"),
        (ITEMS, "Laptop"), (ITEMS, "the tablet"), (ITEMS, "笔记本电脑（银色，512GB）"), (ITEMS, "平板电脑"),
        (ORDERS, "退掉水管")]
STRONG = [(ORDERS, "the hiking boots", 1), (ORDERS, "the one with the kettle", 2), (ORDERS, "那个靴子的订单", 1),
          (ORDERS, "the lamp and kettle order", 2), (ORDERS, "第二个", 1), (ORDERS, "W1003", 2),
          (ORDERS, "the last one", 2), (ITEMS, "the phone", 0), (ITEMS, "the earbuds", 1), (ITEMS, "水管", 2),
          (ITEMS, "wireless earbuds in black", 1), (ITEMS, "the black one", 1), (ITEMS, "the hose", 2),
          (REASONS, "I ordered it by mistake", 1), (REASONS, "no longer needed", 0),
          (ZH_ORDERS, "耳机那个", 2), (ZH_ORDERS, "那个耳机", 2), (ZH_ORDERS, "耳机的那个订单", 2),
          (ZH_ORDERS, "马克杯", 1), (ORDERS, "the boots one", 1)]


def test_choose_never_picks_on_weak_evidence_and_still_picks_on_strong():
    wrong = [(text, U.choose(text, *opts)) for opts, text in WEAK if U.choose(text, *opts).index is not None]
    assert wrong == []                                                     # 0 wrong picks
    assert [(text, U.choose(text, *opts).index) for opts, text, _ in STRONG] == \
        [(text, want) for _, text, want in STRONG]


PICK = """\
workflows:
  pick:
    slots:
      line: {prompt: {zh: "哪一件？", en: "Which item?"}}
      extra: {prompt: {zh: "还有吗？", en: "Anything else?"}}
    steps:
      - id: nothing_else
        choose: extra
        options: "[]"
        label: "{{ option }}"
        required: false
        prompt: "?"
      - id: pick_line
        choose: line
        options: "['Smartphone (silver, 512GB)', 'Wireless Earbuds (black)']"
        label: "{{ option }}"
        required: false
        prompt: {zh: "是哪一件？", en: "Which item is it?"}
      - {id: done, end: completed, reply: "{{ slots.extra == null ? 'no extra' : 'extra' }}, {{ slots.line == null ? 'none' : slots.line }}"}
"""


@pytest.mark.parametrize("answers, reply", [
    (["Laptop (silver, 512GB)", "the earbuds"], "no extra, Wireless Earbuds (black)"),
    (["I'm not sure, can you look it up?", "none of these"], "no extra, none"),
    (["都不是"], "no extra, none"),
])
def test_an_answer_naming_no_option_is_asked_again_and_none_of_these_is_null(turn, approvals, answers, reply):
    engine = FlowEngine(parse_workflows(PICK, file="pick.yaml"), None, approvals)
    t = turn(engine.start, "pick", ANN, "", {}, "en")
    assert (t.status, t.step) == ("waiting", "pick_line")     # the empty optional choice gave null
    assert "None of these" in t.quick_replies
    for said in answers[:-1]:
        t = turn(engine.advance, t.instance_id, ANN, said, {}, "en")
        assert (t.status, t.step) == ("waiting", "pick_line"), said   # re-asked, never a guess
    t = turn(engine.advance, t.instance_id, ANN, answers[-1], {}, "en")
    assert (t.status, t.reply) == ("completed", reply)


# ------------------------------------------------------------------ 5. addresses

@pytest.mark.parametrize("text, parts", [
    ("18 Oak Lane, Apt 5, San Jose, CA 95112, USA",
     {"line1": "18 Oak Lane", "line2": "Apt 5", "city": "San Jose", "state": "CA", "zip": "95112", "country": "US"}),
    ("San Jose, California 95112", {"city": "San Jose", "state": "CA", "zip": "95112"}),
    ("77 Harbor Road, Suite 12, Portland, OR 97201",
     {"line1": "77 Harbor Road", "line2": "Suite 12", "city": "Portland", "state": "OR", "zip": "97201"}),
    ("北京市朝阳区建国路88号SOHO现代城A座1203",
     {"state": "北京市", "city": "北京市", "district": "朝阳区", "line1": "建国路88号", "line2": "SOHO现代城A座1203"}),
    ("浙江省杭州市西湖区文三路90号东部软件园3号楼501室",
     {"state": "浙江省", "city": "杭州市", "district": "西湖区", "line1": "文三路90号", "line2": "东部软件园3号楼501室"}),
    ("新疆维吾尔自治区乌鲁木齐市天山区解放北路1号 邮编830000",
     {"state": "新疆维吾尔自治区", "city": "乌鲁木齐市", "district": "天山区", "line1": "解放北路1号", "zip": "830000"}),
    ("浙江省杭州市西湖区文三路90号501室，邮编是310012",
     {"state": "浙江省", "city": "杭州市", "district": "西湖区", "line1": "文三路90号", "line2": "501室", "zip": "310012"}),
    ("the blue one", {}), ("我不知道", {}),
])
def test_one_line_addresses_parse_in_english_and_chinese(text, parts):
    assert parse_address(text) == parts


SHOP = {"fields": {"line1": "address1", "line2": "address2", "city": "city", "state": "state", "zip": "zip",
                   "country": "country"}, "defaults": {"country": "US"}}
BASE = {"address1": "5 Elm St", "address2": "Apt 2", "city": "Boston", "state": "MA", "zip": "02110", "country": "US"}


@pytest.mark.parametrize("text, changed", [
    ("Suite 641, otherwise the same", {"address2": "Suite 641"}),
    ("zip code 02111", {"zip": "02111"}),
    ("San Jose, California 95112", {"city": "San Jose", "state": "CA", "zip": "95112"}),
    ("please ship it to 18 Oak Lane, San Jose, CA 95112",
     {"address1": "18 Oak Lane", "address2": "", "city": "San Jose", "state": "CA", "zip": "95112"}),
    ("地址改成北京市朝阳区建国路88号SOHO现代城A座1203",
     {"address1": "朝阳区建国路88号", "address2": "SOHO现代城A座1203", "city": "北京市", "state": "北京市", "zip": ""}),
    ("use my default address", None),
])
def test_an_address_edit_works_in_the_shops_own_fields(text, changed):
    token = R.ADDRESS.set(SHOP)
    try:
        got = R.address_edit(text, BASE)
    finally:
        R.ADDRESS.reset(token)
    assert got == (None if changed is None else {**BASE, **changed})


# ------------------------------------------------------------------ 7. a CEL error ends the flow truthfully

BROKEN = """\
workflows:
  broken:
    slots: {street: {}}
    steps:
      - {id: said, reply: {zh: "正在处理。", en: "Working on it."}}
      - {id: cut, set: {street: "'18 Oak Lane'.split(', ')[1]"}}
      - {id: done, end: completed, reply: {zh: "已完成。", en: "Done: your address is changed."}}
"""


def test_a_cel_error_escalates_plainly_and_claims_no_success(turn, approvals, db):
    engine = FlowEngine(parse_workflows(BROKEN, file="broken.yaml"), None, approvals)
    t = turn(engine.start, "broken", ANN, "", {}, "en")
    assert t.status == "escalated" and t.handoff is not None
    assert "went wrong" in t.reply and "Done" not in t.reply
    assert "index out of bounds" in t.handoff.reason


# ------------------------------------------------------------------ 8. words said before the question (`text:`)

SAID = """\
workflows:
  said:
    slots:
      line: {}
    steps:
      - id: pick_line
        choose: line
        options: "['Garden Hose (green)', 'Rain Boots (black)', 'Desk Lamp (brass)']"
        label: "{{ option }}"
        text: message
        prompt: {zh: "是哪一件？", en: "Which item is it?"}
      - {id: done, end: completed, reply: "{{ slots.line }}"}
"""


def _meaning(text: str, docs: list[str]) -> list[float]:
    """A similarity that finds the hose in anything about watering: what an encoder might say, with no word to show."""
    return [0.95 if "Hose" in d and "water" in text else 0.1 for d in docs]


@pytest.mark.parametrize("said, reply", [
    ("return the hose please, and refund it to my gift card", "Garden Hose (green)"),   # the rest names nothing here
    ("I bought it in brass, the one for my desk", "Desk Lamp (brass)"),
    ("return the hose and the boots", None),          # two options named: asked, never the one named first
    ("the green boots", None),                        # half of it describes another option
    ("the green garden hose with the black boots", None),   # two things named: asked, not the one with more words
    ("the thing I water the plants with", None),      # meaning alone, no word of an option: asked
])
def test_words_said_before_the_question_are_held_to_the_evidence_floor(turn, approvals, said, reply):
    engine = FlowEngine(parse_workflows(SAID, file="said.yaml"), None, approvals, similarity=_meaning)
    t = turn(engine.start, "said", ANN, said, {}, "en")
    if reply is None:
        assert (t.status, t.step) == ("waiting", "pick_line"), t.reply
    else:
        assert (t.status, t.reply) == ("completed", reply)


# ------------------------------------------------------------------ 9. a correction of a pick, later

PICKED = """\
workflows:
  pick:
    slots:
      item: {}
    steps:
      - id: pick_item
        select: item
        one: true
        options: >-
          [{'id': 'A1', 'names': ['Laptop', '笔记本'], 'colour': 'silver', 'zh': '银色'},
           {'id': 'B2', 'names': ['Laptop', '笔记本'], 'colour': 'space grey', 'zh': '深空灰'},
           {'id': 'C3', 'names': ['Mug', '杯子'], 'colour': 'white', 'zh': '白色'}]
        label: "{{ option.id }}: {{ option.names[0] }} ({{ option.colour }})"
        option_id: option.id
        match: ["option.names", "option.colour", "option.zh"]
        prompt: {zh: "哪一件？", en: "Which one?"}
      - id: sure
        confirm: {zh: "确认退 {{ slots.item.id }}？", en: "Return {{ slots.item.id }}?"}
      - {id: done, end: completed, reply: "returned {{ slots.item.id }}"}
"""


@pytest.mark.parametrize("turns, status, reply", [
    (["return the laptop", "the silver one", "no, the other one", "yes"], "completed", "returned B2"),
    (["退笔记本", "第一个", "不对，是另一台", "确认"], "completed", "returned B2"),
    (["return the laptop", "1", "actually the space grey one", "yes"], "completed", "returned B2"),
    (["return the laptop", "2", "sorry, I meant the silver one", "yes"], "completed", "returned A1"),
    # the customer's own words named the mug: "the other one" is no re-pick, the "no" declines
    (["return the white mug", "no, the other one"], "cancelled", None),
])
def test_a_correction_picks_again_from_what_was_in_question(turn, approvals, turns, status, reply):
    engine = FlowEngine(parse_workflows(PICKED, file="picked.yaml"), None, approvals)
    lang = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in turns[0]) else "en"
    t = turn(engine.start, "pick", ANN, turns[0], {}, lang)
    for said in turns[1:]:
        assert t.status == "waiting", t.reply
        t = turn(engine.advance, t.instance_id, ANN, said, {}, lang)
    assert t.status == status, t.reply
    if reply is not None:
        assert t.reply == reply


@pytest.mark.parametrize("text, tells", [
    ("it arrived broken", True), ("it's broken", True), ("the screen is cracked", True), ("锅的涂层掉了", True),
    ("坏了", True), ("因为质量问题", True),
    ("hmm", False), ("dunno", False), ("because", False), ("不知道", False), ("嗯", False), ("I am not sure", False),
    ("is it broken?", False), ("what is the refund policy", False), ("退货政策是什么", False), ("", False),
    ("ok then go ahead", False), ("好的，继续吧", False), ("yes please do it", False), ("ok thanks", False),
    ("ok but the box was damaged", True), ("是的，屏幕碎了", True)])
def test_something_told_at_a_question_is_told_from_fillers_and_questions(text, tells):
    assert U.tells_something(text) is tells


@pytest.mark.parametrize("text, consents", [
    ("ok then go ahead", True), ("go ahead", True), ("好的，继续吧", True), ("继续吧", True), ("sure", True),
    ("ok thanks", True), ("ok but the box was damaged", False), ("是的，屏幕碎了", False), ("50", False),
    ("可以退一半吗", False), ("it arrived broken", False), ("", False)])
def test_a_mere_go_on_is_told_from_what_comes_with_it(text, consents):
    assert U.only_consents(text) is consents


ORDERS = (["100243", "100242", "100241", "100240"],
          [["Electric kettle", "cancelled"], ["Garden hose 25 ft", "paid (not shipped yet)"],
           ["Leather boots, size 12", "shipped"], ["Desk lamp, LED bulb", "delivered"]])


@pytest.mark.parametrize("said, picked", [
    # words that describe no order ("not", "yet", "haven't") never tie another order with the one named
    ("hey, my boots haven't shown up yet", 2),
    ("my boots have not arrived yet", 2),
    ("the lamp", 3),
    ("the shipped one", 2),
    # a status said after a negation is denied, not named: both orders not yet delivered are asked among
    ("the one not shipped yet", None),
    ("the one that hasn't shipped", None),
])
def test_an_order_named_beside_words_that_describe_none_is_the_one_picked(said, picked):
    choice = U.choose(said, *ORDERS, head=False, relevant=True, floor=FROM_TEXT_FLOOR)   # as a request says it
    assert choice.index == picked, choice
    if picked is None:
        assert choice.candidates == [1, 2], choice
