"""Workflow files: validation with file, line and field; CEL conditions and templates; choosing and reading answers."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import pytest

from automation.workflows.expr import ExpressionError, evaluate, evaluate_bool, render, roots
from automation.workflows.spec import WorkflowConfigError, load_workflows, parse_workflows
from automation.workflows import understand as U


@dataclass
class Spec:
    name: str
    risk: str
    input_schema: dict = field(default_factory=dict)


class Catalog:
    """Tool specs only (no calls): what load-time validation reads from a gateway."""

    def __init__(self, **tools):
        self._specs = {n: Spec(n, r, {"type": "object", "properties": {a: {} for a in args}}) for n, (r, args) in tools.items()}

    def names(self):
        return sorted(self._specs)

    def spec(self, name):
        return self._specs[name]


TOOLS = Catalog(get_order=("read", ["order_id"]), request_refund=("money", ["order_id", "amount"]))

GOOD = """\
workflows:
  refund:
    slots:
      order_id: {validate: {entity: order_id}, prompt: {zh: 订单号, en: Order number}}
    steps:
      - id: ask
        ask: order_id
      - id: load
        call: get_order
        args: {order_id: slots.order_id}
        bind: o
      - id: pay
        call: request_refund
        args: {order_id: slots.order_id, amount: o.total}
        bind: r
      - id: done
        reply: {zh: "已退 {{ r.amount }}", en: "Refunded {{ r.amount }}"}
