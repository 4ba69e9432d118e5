"""The ``select`` step and ``records``: sets and single records picked by description, never by a guess.

References by properties over the third shop's own records ("the order with three items", "the order with
the kettle and the lamp", "everything for the kitchen", "my Boston address, the one on my other order"),
multi-select across orders ("the laptops I received", "everything except the tablet"), soft wants
("polyester if possible", "black if there are several colours") and relative targets over a declared
order ("one size smaller", "大一号"). The whole flow runs in ``test_third_shop.py``.
"""

from __future__ import annotations

import json

import pytest

from automation.workflows import records as RC
from automation.workflows import requests as R
from automation.workflows.model import WorkflowConfigError
from automation.workflows.spec import parse_workflows
from third_shop_kit import THIRD_SHOP

DATA = json.loads((THIRD_SHOP / "data.json").read_text(encoding="utf-8"))
WORDS = {"Electric Kettle": ["kettle", "水壶"], "Desk Lamp": ["lamp", "台灯"], "Laptop": ["笔记本电脑", "笔记本"],
         "Tablet": ["平板"], "T-Shirt": ["t-shirt", "T恤"], "Coffee Mug": ["mug", "杯子"], "Frying Pan": ["pan"],
         "Wireless Earbuds": ["earbuds"], "Rain Jacket": ["jacket"]}
NOUNS = [w for k, ws in WORDS.items() for w in [k, *ws]]


def _orders(customer, *statuses):
    return [o for o in DATA["orders"] if o["customer_id"] == customer and o["status"] in statuses]


def _order_rows(orders):
    ids = [o["order_id"] for o in orders]
    texts = [[o["order_id"]] + [w for i in o["items"] for w in [i["name"], i["category"], *WORDS.get(i["name"], [])]]
             for o in orders]
    return ids, texts, [len(o["items"]) for o in orders]


def _item_rows(orders):
    items = [dict(i, order_id=o["order_id"]) for o in orders for i in o["items"]]
    return ([i["item_id"] for i in items],
            [[i["order_id"], i["name"], i["category"], *WORDS.get(i["name"], []), *i["options"].values()] for i in items],
            items)


def _pick(text, rows, **kw):
    ids, texts = rows[0], rows[1]
    p = RC.resolve(text, ids, texts, nouns=NOUNS, **kw)
    return [ids[i] for i in p.chosen], [ids[i] for i in p.candidates], p.how


@pytest.mark.parametrize("text, chosen", [
    ("cancel the order with the kettle and the lamp", ["H2002"]),       # both in one order: that order
    ("取消有水壶和台灯的那个订单", ["H2002"]),
    ("cancel the order with one item", ["H2004"]),                        # a count of its items
    ("cancel all my pending orders", ["H2001", "H2002", "H2004"]),
    ("cancel all my pending orders except the kettle", ["H2001", "H2004"]),
    ("cancel all my T-shirt orders", ["H2001", "H2004"]),                 # "all": every order that has one
])
def test_orders_are_referred_to_by_their_properties(text, chosen):
    ids, texts, counts = _order_rows(_orders("cus_mia", "pending"))
    assert _pick(text, (ids, texts), counts=counts)[0] == chosen


def test_a_description_that_fits_several_is_asked_never_guessed():
    ids, texts, counts = _order_rows(_orders("cus_mia", "pending"))
    assert _pick("cancel the order with two items", (ids, texts), counts=counts) == ([], ["H2001", "H2002"], "ambiguous")
    assert _pick("cancel my T-shirt order", (ids, texts), counts=counts)[1:] == (["H2001", "H2004"], "ambiguous")
    # a shop noun no record has ("the lamp order" when no pending order has a lamp) names something absent
    ids, texts, counts = _order_rows(_orders("cus_ava", "pending"))
    assert _pick("cancel the lamp order", (ids, texts), counts=counts) == ([], ["H2401"], "absent")
    ids, texts, counts = _order_rows(_orders("cus_mia", "pending"))
    assert _pick("cancel the order with the kettle and the laptop", (ids, texts), counts=counts)[2] == "absent"
    ids, texts, counts = _order_rows(_orders("cus_ava", "pending"))
    # an order number that is not among them is absent too, never another order
    assert _pick("cancel H2403", (ids, texts))[2] == "absent"
    # nothing stated: nothing chosen (a single record may then be taken by auto_single)
    assert _pick("cancel my pending order", (ids, texts)) == ([], ["H2401"], "none")


