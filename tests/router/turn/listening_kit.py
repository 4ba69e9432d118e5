"""A conversation set of the project's own, shaped like the field's task-oriented evaluations.

Each case is a customer with a goal (a workflow of the bundled example shop, an order, the values to
give) and a pattern (how they talk: one answer per message, a correction, a change of mind, a
digression, a wrong-then-right number, answers that look like other intents, two requests in one
message, two tasks that change something in one message, another order at the amount question, one task over
two orders, a person asked for while a second task is kept, the optional tax id declined with a question beside
it, the reason told where an amount or a yes is asked). A small user simulator answers whatever the bot asks (``flow.awaiting``) with a phrasing drawn
from a pool, so the same case can be run k times with different words (pass^k). Every turn goes through
the whole gateway (HTTP, guards, classifier, escalation rules, workflows, the MCP shop) and the shop's
own records judge the outcome: the right write exactly once (or none), no ticket (but the one the customer
asked for, or a colleague's look at a question the knowledge base could not answer), no success claimed
without a success result, replies in the customer's language.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field
from typing import Any

WRONG_ORDER = "100999"

# -- the customers' goals: (workflow, customer, order, lang-independent values) --------------------------
TASKS: dict[str, list[dict[str, Any]]] = {
    "order_status": [
        {"customer": "c1", "order": "100234", "expect": ["SF1402837465299"]},
        {"customer": "c2", "order": "100241", "expect": ["FedEx", "794644790138"]},
        {"customer": "c4", "order": "100260", "expect": []},
        {"customer": "c6", "order": "100280", "expect": []},
        {"customer": "c3", "order": "100251", "expect": []},
    ],
    "refund": [
        {"customer": "c5", "order": "100270", "amount": 50, "amount2": 30},
        {"customer": "c2", "order": "100240", "amount": 20, "amount2": 12.5},
        {"customer": "c1", "order": "100230", "amount": 45, "amount2": 25},
        {"customer": "c3", "order": "100251", "amount": 30, "amount2": 18},
        {"customer": "c6", "order": "100280", "amount": 15, "amount2": 40},
    ],
    "change_address": [
        {"customer": "c1", "order": "100235"},
        {"customer": "c2", "order": "100242"},
        {"customer": "c5", "order": "100271"},
        {"customer": "c4", "order": "100261"},
        {"customer": "c3", "order": "100252"},
    ],
    "invoice": [
        {"customer": "c2", "order": "100240"},
        {"customer": "c5", "order": "100270"},
        {"customer": "c1", "order": "100230"},
        {"customer": "c3", "order": "100251"},
        {"customer": "c6", "order": "100280"},
    ],
    "cancel_order": [
        {"customer": "c1", "order": "100235"},
        {"customer": "c2", "order": "100242"},
        {"customer": "c5", "order": "100271"},
        {"customer": "c4", "order": "100261"},
        {"customer": "c3", "order": "100252"},
    ],
}

WRITE_TOOL = {"refund": "request_refund", "change_address": "change_address", "invoice": "issue_invoice",
              "cancel_order": "cancel_order", "order_status": None}

# what a reply says only after the shop confirmed the write (the workflows' `done` replies)
SUCCESS = {"request_refund": ("Refunded ", "已为订单"), "change_address": ("will now go to", "的地址已改为"),
           "issue_invoice": (" issued to ", "已开具"), "cancel_order": (" is cancelled;", "已取消，将退款")}

# -- phrasing pools ----------------------------------------------------------------------------------------
P: dict[str, dict[str, list[str]]] = {
    "open:order_status": {
        "en": ["where is my order", "what's the status of my order?", "has my order shipped yet", "I want to check my order",
               "can you check on my order for me"],
        "zh": ["我的订单到哪了", "帮我查一下订单", "我的订单现在什么状态", "查询一下我的订单", "订单发货了吗"]},
    "open+order:order_status": {
        "en": ["where is my order {order}", "what's the status of order {order}?", "has order {order} shipped",
               "can you check order {order}"],
        "zh": ["我的订单{order}到哪了", "查一下订单{order}", "订单{order}发货了吗", "订单{order}现在什么状态"]},
    "open:refund": {
        "en": ["I want my money back", "I'd like a refund", "can I get a refund please", "I want to request a refund",
               "refund please"],
        "zh": ["我要退款", "我想申请退款", "东西坏了，我要退钱", "帮我退款", "我要退款，东西有问题"]},
    "open+order:refund": {
        "en": ["I want a refund for order {order}", "please refund order {order}", "I need a refund on order {order}"],
        "zh": ["订单{order}我要退款", "我要退款，订单号{order}", "帮我把订单{order}退款"]},
    "open:change_address": {
        "en": ["I need to change my delivery address", "I put the wrong shipping address on my order",
               "can you update the delivery address of my order", "I want to change the address of my order"],
        "zh": ["我要修改收货地址", "收货地址填错了，帮我改一下", "我想改一下订单的收货地址", "帮我改下收货地址"]},
    "open+order:change_address": {
        "en": ["please change the delivery address of order {order}", "I need to update the address on order {order}"],
        "zh": ["订单{order}的收货地址要改一下", "帮我修改订单{order}的收货地址"]},
    "open:invoice": {
        "en": ["I need an invoice", "can I get an invoice for my order", "please issue an invoice for my purchase",
               "I would like an invoice"],
        "zh": ["我要开发票", "帮我开一张发票", "我想给订单开个发票", "麻烦开一下发票"]},
    "open+order:invoice": {
        "en": ["I need an invoice for order {order}", "please issue an invoice for order {order}"],
        "zh": ["订单{order}帮我开发票", "我要给订单{order}开发票"]},
    "open:cancel_order": {
        "en": ["I want to cancel my order", "please cancel my order", "I'd like to cancel an order", "cancel my order"],
        "zh": ["我要取消订单", "帮我取消订单", "我想取消一个订单", "这单不要了，帮我取消"]},
    "open+order:cancel_order": {
        "en": ["I want to cancel order {order}", "please cancel order {order}", "cancel order {order}"],
        "zh": ["我要取消订单{order}", "帮我取消订单{order}", "订单{order}不要了，取消吧"]},
    "order_id": {"en": ["{order}", "it's {order}", "order {order}", "#{order}", "the order number is {order}"],
                 "zh": ["{order}", "订单号{order}", "是{order}", "{order}这个", "单号是{order}"]},
    "amount": {"en": ["{amount}", "{amount} please", "refund {amount}", "just {amount}"],
               "zh": ["{amount}", "{amount}元", "退{amount}块", "{amount}块钱"]},
    "address": {"en": ["21 Oak Road, Portland, OR 97201", "Flat 3, 12 King Street, London W1 4AB",
                       "88 Harbour Street, Sydney NSW 2000"],
                "zh": ["杭州市西湖区文三路90号", "上海市浦东新区世纪大道100号", "北京市朝阳区建国路88号SOHO现代城A座"]},
    "address2": {"en": ["5 Elm Street, Boston, MA 02108", "9 Queen Road, Leeds LS1 2AB"],
                 "zh": ["南京市鼓楼区中山路18号", "广州市天河区体育西路1号"]},
    "title": {"en": ["Acme Trading Ltd.", "John Smith", "personal", "Blue Sky Studio LLC"],
              "zh": ["个人", "杭州某某科技有限公司", "张三", "上海星辰贸易有限公司"]},
    "title2": {"en": ["Northwind Traders", "Jane Doe"], "zh": ["李四", "深圳前海科技有限公司"]},
    "tax_id": {"en": ["none", "no", "not needed", "91330106MA2B3C4D5E"],
               "zh": ["无", "不需要", "没有", "91330106MA2B3C4D5E"]},
    "yes": {"en": ["yes", "yes please", "sure", "ok", "go ahead", "yep", "correct", "that's right"],
            "zh": ["是的", "好的", "确认", "可以", "对", "嗯", "没问题", "好"]},
    "change_of_mind": {"en": ["never mind", "actually no, I changed my mind, keep it", "forget it",
                              "I changed my mind", "no thanks, leave it as it is", "actually, don't bother"],
                       "zh": ["算了", "等等，算了，不用了", "不用了", "我再想想，先不弄了", "不要了，谢谢", "算了算了"]},
    # told where a value is asked: the refund's reason at the amount question, the cancel's at its confirmation
    "told_refund": {"en": ["it arrived broken", "the box was crushed when it came", "the handle came off after a day",
                           "it looks nothing like the photo"],
                    "zh": ["锅的涂层掉了", "收到的时候盒子就压坏了", "用了一天把手就掉了", "和图片上的完全不一样"]},
    "told_cancel": {"en": ["I ordered it by mistake", "I found it cheaper somewhere else", "my plans changed"],
                    "zh": ["我下错单了", "别家更便宜", "计划有变"]},
    "digression": {"en": ["what payment methods do you accept?", "how do I use a coupon?", "are you a bot?"],
                   "zh": ["支持哪些支付方式？", "优惠券怎么用？", "你是机器人吗"]},
    "question": {"en": ["what payment methods do you accept?", "how do I use a coupon?"],
                 "zh": ["支持哪些支付方式？", "优惠券怎么用？"]},
    "join": {"en": ["{task} and also {question}", "{task}. By the way, {question}", "{task}, also {question}"],
             "zh": ["{task}，另外{question}", "{task}。还有，{question}", "{task}，顺便问一下{question}"]},
    "correct_amount": {"en": ["no, make it {amount2}", "sorry, {amount2} not {amount}", "actually make it {amount2}"],
                       "zh": ["不对，退{amount2}", "改成{amount2}", "不是，应该是{amount2}"]},
    "correct_address": {"en": ["no, the address should be {address2}", "wrong, it's {address2}"],
                        "zh": ["不对，地址是{address2}", "地址应该是{address2}"]},
    "correct_title": {"en": ["no, the title should be {title2}", "actually the title is {title2}"],
                      "zh": ["不对，抬头是{title2}", "抬头应该是{title2}"]},
    "right_order": {"en": ["sorry, I meant {order}", "oops, it's {order}", "my mistake, the order is {order}"],
                    "zh": ["不好意思，是{order}", "打错了，应该是{order}", "说错了，是{order}"]},
    # after a finished lookup, another of the orders it offered: "the other" (of two; of more the bot asks which),
    # its place in the list as shown, or its status as shown
    "other_option": {"en": ["actually, the other one", "the other order", "what about the other one?",
                            "and the other one?", "the other one please"],
                     "zh": ["另一个呢", "另外那个呢", "另一个订单呢", "那另一个呢", "还有另一个呢"]},
    "nth_option": {"en": ["what about the {nth} one", "and the {nth}?", "the {nth} one please", "and the {nth} one?"],
                   "zh": ["第{n}个呢", "那第{n}个呢", "第{n}个订单呢", "还有第{n}个呢"]},
    "status_option": {"en": ["the {status} one", "what about the {status} one?", "and the {status} one?"],
                      "zh": ["那个{status}的呢", "{status}的那个呢", "那{status}的那个呢"]},
    # after looking an order up, a task about it that does not repeat its number
    "focus:refund": {"en": ["I want a refund for it", "I'd like my money back for that order", "refund it please"],
                     "zh": ["那帮我退款", "这个订单我要退款", "那我要退款"]},
    "focus:cancel_order": {"en": ["cancel it please", "ok then cancel that order", "please cancel this order"],
                           "zh": ["那帮我取消吧", "这个订单帮我取消", "那就帮我取消订单吧"]},
    "focus:invoice": {"en": ["I need an invoice for it", "please issue an invoice for that order"],
                      "zh": ["那帮我开个发票", "这个订单帮我开发票"]},
    "focus:change_address": {"en": ["I need to change the delivery address of that order",
                                    "please update the delivery address for this order"],
                             "zh": ["那帮我改一下收货地址", "这个订单的收货地址要改一下"]},
    # dropping the task and asking something else in the same message
    "instead": {"en": ["never mind, {question}", "forget it, {question}", "I changed my mind. {question}"],
                "zh": ["算了，{question}", "不用了，{question}", "算了不弄了，{question}"]},
    # two tasks that change something in one message: the second (an invoice for another order) comes next
    "join_task": {"en": ["{task} and an invoice for order {order2}", "{task}, and then I need an invoice for order {order2}",
                         "{task} and please issue an invoice for {order2}"],
                  "zh": ["{task}，再给订单{order2}开个发票", "{task}，然后订单{order2}帮我开一下发票",
                         "{task}，并且帮我给订单{order2}开发票"]},
    # one task over two orders: the second order named by its item, with no request words of its own
    "two_orders": {"en": ["{task} and the {item2} one {order2}", "{task}, and the {item2} order {order2} too",
                          "{task} and also the {item2} one, {order2}"],
                   "zh": ["{task}，还有{item2}那个{order2}", "{task}，{item2}那单{order2}也要", "{task}和{item2}那个{order2}"]},
    # a person asked for while a second task is kept for later: it goes to them, nothing of it runs
    "person": {"en": ["I want to talk to a person", "can I speak to a human agent please", "transfer me to a human"],
               "zh": ["转人工", "我要找人工客服", "帮我转人工服务"]},
    # the optional tax id declined with a question beside it: answered, or kept for after the invoice
    "decline_ask": {"en": ["no need, thanks. {question}", "not needed, thank you. {question}"],
                    "zh": ["不用了，谢谢你，{question}", "不用了，谢谢。{question}", "不需要，谢谢。{question}"]},
    "side_question": {"en": ["how long do card refunds take?", "what payment methods do you accept?",
                             "do you ship to Canada?", "can I pay in monthly instalments?"],
                      "zh": ["退款多久到账？", "支持哪些支付方式？", "你们能寄到加拿大吗？", "可以分期付款吗？"]},
    # at the amount question, another order than the one just picked: the choice again, never the task dropped
    "repick": {"en": ["actually, a different order", "sorry, wrong order, it's another one", "no wait, another order",
                      "actually I meant a different order"],
               "zh": ["算了，换成另一个订单吧", "不对，是另一个订单", "搞错了，换一个别的订单", "不是这个，是另外一个订单"]},
    # which order, and the amount in the same breath (with its currency, as customers write money)
    "beside": {"en": ["{which}, {money} please", "{which} and refund {money}", "{which} - {money}"],
               "zh": ["{which}，退{money}", "{which}，{money}", "{which}，帮我退{money}"]},
}
# how a customer writes an amount of their order's currency
MONEY = {"en": {"USD": "${amount}", "EUR": "€{amount}", "CNY": "¥{amount}"},
         "zh": {"USD": "${amount}", "EUR": "€{amount}", "CNY": "{amount}元"}}
CURRENCY = {"c2": "USD", "c6": "EUR"}   # the others' orders are in CNY
NTH = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}
# a status as the customer words it, from the list's label (the workflow's labels.status)
STATUS_WORD = {"en": {"awaiting payment": "pending", "paid": "paid", "shipped": "shipped", "delivered": "delivered",
                      "cancelled": "cancelled", "refunded": "refunded"},
               "zh": {"待付款": "待付款", "已付款": "已付款", "已发货": "已发货", "已签收": "已签收", "已取消": "已取消",
                      "已退款": "已退款"}}

PATTERNS = ("happy", "inline", "correction", "change_of_mind", "digression", "wrong_then_right", "lookalike",
            "two_requests", "other_option", "beside", "instead", "in_focus", "two_tasks", "repick", "two_orders",
            "kept_handoff", "kept_question", "told")
# "two_orders": the case's own order and another of the customer's the same task applies to (refundable,
# cancellable), named by its item
SECOND_ORDER = {("refund", "c5"): "100271", ("refund", "c2"): "100241", ("refund", "c1"): "100234",
                ("refund", "c3"): "100252", ("cancel_order", "c1"): "100236"}
ITEM = {"en": {"100271": "towel", "100241": "boots", "100234": "headphones", "100252": "phone", "100236": "tote bag"},
        "zh": {"100271": "毛巾", "100241": "靴子", "100234": "耳机", "100252": "手机", "100236": "托特包"}}
# a colleague asked to look at a question the knowledge base could not answer (the policy's ack_l2)
ACK_L2 = ("check this with a colleague", "我们正在为您核实")
# orders each customer may get an invoice for (paid, shipped or delivered, none issued): the second task of
# "two_tasks" takes the first that is not the case's own order
INVOICEABLE = {"c1": ["100234", "100230"], "c2": ["100241", "100240"], "c3": ["100252", "100251"], "c4": ["100260"],
               "c5": ["100271", "100270"], "c6": ["100280"]}
# the customers with several recent orders (a list is offered): "the other one" has something to refer to
SEVERAL = {"c1", "c2", "c4"}


@dataclass
class Case:
    id: str
    workflow: str
    lang: str
    pattern: str
    task: dict[str, Any]


@dataclass
class Outcome:
    case: Case
    seed: int
    passed: bool
    why: list[str] = field(default_factory=list)
    transcript: list[tuple[str, str]] = field(default_factory=list)
    turns: int = 0


def cases(per_workflow: int | None = None) -> list[Case]:
    """Every (workflow, customer, language, pattern) that applies: 5 workflows x 5 customers x 2 languages x the
    patterns that fit the workflow."""
    out = []
    for wf, tasks in TASKS.items():
        for n, task in enumerate(tasks[:per_workflow]):
            for lang in ("en", "zh"):
                for pattern in PATTERNS:
                    if pattern == "correction" and wf in ("order_status", "cancel_order"):
                        continue   # nothing to correct at a confirmation they do not have / a single value
                    if pattern == "in_focus" and wf == "order_status":
                        continue   # a task after a lookup, about the order looked up
                    if pattern == "instead" and wf == "order_status":
                        continue   # a lookup has nothing to drop
                    if pattern in ("beside", "repick") and wf != "refund":
                        continue   # the amount said with the order / another order at the amount: only the refund
                    if pattern in ("two_tasks", "kept_handoff") and wf not in ("refund", "cancel_order",
                                                                             "change_address"):
                        continue   # a write, then an invoice for another order
                    if pattern == "two_orders" and (wf, task["customer"]) not in SECOND_ORDER:
                        continue   # one task over two of the customer's orders
                    if pattern == "told" and wf not in ("refund", "cancel_order"):
                        continue
                    if pattern == "kept_question" and wf != "invoice":
                        continue   # the optional tax id declined with a question
                    if pattern == "other_option" and (wf not in ("order_status", "cancel_order")
                                                      or task["customer"] not in SEVERAL):
                        continue   # a lookup, and a write that must not run again on "the other one"
                    out.append(Case(f"{wf}-{task['customer']}-{lang}-{pattern}", wf, lang, pattern, task))
    return out


class Simulator:
    """One run of a case: answers the bot's questions, applies the pattern's move once, judges the result."""

    def __init__(self, case: Case, seed: int, send):
        self.case, self.seed, self.send = case, seed, send
        self.rng = random.Random(f"{case.id}:{seed}")
        self.lang = case.lang
        self.values = self._values()
        self.moved = False
        self.transcript: list[tuple[str, str]] = []
        self.why: list[str] = []
        self.replies: list[dict] = []
        self.listed: list[tuple[str, str]] = []   # the orders a list offered, as shown: (order, status label)
        self.decoy: str | None = None              # repick: the order picked first, before "a different order"
        self.tickets_expected = 0                  # kept_handoff: the person asked for; kept_question: a colleague

    def _values(self) -> dict[str, Any]:
        t, lang, pick = self.case.task, self.case.lang, self.rng.choice
        amount = t.get("amount")
        fmt = (lambda a: f"{a:g}") if amount is not None else str
        v = {"order": t["order"], "order2": next((o for o in INVOICEABLE[t["customer"]] if o != t["order"]), None),
             "amount": fmt(amount) if amount is not None else None,
             "amount2": fmt(t["amount2"]) if t.get("amount2") is not None else None,
             "address": pick(P["address"][lang]), "address2": pick(P["address2"][lang]),
             "title": pick(P["title"][lang]), "title2": pick(P["title2"][lang]), "tax_id": pick(P["tax_id"][lang])}
        second = SECOND_ORDER.get((self.case.workflow, t["customer"]))
        if self.case.pattern == "two_orders" and second is not None:
            v["order2"], v["item2"] = second, ITEM[lang][second]
        if self.case.pattern == "lookalike":   # answers that look like other intents
            v["title"] = "个人" if lang == "zh" else "personal"
            v["tax_id"] = "无" if lang == "zh" else "none"
        return v

    def say(self, key: str, **extra) -> str:
        return self.rng.choice(P[key][self.lang]).format(**{**self.values, **extra})

    def post(self, text: str) -> dict:
        out = self.send(text)
        self.transcript.append((text, (out.get("reply") or {}).get("text") or ""))
        self.replies.append(out)
        if out.get("ticket_id") and self.case.pattern not in ("kept_handoff", "kept_question"):
            self.why.append(f"a ticket opened after {text!r}")   # those two judge theirs (``tickets_expected``)
        return out

    def answer(self, awaiting: str | None) -> str | None:
        c = self.case
        if awaiting == "order_id" and c.pattern == "other_option" and not self.moved and c.workflow == "order_status":
            # first another order of the list (by its number as shown), then the customer's own by reference
            shown = self._shown(self.transcript[-1][1])
            decoys = [n for n, (o, _) in enumerate(shown, 1) if o != c.task["order"]]
            if decoys and any(o == c.task["order"] for o, _ in shown):
                self.listed = shown
                return self.rng.choice([str(self.rng.choice(decoys)), f"the {NTH[decoys[0]]} one"
                                        if self.lang == "en" else f"第{decoys[0]}个"])
        if awaiting == "order_id" and c.pattern == "repick" and not self.moved and self.decoy is None:
            # first another order of the list, then (at the amount question) "a different order"
            decoys = [o for o, _ in self._shown(self.transcript[-1][1]) if o != c.task["order"]]
            if decoys:
                self.decoy = self.rng.choice(decoys)
                return self.say("order_id", order=self.decoy)
        if awaiting == "order_id":
            return self.say("order_id")
        if awaiting == "amount":
            return self.say("amount")
        if awaiting in ("address", "title", "tax_id"):
            return self.values[awaiting] if awaiting != "tax_id" or c.pattern == "lookalike" else self.say("tax_id")
        if awaiting == "confirmation":
            if c.pattern == "lookalike":
                return "好" if self.lang == "zh" else "ok"
            return self.say("yes")
        return None

    def run(self, max_turns: int = 12) -> Outcome:
        c = self.case
        opening = c.pattern in ("inline",) and f"open+order:{c.workflow}" or f"open:{c.workflow}"
        if c.pattern == "two_requests":   # a task and a question in one message: both served, in one reply
            task = self.rng.choice(P[f"open+order:{c.workflow}"][self.lang]).format(**self.values)
            out = self.post(self.say("join", task=task.rstrip("?？"), question=self.say("question")))
            if not (out.get("reply") or {}).get("citations"):
                self.why.append("the question of a two-request message was not answered from the knowledge base")
            if not out.get("flow"):
                self.why.append("the task of a two-request message did not start")
            self.moved = True
        elif c.pattern == "in_focus":   # the order looked up first, then the task "for it": no number asked
            out = self.post(self.rng.choice(P["open+order:order_status"][self.lang]).format(**self.values))
            if (out.get("flow") or {}).get("status") != "completed":
                self.why.append(f"the lookup before the task did not complete: {out.get('flow')}")
            out = self.post(self.say(f"focus:{c.workflow}"))
            flow = out.get("flow") or {}
            if flow.get("workflow") != c.workflow or flow.get("awaiting") == "order_id":
                self.why.append(f"the task about the order just looked up asked which order: {flow}")
            self.moved = True
        elif c.pattern == "two_tasks":   # two writes in one message: the first runs, the invoice comes next
            task = self.rng.choice(P[f"open+order:{c.workflow}"][self.lang]).format(**self.values)
            out = self.post(self.say("join_task", task=task.rstrip("?？")))
            flow, said = out.get("flow") or {}, (out.get("reply") or {}).get("text") or ""
            if flow.get("workflow") != c.workflow:
                self.why.append(f"the first task of two did not start: {flow}")
            if self.values["order2"] not in said:
                self.why.append("the reply did not say the second task comes next")
            self.moved = True
        elif c.pattern == "two_orders":   # one task, two orders: the first now, the same task for the other next
            task = self.rng.choice(P[f"open+order:{c.workflow}"][self.lang]).format(**self.values)
            out = self.post(self.say("two_orders", task=task.rstrip("?？")))
            flow, said = out.get("flow") or {}, (out.get("reply") or {}).get("text") or ""
            if flow.get("workflow") != c.workflow or (out.get("reply") or {}).get("citations"):
                self.why.append(f"one task over two orders did not start as that task: {flow}")
            if self.values["order2"] not in said or c.task["order"] not in said:
                self.why.append("the reply did not say the other order comes next")
            self.moved = True
        elif c.pattern == "kept_handoff":   # two tasks, then a person: the kept one goes to them, nothing runs
            task = self.rng.choice(P[f"open+order:{c.workflow}"][self.lang]).format(**self.values)
            self.post(self.say("join_task", task=task.rstrip("?？")))
            out = self.post(self.say("person"))
            said = (out.get("reply") or {}).get("text") or ""
            self.tickets_expected = 1
            if not out.get("ticket_id") or self.values["order2"] not in said:
                self.why.append(f"the kept task was not handed to the person with the conversation: {said!r}")
            self.moved = True
            return Outcome(c, self.seed, False, self.why, self.transcript, len(self.transcript))
        elif c.pattern == "wrong_then_right":
            out = self.post(self.rng.choice(P[f"open+order:{c.workflow}"][self.lang]).format(order=WRONG_ORDER))
            out = self.post(self.say("right_order"))
            self.moved = True
        else:
            out = self.post(self.say(opening))
        for _ in range(max_turns):
            if self.why:
                break
            flow = out.get("flow") or {}
            if flow.get("status") == "completed" and c.pattern == "other_option" and not self.moved:
                out = self.after_finish()
                continue
            if flow.get("status") not in ("waiting",) or flow.get("awaiting") == "offer":
                break   # done (an answer's offer of a task after it is not this customer's goal)
            awaiting = flow.get("awaiting")
            move = self.move(awaiting)
            if move is not None:
                out = move
                continue
            text = self.answer(awaiting)
            if text is None:
                self.why.append(f"the bot waits for {awaiting!r}, which this customer cannot answer")
                break
            out = self.post(text)
        if c.pattern == "kept_question" and getattr(self, "kept", False) and not self.why:
            last = out.get("reply") or {}
            if any(a in (last.get("text") or "") for a in ACK_L2):
                self.tickets_expected = 1          # a colleague looks at it (an L2 assist ticket)
            elif not last.get("citations"):
                self.why.append(f"the question kept beside the task was lost: {last.get('text')!r}")
        return Outcome(c, self.seed, False, self.why, self.transcript, len(self.transcript))

    @staticmethod
    def _shown(reply: str) -> list[tuple[str, str]]:
        """The numbered list of a reply: (order, status label) per line "1. 100261 (awaiting payment): ..."."""
        return [(m.group(1), m.group(2)) for m in re.finditer(r"^\d+\. (\d+) \((.+?)\): ", reply, re.M)]

    def refer(self) -> str:
        """Another order of the list the finished lookup offered, by reference: "the other one", its place, its
        status as shown."""
        order = self.case.task["order"]
        n = next(k for k, (o, _) in enumerate(self.listed, 1) if o == order)
        label = dict(self.listed)[order]
        word = next((w for k, w in STATUS_WORD[self.lang].items() if label.startswith(k)), None)
        kinds = ["nth_option"] + (["other_option"] if len(self.listed) == 2 else []) + \
            (["status_option"] if word is not None else [])
        kind = self.rng.choice(kinds)
        return self.say(kind, nth=NTH[n], n=n, status=word)

    def after_finish(self) -> dict:
        """The finished task, then "the other one": a lookup looks the order up the words refer to (asking which
        when they leave several); a write is never run again by it (the shop's records judge)."""
        self.moved = True
        if self.case.workflow != "order_status":
            return self.post(self.say("other_option"))
        if not self.listed:
            self.why.append("no list of orders was offered to refer back to")
            return {}
        out = self.post(self.refer())
        flow = out.get("flow") or {}
        if flow.get("workflow") != "order_status":
            self.why.append(f"a reference to another order was not looked up: {flow}")
        return out

    def move(self, awaiting: str | None) -> dict | None:
        """The pattern's one move, at the first point it applies; the response that follows it."""
        c = self.case
        if self.moved:
            return None
        if c.pattern == "change_of_mind" and (awaiting == "confirmation" or c.workflow == "order_status"):
            self.moved = True
            out = self.post(self.say("change_of_mind"))
            if (out.get("flow") or {}).get("status") not in ("cancelled",):
                self.why.append(f"a change of mind did not end the flow: {(out.get('flow') or {}).get('status')}")
            return out
        if c.pattern == "digression" and awaiting is not None:
            self.moved = True
            out = self.post(self.say("digression"))
            flow = out.get("flow") or {}
            if flow.get("status") != "waiting" or flow.get("awaiting") != awaiting:
                self.why.append(f"the flow did not resume after a digression: {flow}")
            return out
        if c.pattern == "instead" and awaiting is not None:
            # "never mind, what payment methods do you accept?": the task ends, the question is answered
            self.moved = True
            out = self.post(self.say("instead", question=self.say("question")))
            if (out.get("flow") or {}).get("status") != "cancelled":
                self.why.append(f"a change of mind with a question did not end the flow: {out.get('flow')}")
            if not (out.get("reply") or {}).get("citations"):
                self.why.append("the question after a change of mind was not answered from the knowledge base")
            return out
        if c.pattern == "repick" and awaiting == "amount" and self.decoy is not None:
            self.moved = True
            out = self.post(self.say("repick"))
            flow, said = out.get("flow") or {}, (out.get("reply") or {}).get("text") or ""
            if flow.get("status") != "waiting" or flow.get("awaiting") not in ("order_id", "amount") \
                    or (flow.get("awaiting") == "amount" and c.task["order"] not in said):
                self.why.append(f"another order at the amount question did not open the choice again: {flow}")
            return out
        if c.pattern == "kept_question" and awaiting == "tax_id":
            # "不用了，谢谢你，我还想问下…": the invoice goes on; the question is answered or kept for after it
            self.moved = True
            question = self.say("side_question")
            out = self.post(self.say("decline_ask", question=question))
            flow, reply = out.get("flow") or {}, out.get("reply") or {}
            if flow.get("awaiting") != "confirmation":
                self.why.append(f"declining the tax id with a question did not go on to the confirmation: {flow}")
            elif not reply.get("citations") and question not in (reply.get("text") or ""):
                self.why.append("the question beside the declined tax id was neither answered nor kept")
            else:
                self.kept = not reply.get("citations")
            return out
        if c.pattern == "beside" and awaiting == "order_id":
            # "the order number is 100240, $20 please": the amount is not asked again
            self.moved = True
            money = MONEY[self.lang][CURRENCY.get(c.task["customer"], "CNY")].format(amount=self.values["amount"])
            out = self.post(self.say("beside", which=self.say("order_id"), money=money))
            if (out.get("flow") or {}).get("awaiting") == "amount":
                self.why.append("the amount said beside the order was asked again")
            return out
        if c.pattern == "told" and awaiting == ("amount" if c.workflow == "refund" else "confirmation"):
            # "it arrived broken" where the amount is asked: kept as the reason, the question asked again
            self.moved = True
            told = self.say("told_refund" if c.workflow == "refund" else "told_cancel")
            out = self.post(told)
            flow, said = out.get("flow") or {}, (out.get("reply") or {}).get("text") or ""
            if flow.get("status") != "waiting" or flow.get("awaiting") != awaiting:
                self.why.append(f"what the customer told at the question was not kept with the task: {flow}")
            elif "didn't catch" in said or "没有听明白" in said:
                self.why.append(f"what the customer told was met with 'I didn't catch that': {said!r}")
            else:
                self.values["reason"] = told
            return out
        if c.pattern == "correction" and awaiting == "confirmation":
            self.moved = True
            key = {"refund": "correct_amount", "change_address": "correct_address", "invoice": "correct_title"}[c.workflow]
            out = self.post(self.say(key))
            fixed = {"refund": "amount2", "change_address": "address2", "invoice": "title2"}[c.workflow]
            slot = {"refund": "amount", "change_address": "address", "invoice": "title"}[c.workflow]
            self.values[slot] = self.values[fixed]
            return out
        return None


def expected_writes(case: Case, values: dict[str, Any]) -> list[dict[str, Any]]:
    """The shop's writes a case must end with, in order: its task's (if any), then for "two_tasks" the invoice."""
    want = expected_write(case, values)
    out = [want] if want is not None else []
    if case.pattern == "two_tasks":
        out.append({"tool": "issue_invoice", "arguments": {"order_id": values["order2"], "title": values["title"]}})
    if case.pattern == "two_orders" and want is not None:
        out.append({"tool": want["tool"], "arguments": {**want["arguments"], "order_id": values["order2"]}})
    return out


def expected_write(case: Case, values: dict[str, Any]) -> dict[str, Any] | None:
    tool = WRITE_TOOL[case.workflow]
    if tool is None or case.pattern in ("change_of_mind", "instead", "kept_handoff"):
        return None
    args: dict[str, Any] = {"order_id": case.task["order"]}
    if case.workflow == "refund":
        args["amount"] = float(values["amount"])
    elif case.workflow == "change_address":
        args["address"] = values["address"]
    elif case.workflow == "invoice":
        args["title"] = values["title"]
    if case.pattern == "told" and values.get("reason"):
        args["reason"] = values["reason"]      # what the customer told is the shop's reason for the write
    return {"tool": tool, "arguments": args}


def judge(sim: Simulator, writes: list[dict], tickets: int) -> Outcome:
    """The shop's records decide: the expected write once with the right arguments (or none), no ticket,
    no success reply without a success result, every reply in the customer's language."""
    case, why = sim.case, list(sim.why)
    wants = expected_writes(case, sim.values)
    made = [{**w, "arguments": {**w["arguments"], "order_id": w["order_id"]}} for w in writes]
    if not wants:
        if made:
            why.append(f"writes without a confirmed request: {[w['tool'] for w in made]}")
    elif [w["tool"] for w in made] != [w["tool"] for w in wants]:
        why.append(f"expected {[w['tool'] for w in wants]} once each, the shop has {[w['tool'] for w in made]}")
    else:
        for want, done in zip(wants, made):
            got = done["arguments"]
            for k, v in want["arguments"].items():
                if (float(got.get(k)) if isinstance(v, float) else got.get(k)) != v:
                    why.append(f"{want['tool']} {k}={got.get(k)!r}, expected {v!r}")
    claimed = [t for _, t in sim.transcript for tool, marks in SUCCESS.items() if any(m in t for m in marks)]
    if claimed and not writes:
        why.append(f"a success reply without a write: {claimed[0]!r}")
    if tickets != sim.tickets_expected:
        why.append(f"{tickets} ticket(s)")
    if case.workflow == "order_status" and case.pattern != "change_of_mind":
        text = " ".join(t for _, t in sim.transcript)
        if case.pattern == "other_option":   # the last reply states the order referred to, never a list
            text = sim.transcript[-1][1] if sim.transcript else ""
            if re.search(r"^\d+\. ", text, re.M) or not re.search(rf"(?:Order|订单) {case.task['order']}\b", text):
                why.append(f"the order referred to was not looked up: {text!r}")
        if case.task["order"] not in text or not all(e in text for e in case.task["expect"]):
            why.append("the order's status was not given")
    wrong_lang = [r.get("reply", {}).get("lang") for r in sim.replies
                  if r.get("reply") and r["reply"].get("lang") not in (case.lang, None)]
    if wrong_lang:
        why.append(f"replies in {wrong_lang} for a {case.lang} conversation")
    return Outcome(case, sim.seed, not why, why, sim.transcript, len(sim.transcript))


_conv = itertools.count()


def run_case(case: Case, seed: int, *, post, shop_reset, shop_writes, tickets_of) -> Outcome:
    """One run of ``case`` on a freshly loaded shop; ``post(customer, conversation, text)`` sends a message."""
    shop_reset()
    conversation = f"{case.id}-{seed}-{next(_conv)}"
    sim = Simulator(case, seed, lambda text: post(case.task["customer"], conversation, text))
    sim.run()
    return judge(sim, shop_writes(), tickets_of(conversation))


def pass_hat_k(outcomes: list[Outcome], k: int) -> float:
    """pass^k: the share of cases whose first k runs all passed."""
    by_case: dict[str, list[bool]] = {}
    for o in outcomes:
        by_case.setdefault(o.case.id, []).append(o.passed)
    runs = [v[:k] for v in by_case.values() if len(v) >= k]
    return sum(all(v) for v in runs) / len(runs) if runs else 0.0