"""


def errors(text, tools=TOOLS, file="wf.yaml"):
    with pytest.raises(WorkflowConfigError) as exc:
        parse_workflows(textwrap.dedent(text), file=file, tools=tools)
    return exc.value.errors


def test_a_good_file_loads_and_its_risk_is_the_writes():
    ws = parse_workflows(GOOD, file="wf.yaml", tools=TOOLS)
    wf = ws["refund"]
    assert wf.first == "ask" and wf.steps["load"].following == "pay"
    assert wf.risk == "money" and wf.call_risk == {"load": "money", "pay": "money"}


def test_intents_heard_about_the_task_are_its_own_topic_not_a_start():
    ws = parse_workflows(GOOD.replace("  refund:\n", "  refund:\n    intents: [refund_request]\n"
                                      "    hears: [damaged_item]\n"), file="wf.yaml", tools=TOOLS)
    wf = ws["refund"]
    assert wf.hears == ["damaged_item"] and wf.intents == ["refund_request"]
    assert wf.own_topic("damaged_item") and wf.own_topic("refund_request") and not wf.own_topic("invoice")
    assert not wf.own_topic(None)
    errs = errors(GOOD.replace("  refund:\n", "  refund:\n    hears: damaged_item\n"))
    assert any("hears" in str(e) and "list of intent names" in str(e) for e in errs), errs


def test_unknown_tool_argument_slot_step_and_name_are_refused_with_line_and_field():
    bad = GOOD.replace("call: request_refund", "call: refund_money") \
              .replace("args: {order_id: slots.order_id}", "args: {order: slots.order_no}") \
              .replace("      - id: done\n", "      - id: done\n        goto: nowhere\n")
    found: dict = {}
    for e in errors(bad):
        found.setdefault((e["line"], e["field"]), []).append(e["message"])
    assert any("unknown tool 'refund_money'" in m for m in found[(13, "workflows.refund.steps[2].call")])
    args = found[(10, "workflows.refund.steps[1].args.order")]
    assert any("unknown argument 'order' of tool 'get_order'" in m for m in args)
    assert any("unknown slot 'order_no'" in m for m in args)
    assert any("unknown step 'nowhere'" in m for m in found[(17, "workflows.refund.steps[3].goto")])


def test_the_rendered_error_names_file_line_and_field():
    with pytest.raises(WorkflowConfigError) as exc:
        parse_workflows(GOOD.replace("bind: o\n", "bind: o\n        retries: 3\n"), file="shop/wf.yaml", tools=TOOLS)
    assert str(exc.value).startswith("shop/wf.yaml:12: workflows.refund.steps[1].retries: unknown key 'retries'")


def test_unknown_binding_in_an_expression_and_a_cel_syntax_error():
    e = errors(GOOD.replace("amount: o.total", "amount: order.total"))
    assert any("unknown name 'order'" in x["message"] and x["line"] == 14 for x in e)
    e = errors(GOOD.replace("amount: o.total", "amount: o.total +"))
    assert any("CEL does not compile" in x["message"] for x in e)


def test_yaml_errors_duplicates_and_missing_texts():
    e = errors("workflows:\n  a: {steps: [1, 2}\n")
    assert e[0]["line"] == 2 and "not valid YAML" in e[0]["message"]
    e = errors("workflows:\n  a:\n    steps: []\n  a:\n    steps: []\n")
    assert e[0]["line"] == 4 and "duplicate key" in e[0]["message"]
    e = errors(GOOD.replace('en: "Refunded {{ r.amount }}"', 'fr: "Remboursé"'))
    fields = {x["field"] for x in e}
    assert "workflows.refund.steps[3].reply.en" in fields and "workflows.refund.steps[3].reply.fr" in fields


def test_bad_validators_and_reset_of_unknown_slots():
    e = errors(GOOD.replace("validate: {entity: order_id}", "validate: {entity: passport, regex: '('}")
               .replace("      - id: done\n", "      - id: done\n        on_reject: {goto: ask, reset: [ghost]}\n"))
    msgs = [x["message"] for x in e]
    assert any("unknown entity type 'passport'" in m for m in msgs)
    assert any("regex does not compile" in m for m in msgs)
    assert any("unknown slot 'ghost'" in m for m in msgs)
    e = errors(GOOD.replace("validate: {entity: order_id}", "validate: {entity: order_id}, named_by: {fr: [commande]}"))
    assert any(str(x.get("field")).endswith("named_by") and "words per language" in x["message"] for x in e), e


def test_a_folder_of_files_and_a_workflow_defined_twice(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    with pytest.raises(WorkflowConfigError) as exc:
        load_workflows(tmp_path, tools=TOOLS)
    assert "also defined in" in str(exc.value) and str(tmp_path / "b.yaml") in str(exc.value)
    (tmp_path / "b.yaml").write_text(GOOD.replace("  refund:", "  refund_again:"))
    assert load_workflows(tmp_path, tools=TOOLS).names() == ["refund", "refund_again"]


def test_cel_macros_string_functions_and_arithmetic_over_nested_results():
    user = {"orders": [{"id": "W1", "status": "pending", "items": [{"name": "bike", "price": 300.0},
                                                                    {"name": "lamp", "price": 45.0}]},
                       {"id": "W2", "status": "delivered", "items": [{"name": "hose", "price": 30.0}]}]}
    data = {"user": user, "slots": {"item_name": "lamp"}}
    assert evaluate("user.orders.filter(o, o.status == 'pending').map(o, o.id)", data) == ["W1"]
    assert evaluate("user.orders[0].items.filter(i, i.name == slots.item_name)", data) == [{"name": "lamp", "price": 45.0}]
    assert evaluate_bool("user.orders.exists(o, o.items.all(i, i.price < 50.0))", data)
    assert evaluate("size(user.orders.map(o, o.items).flatten())", data) == 3
    assert evaluate("user.orders[0].items.map(i, i.price).sum() - 45.0", data) == 300.0
    assert evaluate("'Bike'.lowerAscii() + '-' + 'a,b'.split(',').join('+')", data) == "bike-a+b"
    assert evaluate_bool("'W1003'.matches('^W[0-9]{4}$') && 'abc'.startsWith('a')", data)
    with pytest.raises(ExpressionError):
        evaluate_bool("size(user.orders)", data)          # a condition must be a boolean
    with pytest.raises(ExpressionError):
        evaluate("nope.x", data)


def test_templates_fill_cel_holes_and_never_run_code():
    data = {"r": {"amount": 30.0, "items": ["a", "b"]}, "slots": {}}
    assert render("Refunded {{ r.amount }} for {{ r.items }} ({{ size(r.items) }})", data) == "Refunded 30.00 for a, b (2)"
    with pytest.raises(ExpressionError):
        render("{{ __import__('os').system('true') }}", data)
    names, slot_refs = roots("slots.a + x.filter(i, i > slots.b).size() + 'slots.c'.size()")
    assert names == {"slots", "x"} and slot_refs == {"a", "b"}


def test_yes_no_cancel_and_entities_in_both_languages():
    assert U.yes_no("是的") is True and U.yes_no("Yes please") is True and U.yes_no("不要") is False
    assert U.yes_no("no thanks") is False and U.yes_no("what?") is None
    # 不 / 别 opening a word that is no "no": a reason, an apology, "I don't know"
    for said in ("别家更便宜", "不好意思，我再看看", "不知道", "不过我想先问一下", "别的店有货"):
        assert U.yes_no(said) is None, said
    assert U.yes_no("别取消") is False and U.yes_no("不用了") is False and U.yes_no("不对") is False
    assert U.changes_mind("算了") and U.changes_mind("never mind, thanks") and U.changes_mind("I need to cancel? no")
    # one reader for both callers: a leading command counts even where any text is an answer, a phrase inside not
    assert U.changes_mind("取消吧", whole=True) and U.changes_mind("cancel it please", whole=True)
    text = "keep it in the box with the receipt, please"
    assert U.changes_mind(text) and not U.changes_mind(text, whole=True)
    # a decline where the bot asked something optional, with or without 了; a question that merely contains 不用 is not
    for declined in ("不用了，谢谢。", "不需要，谢谢。", "不用，谢谢", "不需要", "no need, thanks"):
        assert U.is_decline(declined), declined
    assert U.declined_then("不需要，谢谢。你们能寄到加拿大吗？") == ("不需要,谢谢", "你们能寄到加拿大吗?")
    assert not U.is_decline("不需要发票吗") and not U.is_decline("不用付运费吧")
    assert U.extract("order_id", "不是这个，是100235") == "100235"
    assert U.extract("amount", "订单100234退款30元") == 30.0
    assert U.extract("money", "refund $12.50 please") == {"value": 12.5, "currency": "USD"}


def test_choose_by_number_id_exact_fuzzy_and_ambiguity():
    ids = ["W1", "W2", "W3"]
    texts = [["W1: Mountain Bike, Water Bottle (Los Angeles)", "Mountain Bike", "Los Angeles"],
             ["W2: Wireless Earbuds (San Francisco)", "Wireless Earbuds", "San Francisco"],
             ["W3: Hiking Boots, Garden Hose (Los Angeles)", "Hiking Boots", "Los Angeles"]]
    assert U.choose("2", ids, texts).index == 1
    assert U.choose("第三个", ids, texts).index == 2
    assert U.choose("the last one", ids, texts).index == 2
    assert U.choose("w2 please", ids, texts).index == 1
    assert U.choose("the one with the bike", ids, texts).index == 0
    # half of the description names what no option has: asked again, never a guess on weak evidence
    assert U.choose("the one with the bicycle bike", ids, texts).index is None
    assert U.choose("the order that went to San Francisco", ids, texts).index == 1
    assert U.choose("the earbud order", ids, texts).how == "fuzzy"
    amb = U.choose("the one that went to Los Angeles", ids, texts)
    assert amb.index is None and amb.candidates == [0, 2] and amb.how == "ambiguous"
    assert U.choose("something else entirely", ids, texts).index is None


def test_choose_falls_back_to_an_injected_encoder_similarity():
    ids, texts = ["a", "b"], [["Down Jacket"], ["Desk Lamp"]]

    def similarity(text, options):      # a stand-in encoder: a fixed preference for the first option
        return [0.95, 0.2]

    assert U.choose("something warm for winter", ids, texts).index is None
    got = U.choose("something warm for winter", ids, texts, similarity=similarity)
    assert got.index == 0 and got.how == "encoder"


MEMORY_TOOLS = Catalog(get_order=("read", ["order_id"]), list_recent_orders=("read", ["limit"]),
                       request_refund=("money", ["order_id", "amount"]))
WITH_MEMORY = """\
memory:
  outcomes: 3
  tools:
    orders: {call: list_recent_orders, args: {limit: "5"}, value: result.orders, default: "[]"}