def test_items_are_picked_across_orders_and_with_exceptions():
    rows = _item_rows(_orders("cus_leo", "delivered"))
    assert _pick("I want to return the laptops I received", rows)[0] == ["H2101-1", "H2102-1"]
    assert _pick("我收到的两台笔记本电脑都要退", rows)[0] == ["H2101-1", "H2102-1"]
    assert _pick("return everything except the tablet", rows)[0] == ["H2101-1", "H2101-2", "H2102-1"]
    assert _pick("please return the tablet and the earbuds", rows)[0] == ["H2101-2", "H2102-2"]
    assert _pick("return the laptop", rows)[1:] == (["H2101-1", "H2102-1"], "ambiguous")
    assert _pick("the silver one", rows, among=[0, 2])[0] == ["H2101-1"]
    assert _pick("return the electronics items", rows)[0] == ["H2101-1", "H2101-2", "H2102-1", "H2102-2"]
    rows = _item_rows(_orders("cus_mia", "delivered"))
    assert _pick("return everything for the kitchen from my delivered order", rows)[0] == ["H2003-2", "H2003-3"]
    assert _pick("H2003除了杯子都退了", rows)[0] == ["H2003-1", "H2003-3"]


def test_an_address_on_another_order_is_referred_to_by_its_city_and_where_it_is():
    options = [{"label": "home", "city": "Chicago", "from": "profile"},
               {"label": "H2402", "city": "Boston", "from": "order"}, {"label": "gym", "city": "Boston", "from": "profile"}]
    texts = [[o["label"], o["city"]] + (["other order", "另一个订单"] if o["from"] == "order" else []) for o in options]
    ids = [o["label"] for o in options]
    said = "change the address of my pending order to my Boston address, the one on my other order"
    assert _pick(said, (ids, texts), one=True, by_id=False)[0] == ["H2402"]
    assert _pick("send it to Boston", (ids, texts), one=True, by_id=False)[1:] == (["H2402", "gym"], "ambiguous")


def test_answers_to_a_numbered_list():
    assert RC.picked_numbers("1 and 3", 3) == [0, 2]
    assert RC.picked_numbers("第一个和第三个", 3) == [0, 2]
    assert RC.picked_numbers("the second", 3) == [1]
    assert RC.picked_numbers("5", 3) == []            # outside the list: never another record
    assert RC.picked_numbers("the silver one", 3) is None
    assert RC.says_all("both") and RC.says_all("两个都取消") and RC.says_none("neither")


JACKET = next(p for p in DATA["products"] if p["product_id"] == "p_jacket")
SIZES = {"size": {"values": ["XS", "S", "M", "L", "XL"], "words": ["size", "号", "码"]}}
VOCAB = {"colour": {"black": ["黑色"], "red": ["红色"]}, "material": {"polyester": ["聚酯纤维"]}, "size": {"L": ["large"]}}


def _variant(text, current, prefer=None):
    opts = [v for v in JACKET["variants"] if v["available"] and v["options"] != current]
    bonus = [RC.PREFER_WEIGHT if prefer(v) else 0.0 for v in opts] if prefer else None
    pick, wants = RC.variant_pick(text, [v["options"] for v in opts], current, SIZES, VOCAB, bonus)
    return [opts[i]["variant_id"] for i in pick.chosen], pick.how, wants


BLUE_L = {"size": "L", "colour": "blue", "material": "nylon"}


@pytest.mark.parametrize("text, variant", [
    ("exchange the jacket for one size smaller", "v_jacket_m_blue_nylon"),          # relative, the rest kept
    ("H2003的夹克换小一号", "v_jacket_m_blue_nylon"),
    ("two sizes smaller please", "v_jacket_s_blue_nylon"),
    ("swap it for a black one", "v_jacket_l_black_nylon"),                          # hard want, the rest kept
    ("a green one, polyester if possible", "v_jacket_l_green_polyester"),           # soft want honoured
    ("夹克换成黑色的，最好是聚酯纤维", "v_jacket_l_black_polyester"),
    ("exchange the blue jacket for a black one", "v_jacket_l_black_nylon"),         # the current colour describes it
    ("exchange the jacket, black if there are several colours", "v_jacket_l_black_nylon"),
])
def test_variants_by_hard_and_soft_wants_and_relative_sizes(text, variant):
    assert _variant(text, BLUE_L)[0] == [variant]


