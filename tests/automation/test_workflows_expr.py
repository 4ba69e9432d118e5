"""The fast paths of workflow expressions give exactly what CEL itself gives: reused environments, field
paths read in Python, a top-level ``filter`` as a map of booleans, option rows column by column."""

from __future__ import annotations

import cel
import pytest

from automation.workflows.expr import (Envs, ExpressionError, Scope, _fields_of, _split_filter, evaluate,
                                       evaluate_columns, render, render_each)

PRODUCT = {"product_id": "p", "variants": [
    {"variant_id": f"v{i}", "options": {"color": c, "size": s}, "price": 20.0 + i, "available": i % 3 != 0}
    for i, (c, s) in enumerate((c, s) for c in ("red", "navy", "teal") for s in ("S", "M", "L"))]}
DATA = {"product": PRODUCT, "slots": {"size": "M", "n": 2, "refs": ["a", "b"]}, "xs": [3, 1, 2], "m": {"k": 1, "j": 2}}


def plain_cel(source: str, data: dict):
    """CEL's own answer, without any of the module's shortcuts."""
    from automation.workflows.expr import _context

    return cel.compile(source).execute(_context(source, data))


@pytest.mark.parametrize("source", [
    "product.variants.filter(v, v.available)",
    "product.variants.filter(v, v.options.size == slots.size && v.price > 21.0)",
    "product.variants.filter(v, v.options.color == 'navy').map(v, v.variant_id)",
    "size(product.variants.filter(v, v.available))",
    "xs.filter(x, x > 1) + xs.filter(y, y < 2)",
    "(xs + [7]).filter(x, x != 1)",
    "m.filter(k, m[k] > 1)",
    "slots.refs.filter(r, r == ')')",
    "product.variants",
    "product.variants[2].options",
    "slots.n",
])
def test_fast_paths_give_what_cel_gives(source):
    assert evaluate(source, Scope(DATA)) == plain_cel(source, DATA)
    assert evaluate(source, DATA) == plain_cel(source, DATA)


def test_split_filter_only_takes_a_whole_member_chain():
    assert _split_filter("a.b.filter(v, v.x)") == ("a.b", "v", " v.x")
    assert _split_filter("a.filter(v, v.x) + b.filter(w, w)") is None
    assert _split_filter("!a.filter(v, v)") is None
    assert _split_filter("c ? a : b.filter(v, v)") is None
    assert _split_filter("a.filter(v, v).map(v, v.y)") is None
    assert _split_filter('"x.filter(v, v)"') is None


def test_errors_are_cel_errors():
    with pytest.raises(ExpressionError):
        evaluate("product.nothing_here", Scope(DATA))
    with pytest.raises(ExpressionError):
        evaluate("product.variants.filter(v, v.price)", Scope(DATA))   # not a boolean: CEL's own error
    with pytest.raises(ExpressionError):
        evaluate("missing_name.x", Scope(DATA))


@pytest.mark.parametrize("source, data, expected", [
    ("type(slots.n) == int", {"slots": {"n": 2}}, True),
    ("type(slots.n) == string || type(slots.refs) == list", {"slots": {"n": 2, "refs": []}}, True),
    ("type(x) == double", {"x": 2}, False),
])
def test_a_type_name_is_a_type_not_an_undefined_variable(source, data, expected):
    from automation.workflows.expr import roots

    assert not roots(source)[0] & {"int", "string", "list", "double"}
    assert evaluate(source, data) is expected and plain_cel(source, data) is expected


def test_an_environment_is_reused_while_its_values_are_the_same():
    envs = Envs()
    a = envs.context("product.product_id", {"product": PRODUCT})
    assert envs.context("size(product.variants)", {"product": PRODUCT}) is a          # same object
    assert envs.context("product.product_id", {"product": dict(PRODUCT)}) is a        # same content
    b = envs.context("slots.n", {"slots": {"n": 1}})
    assert envs.context("slots.n", {"slots": {"n": 1.0}}) is not b                     # 1 and 1.0 differ in CEL
    scope = Scope({"slots": {"n": 1}}, envs)
    assert evaluate("slots.n + 1", scope) == 2
    scope["slots"] = {"n": 5}
    assert evaluate("slots.n + 1", scope) == 6                                          # a change is seen