labels:
  status:
    zh: {paid: 已付款, shipped: 已发货}
    en: {paid: paid, shipped: shipped}
workflows:
  status:
    slots:
      order_id: {validate: {entity: order_id}, prompt: {zh: 订单号, en: Order number},
                 recall: "memory.outcomes.map(o, o.slots.order_id)"}
    steps:
      - {id: ask, ask: order_id, when: "size(memory.orders) == 0"}
      - {id: load, call: get_order, args: {order_id: slots.order_id}, bind: o}
      - id: done
        reply: {zh: "{{ labels.status[o.status] }}", en: "{{ labels.status[o.status] }}"}
"""


def test_memory_labels_and_recall_load_and_localise():
    ws = parse_workflows(WITH_MEMORY, file="wf.yaml", tools=MEMORY_TOOLS)
    assert [c.name for c in ws.memory.calls] == ["orders"] and ws.memory.outcomes == 3
    assert ws.labels_for("zh")["status"]["shipped"] == "已发货" and ws.labels_for("en")["status"]["paid"] == "paid"
    assert ws["status"].slots["order_id"].recall.startswith("memory.outcomes")
    # no argument reads the language: one cached copy serves the customer in either language
    assert ws.memory.by_language is False
    by_lang = parse_workflows(WITH_MEMORY.replace('args: {limit: "5"}', 'args: {limit: "lang == \'zh\' ? 5 : 3"}'),
                              file="wf.yaml", tools=MEMORY_TOOLS)
    assert by_lang.memory.by_language is True


def test_memory_errors_name_the_line_and_field():
    bad = (WITH_MEMORY.replace("call: list_recent_orders, args: {limit", "call: request_refund, args: {colour")
           .replace("zh: {paid: 已付款, shipped: 已发货}", "zh: {paid: 已付款}"))
    errs = {e["field"]: (e["line"], e["message"]) for e in errors(bad, tools=MEMORY_TOOLS)}
    assert "memory only reads" in errs["memory.tools.orders.call"][1] and errs["memory.tools.orders.call"][0] == 4
    assert "unknown argument 'colour'" in errs["memory.tools.orders.args.colour"][1]
    assert "other keys" in errs["labels.status.en"][1]
    errs = {e["field"]: e["message"] for e in errors(WITH_MEMORY.replace("value: result.orders", "value: slots.x"),
                                                      tools=MEMORY_TOOLS)}
    assert "unknown name 'slots'" in errs["memory.tools.orders.value"]


@pytest.mark.parametrize(("text", "recall"), [("和上次一样", True), ("用上次的抬头", True), ("跟上回的地址一样", True),
                                              ("the same address as last time", True), ("same as before", True),
                                              ("上海市徐汇区漕溪北路88号", False), ("1 Infinite Loop, Cupertino", False)])
def test_recall_phrases(text, recall):
    from automation.workflows.memory import is_recall

    assert is_recall(text) is recall


@pytest.mark.parametrize(("text", "question", "bare_cancel"), [
    ("退货政策是什么？", True, False), ("what payment methods do you accept", True, False), ("积分什么时候过期", True, False),
    ("上海市浦东新区张杨路500号", False, False), ("Carter Design LLC", False, False),
    ("never mind", False, True), ("算了", False, True), ("算了吧", False, True), ("cancel the invoice title", False, False)])
def test_questions_and_bare_cancels_are_not_free_text_answers(text, question, bare_cancel):
    assert U.is_question(text) is question and U.is_bare_cancel(text) is bare_cancel