def test_a_soft_want_gives_way_and_a_hard_one_does_not():
    # M green nylon is out of stock: "green, nylon if possible" takes the polyester one
    chosen, how, wants = _variant("green, nylon if possible, one size smaller", BLUE_L)
    assert wants.soft == {"material": "nylon"} and wants.shift == {"size": -1}
    assert chosen == ["v_jacket_m_green_polyester"] and how == "traits"
    # a hard want nothing has, or a size past the end of the order: nothing, never the closest
    assert _variant("in green nylon, one size smaller", BLUE_L)[:2] == ([], "absent")
    assert _variant("one size bigger", {"size": "XL", "colour": "blue", "material": "nylon"})[:2] == ([], "absent")
    # a colour the shop knows but this jacket never comes in: nothing fits, never another colour
    assert _variant("exchange the jacket for a red one", BLUE_L)[:2] == ([], "absent")
    assert _variant("把夹克换成红色", BLUE_L)[:2] == ([], "absent")
    # a want the item already has changes nothing: never another variant instead
    assert _variant("the blue one please", BLUE_L)[:2] == ([], "absent")
    # nothing wanted: asked among all
    assert _variant("I want to exchange it", BLUE_L)[:2] == ([], "none")


def test_the_shops_prefer_breaks_ties_below_what_the_customer_said():
    # "in polyester": L blue polyester keeps two options; the shop's prefer never outweighs a kept option
    assert _variant("in polyester", BLUE_L, prefer=lambda v: v["options"]["colour"] == "green")[0] == \
        ["v_jacket_l_blue_polyester"]
    # two equally good (M blue nylon, M blue polyester: each keeps the colour): asked, unless the shop prefers one
    wool = {"size": "L", "colour": "blue", "material": "wool"}
    assert _variant("one size smaller", wool)[1] == "ambiguous"
    assert _variant("one size smaller", wool, prefer=lambda v: v["options"]["material"] == "polyester")[0] == \
        ["v_jacket_m_blue_polyester"]


# the customer's other records a relative target may name: each its phrases and its options
OTHERS = [{"names": ["Rain Jacket", "jacket", "H2303", "received"], "options": {"size": "M", "colour": "black", "material": "nylon"}},
          {"names": ["Rain Jacket", "jacket", "H3017", "received"], "options": {"size": "L", "colour": "green", "material": "nylon"}},
          {"names": ["Coffee Mug", "mug", "H2003", "received"], "options": {"colour": "white", "material": "ceramic"}}]


@pytest.mark.parametrize("text, variant", [
    ("the same colour as my jacket from H2303", "v_jacket_l_black_nylon"),          # one axis, the rest kept
    ("make it like the jacket in H3017", "v_jacket_l_green_nylon"),                 # every axis of that record
    ("颜色跟H2303那件一样", "v_jacket_l_black_nylon"),
    ("换成和H2303的夹克一样的", "v_jacket_m_black_nylon"),
    ("the same size as the other jacket, in black", None),                          # two other jackets: asked
    ("exchange it for the same colour as my mug", None),                            # the mug's white: no such jacket
])
def test_a_relative_target_over_another_record(text, variant):
    opts = [v for v in JACKET["variants"] if v["available"] and v["options"] != BLUE_L]
    pick, _ = RC.variant_pick(text, [v["options"] for v in opts], BLUE_L, SIZES, VOCAB, None, OTHERS)
    assert [opts[i]["variant_id"] for i in pick.chosen] == ([variant] if variant else [])
    # no reference at all: the words are read as before
    assert RC.like_target("a black one please", OTHERS, ["size", "colour", "material"], SIZES)[0] == {}


def test_the_other_one_is_a_record_of_the_same_kind():
    others = OTHERS[1:]
    fixed, ref, rest = RC.like_target("把夹克换成和另一件一样的", others, ["size", "colour", "material"], SIZES)
    assert fixed == {"size": "L", "colour": "green", "material": "nylon"} and ref == "另一件"
    assert RC.like_target("the same as the ones I received", others, ["size", "colour", "material"], SIZES)[0] == \
        {"size": "L", "colour": "green", "material": "nylon"}    # every received record, narrowed to jackets
    # "I'd like ..." is a wish, not a reference
    assert RC.like_target("I'd like the black one", others, ["colour"], SIZES)[0] == {}