def test_columns_and_rendered_rows_match_one_render_per_item():
    options = [v for v in PRODUCT["variants"] if v["available"]]
    label = "{{ option.options.map(k, k + '=' + option.options[k]).join(', ') }} ({{ option.price }})"
    scope = Scope(DATA)
    (ids, labels), = [render_each(options, "option", ["{{ option.variant_id }}", label], scope)]
    assert ids == [render("{{ option.variant_id }}", {"option": o}) for o in options]
    def parts(text):   # CEL iterates a map's keys in no fixed order
        head, _, price = text.rpartition(" (")
        return sorted(head.split(", ")), price

    assert [parts(t) for t in labels] == [parts(render(label, {"option": o})) for o in options]
    cols = evaluate_columns(options, "option", ["option.options.map(k, option.options[k])", "option.price * 2.0",
                                                "option.options.size == slots.size"], scope)
    assert [sorted(c) for c in cols[0]] == [sorted(o["options"].values()) for o in options]
    assert cols[1] == [o["price"] * 2.0 for o in options]
    assert cols[2] == [o["options"]["size"] == "M" for o in options]


def test_only_the_fields_an_expression_reads_are_converted():
    assert _fields_of("option", ["option.options.map(k, option.options[k])", "option.price > 1.0"]) == {"options", "price"}
    assert _fields_of("option", ["option"]) is None                       # the whole item
    assert _fields_of("option", ["option['price']"]) is None              # indexed
    assert _fields_of("option", ["option.items.map(option, option)"]) is None   # the name is rebound
    assert _fields_of("option", ["'option' + option.name"]) == {"name"}   # a string literal is not a use


@pytest.mark.parametrize("source", [
    "slots.refs + [slots.size]",
    "size(slots)",                          # the whole value: nothing left out
    "has(slots.size) && !has(slots.nope)",
    "slots.refs.map(slots, slots + '!')",   # the name rebound by a macro
    "m.k + m.j",
    "product.variants.filter(v, v.options.size == slots.size).map(v, v.variant_id)",
])
def test_an_expression_that_reads_some_fields_gives_what_cel_gives_on_the_whole_value(source):
    assert evaluate(source, Scope(DATA)) == plain_cel(source, DATA)
    assert evaluate(source, DATA) == plain_cel(source, DATA)


def test_a_missing_field_is_still_cels_error_when_the_value_is_narrowed():
    with pytest.raises(ExpressionError, match="nope"):
        evaluate("slots.nope + slots.n", Scope(DATA))


def test_columns_of_the_item_alone_are_kept_by_content_and_handed_out_as_copies():
    from automation.workflows.expr import COLUMNS

    COLUMNS.clear()
    items = [{"id": 1, "tags": ["a", "b"]}, {"id": 2, "tags": ["c"]}]
    first = evaluate_columns(items, "o", ["o.tags.map(t, t + '!')"], Scope({}))[0]
    assert first == [["a!", "b!"], ["c!"]] and len(COLUMNS) == 1
    first[0].append("changed by a caller")
    again = evaluate_columns([dict(i) for i in items], "o", ["o.tags.map(t, t + '!')"], Scope({}))[0]
    assert again == [["a!", "b!"], ["c!"]]                       # the kept column was not touched
    # other content, other column: 1 and 1.0 are different values to CEL
    assert evaluate_columns([{"n": 1}], "o", ["o.n / 2"], Scope({}))[0] == [0]
    with pytest.raises(ExpressionError, match="float / int"):
        evaluate_columns([{"n": 1.0}], "o", ["o.n / 2"], Scope({}))
    # an expression that also reads the scope is evaluated each time
    rate = "o.n * slots.rate"
    assert evaluate_columns([{"n": 2.0}], "o", [rate], Scope({"slots": {"rate": 2.0}}))[0] == [4.0]
    assert evaluate_columns([{"n": 2.0}], "o", [rate], Scope({"slots": {"rate": 3.0}}))[0] == [6.0]
    assert len(COLUMNS) == 2                                      # the two item-only columns, not this one