def test_the_target_before_the_item_in_either_language():
    token = R.VOCABULARY.set({"title": {"Wireless Earbuds": ["earbuds", "耳机"], "Laptop": ["laptop", "笔记本"],
                                        "Rain Jacket": ["jacket", "外套"]},
                              "colour": {"black": ["黑色"]}, "size": {"L": ["large", "大号"]}})
    try:
        assert RC.item_part("I want the 512GB version of my laptop") == "my laptop"
        assert RC.item_part("我的笔记本换成512G版本的") == "我的笔记本"
        assert RC.item_part("我要换黑色的，订单H2101里的耳机") == "订单H2101里的耳机"
        assert RC.item_part("想要大号的，把H2003的外套换一下") == "把H2003的外套"
        kinds = {"exchange": ["exchange", "换"], "return": ["return", "退"]}
        got = [(r["kind"], r["item"], r["change"], r["order"]) for text in (
            "把订单100234的耳机换成黑色的", "我要换黑色的，订单100234里的耳机", "想要大号的，把100234的外套换一下",
            "黑色的耳机换一副，订单100234", "把100234里的耳机换黑色") for r in R.split(text, kinds)]
        assert got == [("exchange", "耳机", "黑色", "100234"), ("exchange", "耳机", "黑色", "100234"),
                       ("exchange", "外套", "大号的", "100234"), ("exchange", "黑色的耳机", "黑色的耳机", "100234"),
                       ("exchange", "耳机", "黑色", "100234")]
    finally:
        R.VOCABULARY.reset(token)


def test_cel_helpers_for_several_orders():
    assert RC.group_by([{"order_id": "A", "n": 1}, {"order_id": "B", "n": 2}, {"order_id": "A", "n": 3}], "order_id") == [
        {"key": "A", "items": [{"order_id": "A", "n": 1}, {"order_id": "A", "n": 3}]},
        {"key": "B", "items": [{"order_id": "B", "n": 2}]}]
    assert RC.distinct([1, 2, 1, 3]) == [1, 2, 3]
    assert RC.item_part("change the black T-shirt to white") == "change the black T-shirt"
    assert RC.item_part("水壶换成红色的") == "水壶"
    assert RC.item_part("make all my T-shirts one size bigger") == "make all my T-shirts one size bigger"
    token = R.VOCABULARY.set({"title": {"T-Shirt": ["t-shirt"], "Rain Jacket": ["jacket"]}, "colour": {"black": []},
                              "size": {"L": ["large"]}})
    try:   # with the shop's words: the change after the item's noun, with or without a marker
        assert RC.item_part("make the T-shirt black") == "make the T-shirt"
        assert RC.item_part("I want to exchange my jacket, black if there are several colours") == \
            "I want to exchange my jacket"
        assert RC.item_part("the T-shirt in H2401 to size L") == "the T-shirt in H2401"
        assert RC.item_part("I'd like the jacket in large") == "I'd like the jacket"
    finally:
        R.VOCABULARY.reset(token)
    from automation.workflows.expr import evaluate
    assert evaluate("group_by(xs, 'k').map(g, g.key)", {"xs": [{"k": "a"}, {"k": "b"}, {"k": "a"}]}) == ["a", "b"]
    # refer() / mentioned(): the same reading for a choose or a set ("the order with the kettle and the lamp")
    orders = {"orders": {"orders": [{"id": "A", "items": ["Kettle", "Mug"]}, {"id": "B", "items": ["Kettle", "Lamp"]}]}}
    rows = "orders.orders.map(o, o.items)"
    assert evaluate(f"refer('the one with the kettle and the lamp', {rows})", orders) == [1]
    assert evaluate(f"refer('the kettle order', {rows})", orders) == []           # two have a kettle: undecided
    assert evaluate(f"mentioned('the kettle order', {rows})", orders) == [0, 1]
    assert evaluate(f"mentioned('the toaster', {rows})", orders) == []

BROKEN = """\
workflows:
  w:
    slots: {picked: {}}
    steps:
      - id: pick
        select: picked
        options: "[1, 2]"
        order: {size: small}
        prefer: "option > 1"
        one: maybe
      - end: completed
"""


def test_broken_select_steps_are_refused_with_their_lines():
    with pytest.raises(WorkflowConfigError) as exc:
        parse_workflows(BROKEN, file="broken.yaml")
    text = str(exc.value)
    for field in ("label", "order", "prefer", "traits", "one"):
        assert f"steps[0].{field}" in text, text
    assert "broken.yaml:5" in text


def test_vocabulary_nouns_come_from_the_workflows_file():
    ws = parse_workflows((THIRD_SHOP / "workflows.yaml").read_text(encoding="utf-8"), file="workflows.yaml")
    assert "笔记本" in ws["return_items"].vocabulary["title"]["Laptop"]
    token = R.VOCABULARY.set(ws["return_items"].vocabulary)
    try:
        from automation.workflows.steps.select import _nouns
        assert "lamp" in _nouns(ws["return_items"].steps["pick_items"])
    finally:
        R.VOCABULARY.reset(token)
