"""Listening in context, end to end: the customer answers the bot's own questions one message at a time
(HTTP, guards, classifier, escalation rules, workflows, the MCP shop), and the shop's records judge.

An answer to a waiting workflow ("50", "是的", an invoice title) is the workflow's: it never counts as an
unclear turn, a repeated question or another state entry, so nobody is handed to a person mid-task."""

from __future__ import annotations

import itertools
import re

import pytest

from routing_kit import make_agent, rows

pytestmark = pytest.mark.slow

_ids = itertools.count()


def say(api, text: str, *, customer: str, conversation: str) -> dict:
    r = api.post("/v1/messages", json={"channel": "web", "conversation_id": conversation, "customer_id": customer,
                                       "message_id": f"m-{next(_ids)}", "text": text})
    assert r.status_code == 200, r.text
    return r.json()


def writes_of(svc, tool: str) -> list[dict]:
    return rows(svc.pool, "SELECT order_id, arguments FROM shop.writes WHERE tool = %s ORDER BY id", tool)


def tickets_of(svc, conversation: str) -> int:
    return rows(svc.pool, "SELECT count(*) AS n FROM tickets t JOIN conversations c ON c.id::text = t.conversation_id::text "
                          "WHERE c.external_id = %s", conversation)[0]["n"]


def talk(api, customer: str, conversation: str, *texts: str) -> list[dict]:
    return [say(api, t, customer=customer, conversation=conversation) for t in texts]


def test_refund_amount_answered_in_its_own_message_zh(api, svc):
    out = talk(api, "c5", "l-zh-refund", "我要退款，锅坏了", "100270", "50", "是的")
    assert all(o["ticket_id"] is None for o in out), [o["reply"] for o in out]
    assert out[-1]["flow"]["status"] == "completed", out[-1]
    refunds = [w for w in writes_of(svc, "request_refund") if w["order_id"] == "100270"]
    assert len(refunds) == 1 and float(refunds[0]["arguments"]["amount"]) == 50.0
    assert "退款 50" in out[-1]["reply"]["text"]
    assert tickets_of(svc, "l-zh-refund") == 0


def test_invoice_title_answered_in_its_own_message(api, svc):
    # the lamp names order 100240 in the request: the title is the first thing asked
    out = talk(api, "c2", "l-en-invoice", "I would like an invoice for my desk lamp order", "Acme Trading Ltd.",
               "none", "yes")
    assert "title" in out[0]["reply"]["text"], out[0]["reply"]["text"]
    assert all(o["ticket_id"] is None for o in out), [o["reply"] for o in out]
    assert out[-1]["flow"]["status"] == "completed", [o["reply"]["text"] for o in out]
    invoices = [w for w in writes_of(svc, "issue_invoice") if w["order_id"] == "100240"]
    assert len(invoices) == 1 and invoices[0]["arguments"]["title"] == "Acme Trading Ltd."
    assert tickets_of(svc, "l-en-invoice") == 0


def test_address_change_confirmed_with_shi_de(api, svc):
    out = talk(api, "c5", "l-zh-address", "毛巾那个订单的收货地址填错了", "杭州市西湖区文三路90号", "是的")
    assert all(o["ticket_id"] is None for o in out), [o["reply"] for o in out]
    assert out[-1]["flow"]["status"] == "completed", [o["reply"]["text"] for o in out]
    changes = [w for w in writes_of(svc, "change_address") if w["order_id"] == "100271"]
    assert len(changes) == 1 and "文三路90号" in changes[0]["arguments"]["address"]
    assert tickets_of(svc, "l-zh-address") == 0


def test_money_back_amount_answered_in_its_own_message_en(api, svc):
    out = talk(api, "c2", "l-en-refund", "I want my money back", "100240", "20", "yes")
    assert all(o["ticket_id"] is None for o in out), [o["reply"] for o in out]
    assert out[-1]["flow"]["status"] == "completed", [o["reply"]["text"] for o in out]
    refunds = [w for w in writes_of(svc, "request_refund") if w["order_id"] == "100240"]
    assert len(refunds) == 1 and float(refunds[0]["arguments"]["amount"]) == 20.0
    assert tickets_of(svc, "l-en-refund") == 0



def test_a_change_of_mind_ends_the_task_politely_and_writes_nothing(api, svc):
    en = talk(api, "c1", "l-mind-en", "I want to cancel order 100235", "actually no, I changed my mind, keep it")
    zh = talk(api, "c2", "l-mind-zh", "我要取消订单100242", "等等，算了，不取消了")
    for out in (en, zh):
        assert out[0]["flow"]["awaiting"] == "confirmation"
        assert out[1]["flow"]["status"] == "cancelled" and out[1]["ticket_id"] is None
    assert writes_of(svc, "cancel_order") == []
    assert "nothing further will be done" in en[1]["reply"]["text"] and "不会再做后续操作" in zh[1]["reply"]["text"]
    # the next "never mind" is small talk, not a ticket
    again = say(api, "never mind", customer="c1", conversation="l-mind-en")
    assert again["ticket_id"] is None and tickets_of(svc, "l-mind-en") == 0


@pytest.mark.parametrize("customer, texts, then_workflow, says", [
    ("c3", ("我想改一下收货地址", "哦不用了，我还是想查一下物流"), "order_status", "您想查询哪个订单"),
    ("c2", ("I want a refund", "never mind, where is my order 100241?"), "order_status", "tracking number 794644790138"),
    ("c6", ("I want to change my delivery address", "forget it, how long do card refunds take?"), None, "3–7"),
])
def test_a_change_of_mind_with_another_request_drops_the_task_and_serves_the_new_one(api, svc, customer, texts,
                                                                                     then_workflow, says):
    """The dropped task's acknowledgement, then what the customer asks instead, in the same reply: a workflow
    (started) or a question (answered from the knowledge base); nobody is handed over, nothing is written."""
    out = talk(api, customer, f"l-instead-{customer}", *texts)
    last = out[-1]
    assert last["ticket_id"] is None and tickets_of(svc, f"l-instead-{customer}") == 0, last
    text = last["reply"]["text"]
    assert ("不会再做后续操作" in text or "nothing further will be done" in text) and says in text, text
    if then_workflow is None:
        assert last["reply"]["citations"], last["reply"]
    else:
        assert last["flow"]["workflow"] == then_workflow, last["flow"]
    assert writes_of(svc, "request_refund") == [] and writes_of(svc, "change_address") == []


def test_never_mind_with_nothing_waiting_starts_nothing_and_hands_nobody_over(api, svc):
    """"never mind", "算了", "算了，不退了" when no task waits: an acknowledgement, no refund started on the word 退,
    and none of them counts as an unclear turn (two in a row once handed the customer to a person)."""
    en = talk(api, "c2", "l-nm-en", "never mind", "forget it")
    # the unknown number is asked again; "算了" stops that refund, and "算了，不退了" then finds nothing waiting
    zh = talk(api, "c2", "l-nm-zh", "我想退货", "999999", "算了", "算了，不退了")
    assert "没有找到订单 999999" in zh[1]["reply"]["text"] and zh[1]["flow"]["status"] == "waiting"
    for out in (en, zh[2:]):
        assert all(o["ticket_id"] is None and not (o.get("flow") or {}).get("status") == "waiting" for o in out), out
    assert "anything else" in en[0]["reply"]["text"] and "已停止办理" in zh[2]["reply"]["text"]
    assert "还有什么" in zh[3]["reply"]["text"]
    assert tickets_of(svc, "l-nm-en") == 0 and tickets_of(svc, "l-nm-zh") == 0
    assert writes_of(svc, "request_refund") == []
    # a command that names a task is still that task
    cancel = say(api, "cancel order 100235", customer="c1", conversation="l-nm-cmd")
    assert cancel["flow"]["workflow"] == "cancel_order" and cancel["flow"]["awaiting"] == "confirmation"


def test_a_wrong_order_number_then_the_right_one(api, svc):
    """A number the shop does not know is asked again with the customer's own orders; the customer's next
    words (a correction, a number, the thing they bought) answer that question."""
    out = talk(api, "c2", "l-wrong", "where is my order 100999?", "sorry, I meant 100241")
    assert "couldn't find order 100999" in out[0]["reply"]["text"] and "100241" in out[0]["reply"]["text"]
    assert "794644790138" in out[1]["reply"]["text"] and out[1]["ticket_id"] is None
    zh = talk(api, "c1", "l-wrong-zh", "订单100999到哪了", "耳机那个")
    assert "没有找到订单 100999" in zh[0]["reply"]["text"] and "您想查询哪个订单" in zh[0]["reply"]["text"]
    assert "SF1402837465299" in zh[1]["reply"]["text"] and zh[1]["ticket_id"] is None


@pytest.mark.parametrize("texts, retry", [(("cancel my order", "100242", "yes"), "catch"),
                                           (("我要取消订单", "100242", "是的"), "没有听明白")])
def test_the_order_number_said_again_at_the_confirmation_is_not_misheard(api, svc, texts, retry):
    """The only order that can be cancelled is picked and the customer is asked to confirm; naming that order
    again is not "didn't catch that": the confirmation is asked again, and the yes then cancels it once."""
    out = talk(api, "c2", f"l-restate-{texts[-1]}", *texts)
    assert out[0]["flow"]["awaiting"] == "confirmation" and "100242" in out[0]["reply"]["text"], out[0]
    assert out[1]["flow"]["awaiting"] == "confirmation" and retry not in out[1]["reply"]["text"], out[1]
    assert "100242" in out[1]["reply"]["text"] and out[1]["ticket_id"] is None
    assert out[2]["flow"]["status"] == "completed", [o["reply"]["text"] for o in out]
    assert [w["order_id"] for w in writes_of(svc, "cancel_order")] == ["100242"]


def test_the_same_question_about_another_order_is_a_follow_up(api, svc):
    """After a lookup that only reads, "and 100242?" / "那100242呢" asks the same about another order: the lookup
    runs again with it (the classifier alone hears no intent in it). A workflow that writes is never restarted
    by a bare value."""
    en = talk(api, "c2", "l-follow-en", "where is my order 100241?", "ok, and 100242?")
    zh = talk(api, "c2", "l-follow-zh", "帮我查一下100241的物流", "那100242呢？")
    for out in (en, zh):
        assert "794644790138" in out[0]["reply"]["text"]
        assert out[1]["flow"] and out[1]["flow"]["workflow"] == out[0]["flow"]["workflow"], out[1]
        assert "100242" in out[1]["reply"]["text"] and out[1]["ticket_id"] is None, out[1]["reply"]
    # a cancel that went through, then another order number: not a second cancel started by a bare value
    done = talk(api, "c1", "l-follow-write", "cancel order 100235", "yes")
    assert done[1]["flow"]["status"] == "completed" and len(writes_of(svc, "cancel_order")) == 1
    after = say(api, "and 100236?", customer="c1", conversation="l-follow-write")
    assert (after.get("flow") or {}).get("workflow") != "cancel_order", after
    assert len(writes_of(svc, "cancel_order")) == 1


def test_a_task_and_a_question_in_one_message_are_both_served(api, svc):
    out = say(api, "cancel 100235 and tell me what payment methods you accept", customer="c1", conversation="l-two")
    assert out["reply"]["citations"], out["reply"]          # the question, from the knowledge base
    assert out["flow"]["workflow"] == "cancel_order" and out["flow"]["awaiting"] == "confirmation"
    assert out["reply"]["text"].rstrip().endswith("?")       # the task's question comes last: it waits for the answer
    done = say(api, "yes", customer="c1", conversation="l-two")
    assert done["flow"]["status"] == "completed" and len(writes_of(svc, "cancel_order")) == 1
    zh = say(api, "查订单100251的物流，另外支持哪些支付方式？", customer="c3", conversation="l-two-zh")
    assert zh["reply"]["citations"] and zh["flow"]["workflow"] == "order_status" and zh["ticket_id"] is None
    assert "订单 100251" in zh["reply"]["text"]


@pytest.mark.parametrize("customer, text, lookup, task_question, task", [
    ("c2", "cancel order 100242 and where is order 100241?", "tracking number 794644790138", "Cancel order 100242",
     "cancel_order"),
    # each request on its own words: the refund is for 100234, the lookup for 100235 (the last number no longer wins)
    ("c1", "退款订单100234，另外帮我查一下订单100235的物流", "订单 100235 当前状态", "订单 100234 要退款多少", "refund"),
])
def test_a_task_and_a_lookup_in_one_message_are_both_served(api, svc, customer, text, lookup, task_question, task):
    out = say(api, text, customer=customer, conversation=f"l-two-tasks-{customer}")
    said = out["reply"]["text"]
    assert lookup in said and task_question in said and said.index(lookup) < said.index(task_question), said
    assert out["flow"]["workflow"] == task and out["flow"]["status"] == "waiting" and out["ticket_id"] is None


def test_a_lookup_that_needs_a_choice_waits_for_the_task_beside_it(api, svc):
    out = talk(api, "c1", "l-two-tasks-wait", "cancel order 100236 and where is my order?", "no")
    assert out[0]["reply"]["text"].startswith("Cancel order 100236") and out[0]["flow"]["workflow"] == "cancel_order"
    assert out[1]["flow"]["workflow"] == "order_status" and out[1]["flow"]["awaiting"] == "order_id", out[1]
    assert "nothing further will be done" in out[1]["reply"]["text"] and "100235" in out[1]["reply"]["text"]
    assert writes_of(svc, "cancel_order") == []


@pytest.mark.parametrize("customer, texts, asked", [
    ("c2", ("where is order 100241", "I want a refund for it, 10 dollars", "yes"), "Refund 10.00 USD for order 100241?"),
    ("c1", ("我的订单100235到哪了", "那帮我取消吧", "是的"), "确认取消订单 100235"),
])
def test_a_task_about_the_order_just_looked_up_needs_no_order_number(api, svc, customer, texts, asked):
    """"it" / an unsaid object after a lookup is the order just discussed: the new task starts on it (its own checks
    judge it) and the shop records the write on that order."""
    out = talk(api, customer, f"l-focus-{customer}", *texts)
    assert asked in out[1]["reply"]["text"] and out[-1]["flow"]["status"] == "completed", [o["reply"] for o in out]
    order = "100241" if customer == "c2" else "100235"
    tool = "request_refund" if customer == "c2" else "cancel_order"
    assert [w["order_id"] for w in writes_of(svc, tool)] == [order]
    # without a word referring back, the customer is asked which order
    again = talk(api, customer, f"l-focus-ask-{customer}", texts[0], "I want a refund" if customer == "c2" else "我要退款")
    assert again[1]["flow"]["awaiting"] == "order_id", again[1]


@pytest.mark.parametrize("customer, texts, asked, order", [
    # the boots (shipped) were just looked up; the hose's order is the one named
    ("c2", ("where is my boots order?", "please cancel that hose order", "yes"), "Cancel order 100242", "100242"),
    # the earbuds (shipped) were just looked up; the mug's order (paid) is named before 那单 / after 那个
    ("c1", ("耳机到哪了", "把马克杯那单取消了吧", "是的"), "确认取消订单 100235", "100235"),
    ("c1", ("耳机到哪了", "那个马克杯帮我取消", "是的"), "确认取消订单 100235", "100235"),
])
def test_a_demonstrative_that_names_its_own_order_is_not_the_order_just_looked_up(api, svc, customer, texts, asked,
                                                                                   order):
    """"cancel that hose order", "杯子那单": the words the demonstrative heads name the order meant; the order just
    discussed is taken only for "it", "那单" alone. Never the order looked up before, whose status the check would
    then refuse (or, worse, confirm)."""
    out = talk(api, customer, f"l-own-{customer}-{len(texts[1])}", *texts)
    assert asked in out[1]["reply"]["text"], [o["reply"]["text"] for o in out]
    assert out[-1]["flow"]["status"] == "completed"
    assert [w["order_id"] for w in writes_of(svc, "cancel_order")] == [order]


def test_a_demonstrative_whose_description_matches_no_order_asks_which(api, svc):
    """"取消手提袋那单" after the earbuds were looked up: no order's items say 手提袋, so the customer is asked which
    order (the cancellable ones listed), never offered the earbuds' order just looked up."""
    out = talk(api, "c1", "l-own-unmatched", "耳机到哪了", "取消手提袋那单")
    said = out[1]["reply"]["text"]
    assert out[1]["flow"]["awaiting"] == "order_id" and "100236" in said and "100234" not in said, said
    assert writes_of(svc, "cancel_order") == []


@pytest.mark.parametrize("text,customer,needle", [
    ("我的快递到哪了", "c4", "100260"), ("where's my package?", "c6", "100280"),
    ("查询订单100234的快递单号", "c1", "SF1402837465299"), ("帮我查一下100241的物流", "c2", "794644790138")])
def test_logistics_questions_reach_the_shop(api, svc, text, customer, needle):
    out = say(api, text, customer=customer, conversation=f"l-log-{abs(hash(text))}")
    if out["flow"] and out["flow"]["status"] == "waiting":   # several orders: the customer picks one
        out = say(api, needle if needle.isdigit() else "100234", customer=customer,
                  conversation=f"l-log-{abs(hash(text))}")
    assert out["ticket_id"] is None and out["flow"]["workflow"] == "order_status", out
    assert needle in out["reply"]["text"] and "NW" not in out["reply"]["text"]


def test_another_order_mid_task_is_looked_up_then_the_task_resumes(api, svc):
    out = talk(api, "c5", "l-stack", "我要退款，锅坏了", "100270", "另外我的订单100271到哪了？")
    resumed = out[-1]
    assert "100271" in resumed["reply"]["text"] and "已付款" in resumed["reply"]["text"]
    assert resumed["flow"]["workflow"] == "refund" and resumed["flow"]["awaiting"] == "amount", resumed
    rest = talk(api, "c5", "l-stack", "50", "是的")
    assert rest[-1]["flow"]["status"] == "completed" and len(writes_of(svc, "request_refund")) == 1
    assert tickets_of(svc, "l-stack") == 0


def test_several_tasks_in_one_session_are_normal(api, svc):
    for n, order in enumerate(["100234", "100235", "100236", "100230", "100234"]):
        out = say(api, f"where is my order {order}", customer="c1", conversation="l-many")
        assert out["ticket_id"] is None and order in out["reply"]["text"], (n, out)
    assert tickets_of(svc, "l-many") == 0


@pytest.mark.parametrize("text", ["tell me if you are a human or a computer", "are you actually a person",
                                  "你到底是不是真人"])
def test_are_you_a_human_is_answered_not_escalated(api, svc, text):
    out = say(api, text, customer="c9", conversation=f"l-who-{abs(hash(text))}")
    assert out["ticket_id"] is None and out["decision"]["tier"] != "L3", out


def test_a_latin_tax_id_keeps_the_conversation_in_chinese(api, svc):
    out = talk(api, "c2", "l-tax", "我要给订单100240开发票", "个人", "91330106MA2B3C4D5E")
    assert all(o["reply"]["lang"] == "zh" for o in out), [o["reply"] for o in out]
    assert "确认" in out[-1]["reply"]["text"] and out[-1]["flow"]["awaiting"] == "confirmation"


def silent_for_ten_minutes(svc, conversation: str) -> None:
    """The conversation's transcript moved back in time: as if the bot had said nothing for ten minutes."""
    svc.pool.run(lambda conn: conn.execute(
        "UPDATE messages SET received_at = received_at - interval '10 minutes' WHERE conversation_id = "
        "(SELECT id FROM conversations WHERE external_id = %s)", (conversation,)))


def test_a_customer_waiting_in_the_queue_hears_that_the_message_arrived_once_per_interval(api, svc):
    first = say(api, "转人工", customer="c4", conversation="l-wait")
    assert first["ticket_id"] and "转接人工" in first["reply"]["text"]
    soon = say(api, "有人吗？", customer="c4", conversation="l-wait")
    assert soon["reply"] is None and soon["ticket_id"] == first["ticket_id"]   # the acknowledgement was just sent
    # ten minutes later (the transcript moved back in time): one short word, in the customer's language
    silent_for_ten_minutes(svc, "l-wait")
    later = say(api, "hello? anyone there?", customer="c4", conversation="l-wait")
    assert later["reply"] is not None and later["ticket_id"] == first["ticket_id"], later
    assert later["reply"]["lang"] == "en" and "with our team" in later["reply"]["text"]
    # with the ticket's place in its team's queue: a customer who asks for a person after c4 waits behind
    place = re.search(r"You are number (\d+) in the queue\.", later["reply"]["text"])
    assert place, later["reply"]
    assert say(api, "转人工", customer="c6", conversation="l-wait-2")["ticket_id"]
    silent_for_ten_minutes(svc, "l-wait-2")
    behind = say(api, "有人吗？", customer="c6", conversation="l-wait-2")["reply"]
    assert behind["lang"] == "zh" and f"您目前排在第 {int(place.group(1)) + 1} 位。" in behind["text"], behind
    again = say(api, "???", customer="c4", conversation="l-wait")
    assert again["reply"] is None                                              # once per interval, not every time
    assert tickets_of(svc, "l-wait") == 1


def test_a_customer_whose_draft_waits_for_review_hears_that_the_message_arrived(api, svc):
    first = say(api, "the app keeps crashing when I open it", customer="c7", conversation="l-draft")
    assert first["decision"]["tier"] == "L2" and first["ticket_id"], first
    soon = say(api, "hello?", customer="c7", conversation="l-draft")
    assert soon["reply"] is None and soon["ticket_id"] == first["ticket_id"]   # the bot has just spoken
    silent_for_ten_minutes(svc, "l-draft")
    later = say(api, "is anyone there?", customer="c7", conversation="l-draft")
    assert later["ticket_id"] == first["ticket_id"] and later["decision"]["tier"] == "L2", later
    assert later["reply"] is not None and "with our team" in later["reply"]["text"], later
    assert tickets_of(svc, "l-draft") == 1


def test_a_request_for_a_person_mid_task_still_reaches_a_person(api, svc):
    out = talk(api, "c5", "l-human", "我要退款，锅坏了", "100270", "转人工")
    assert out[1]["ticket_id"] is None and out[2]["ticket_id"] is not None
    assert out[2]["decision"]["escalation"]["rule"] == "human_request"
    assert writes_of(svc, "request_refund") == []


def test_unclear_answers_are_asked_again_with_a_hint_then_a_person_is_offered(api, svc):
    out = talk(api, "c2", "l-unclear", "I want my money back", "100240", "blue", "purple", "green")
    assert out[2]["ticket_id"] is None and out[2]["flow"]["awaiting"] == "amount"
    assert "didn't catch" in out[2]["reply"]["text"] and "How much" in out[2]["reply"]["text"]
    assert out[3]["ticket_id"] is None
    assert out[4]["ticket_id"] is not None          # the third miss: a colleague takes it, with the flow's state
    assert writes_of(svc, "request_refund") == []


@pytest.mark.parametrize("customer, order, texts, noted", [
    ("c2", "100240", ("I want my money back", "100240", "it arrived broken", "20", "yes"), "noted"),
    ("c5", "100270", ("我要退款", "100270", "锅的涂层掉了", "50", "是的"), "记下")])
def test_what_the_customer_tells_at_a_question_is_kept_not_misheard(api, svc, customer, order, texts, noted):
    """"it arrived broken" where the amount is asked: acknowledged and kept (the refund's reason in the shop),
    the question asked again with what an answer looks like, never "I didn't catch that"."""
    out = talk(api, customer, f"l-told-{customer}", *texts)
    told = out[2]
    assert told["ticket_id"] is None and told["flow"]["awaiting"] == "amount", told["reply"]
    text = told["reply"]["text"]
    assert noted in text and "didn't catch" not in text and "没有听明白" not in text
    assert order in text and ("all" in text or "全部" in text)     # the question again, as it was asked
    assert out[-1]["flow"]["status"] == "completed", [o["reply"]["text"] for o in out]
    refunds = [w for w in writes_of(svc, "request_refund") if w["order_id"] == order]
    assert len(refunds) == 1 and refunds[0]["arguments"]["reason"] == texts[2]
    assert tickets_of(svc, f"l-told-{customer}") == 0


@pytest.mark.parametrize("text, lead", [("blue", "didn't catch"), ("it should be in my emails somewhere", "noted")])
def test_the_order_number_asked_again_says_what_one_looks_like(api, svc, text, lead):
    """A customer the shop has no orders of is asked for the number: asked again, the slot's hint follows."""
    out = talk(api, "u-no-orders", f"l-hint-{lead[:5]}", "I want a refund", text)
    assert out[0]["flow"]["awaiting"] == "order_id" and "order confirmation" not in out[0]["reply"]["text"]
    again = out[1]["reply"]["text"]
    assert out[1]["flow"]["awaiting"] == "order_id" and lead in again, again
    assert "order confirmation, such as 100234" in again and out[1]["ticket_id"] is None


@pytest.mark.parametrize("lang, texts", [
    ("en", ("where is my order?", "the one that is shipped", "actually, the other one", "the other order")),
    ("zh", ("我的订单到哪了", "已发货的那个", "另外那个呢", "另一个订单呢"))])
def test_the_other_order_after_a_finished_lookup_is_looked_up(api, svc, lang, texts):
    """The lookup offered two orders and the customer took one; "the other one" a moment later asks the same about
    the order not taken (the classifier alone hears a goodbye in it), in the customer's language, and asked again
    it goes back to the first."""
    out = talk(api, "c4", f"l-other-{lang}", *texts)
    assert "100261" in out[0]["reply"]["text"] and "100260" in out[0]["reply"]["text"], out[0]["reply"]
    assert "RM123456785GB" in out[1]["reply"]["text"]
    pending, shipped = out[2]["reply"]["text"], out[3]["reply"]["text"]
    assert ("Order 100261 is awaiting payment" if lang == "en" else "订单 100261 当前状态：待付款") in pending, pending
    assert "100260" in shipped and "RM123456785GB" in shipped, shipped
    for o in out[2:]:
        assert o["flow"]["workflow"] == "order_status" and o["flow"]["status"] == "completed", o
        assert o["reply"]["lang"] == lang and o["ticket_id"] is None
    assert writes_of(svc, "cancel_order") == [] and tickets_of(svc, f"l-other-{lang}") == 0


@pytest.mark.parametrize("follow_up, order", [
    ("the pending one", "100261"), ("what about the first one", "100261"), ("and the first?", "100261"),
    ("那个待付款的呢", "100261"), ("第一个呢", "100261")])
def test_an_order_of_the_list_named_after_the_lookup_is_looked_up(api, svc, follow_up, order):
    """After the lookup: the order's place in the list as it was shown, or its status, names it."""
    conversation = f"l-named-{abs(hash(follow_up))}"
    opening = ("我的订单到哪了", "第二个") if re.search(r"[\u4e00-\u9fff]", follow_up) else \
        ("where is my order?", "the second one")
    out = talk(api, "c4", conversation, *opening, follow_up)
    assert "RM123456785GB" in out[1]["reply"]["text"], out[1]["reply"]
    assert out[2]["flow"] and out[2]["flow"]["workflow"] == "order_status", out[2]
    assert order in out[2]["reply"]["text"] and "RM123456785GB" not in out[2]["reply"]["text"], out[2]["reply"]


@pytest.mark.parametrize("customer, texts, shown, says", [
    ("c2", ("where are the boots I ordered?", "what about the lamp?", "and the first one?"), "794644790138",
     "Order 100240 is delivered"),
    ("c1", ("我买的耳机到哪了", "那马克杯呢", "第一个呢"), "SF1402837465299", "订单 100235 当前状态：已付款")])
def test_another_item_after_a_lookup_picked_from_the_request_is_looked_up(api, svc, customer, texts, shown, says):
    """The request named its item, so no list was shown: another item's words still name another of the
    customer's orders, "the other one" offers the rest of them; "the first" names nothing the customer saw."""
    out = talk(api, customer, f"l-item-{abs(hash(texts))}", *texts)
    assert shown in out[0]["reply"]["text"] and out[0]["flow"]["status"] == "completed", out[0]["reply"]
    assert says in out[1]["reply"]["text"] and out[1]["flow"]["workflow"] == "order_status", out[1]["reply"]
    assert not out[2].get("flow") or out[2]["flow"]["status"] != "completed", out[2]   # no order picked for them
    other = talk(api, customer, f"l-item-other-{abs(hash(texts))}", texts[0],
                 "and the other one?" if customer == "c2" else "另一个呢")
    asked = other[1]["reply"]["text"]       # of the customer's other orders, none is guessed: they are offered
    assert other[1]["flow"]["status"] == "waiting" and other[1]["flow"]["awaiting"] == "order_id", other[1]
    assert ("100241" if customer == "c2" else "100234") not in asked and asked.count("\n") >= 2, asked


def test_the_other_one_of_several_is_asked_among_the_rest(api, svc):
    """Of four orders, "the other one" does not guess: the orders not taken are offered again, numbered as shown
    now, and the answer looks that one up."""
    out = talk(api, "c1", "l-other-many", "where is my order?", "the first one", "what about the other one?",
               "the second")
    assert "Order 100236 is awaiting payment" in out[1]["reply"]["text"], out[1]["reply"]
    asked = out[2]["reply"]["text"]
    assert out[2]["flow"]["status"] == "waiting" and out[2]["flow"]["awaiting"] == "order_id", out[2]
    assert "100236" not in asked and all(o in asked for o in ("100235", "100234", "100230")), asked
    assert asked.index("100235") < asked.index("100234") < asked.index("100230")
    assert "Order 100234 is shipped" in out[3]["reply"]["text"], out[3]["reply"]   # the second of the three
    zh = talk(api, "c1", "l-other-many-zh", "我的订单到哪了", "第一个", "另一个呢")
    assert zh[2]["flow"]["awaiting"] == "order_id" and "您想查询哪个订单" in zh[2]["reply"]["text"], zh[2]
    assert "100236" not in zh[2]["reply"]["text"]


@pytest.mark.parametrize("lang, texts", [
    ("en", ("where is my order?", "the one that is shipped", "thanks, bye")),
    ("en", ("where is my order?", "the one that is shipped", "what payment methods do you accept?")),
    ("zh", ("我的订单到哪了", "已发货的那个", "好的，谢谢")),
    ("zh", ("我的订单到哪了", "已发货的那个", "支持哪些支付方式？"))])
def test_a_goodbye_or_a_new_question_after_a_lookup_is_not_a_follow_up(api, svc, lang, texts):
    conversation = f"l-not-{abs(hash(texts))}"
    out = talk(api, "c4", conversation, *texts)
    assert "RM123456785GB" in out[1]["reply"]["text"]
    last = out[2]
    assert not last.get("flow"), last
    assert "100261" not in (last["reply"] or {}).get("text", ""), last["reply"]


@pytest.mark.parametrize("texts", [("I want to cancel my order", "100235", "yes", "the other one"),
                                   ("我要取消订单", "100235", "是的", "另一个呢")])
def test_the_other_one_after_a_cancellation_cancels_nothing_more(api, svc, texts):
    """A write is never started again by a reference to the other order: the cancelled order stays the only one."""
    out = talk(api, "c1", f"l-other-write-{texts[-1]}", *texts)
    assert "100236" in out[0]["reply"]["text"] and out[2]["flow"]["status"] == "completed", out
    assert [w["order_id"] for w in writes_of(svc, "cancel_order")] == ["100235"]
    assert (out[3].get("flow") or {}).get("workflow") != "cancel_order", out[3]
    assert out[3]["ticket_id"] is None


@pytest.mark.parametrize("customer, first, then, says_next, task_order, task_tool, task_done", [
    ("c2", "refund 100241 and an invoice for 100240", ("20", "yes"), "comes next", "100241", "request_refund",
     "Refunded 20.00 USD"),
    ("c1", "帮我取消订单100236，再给订单100230开个发票", ("是的",), "接着办理", "100236", "cancel_order", "已取消"),
    ("c1", "帮我取消订单100236，再给订单100230开个发票", ("算了，不取消了",), "接着办理", None, "cancel_order",
     "不会再做后续操作"),
])
def test_two_tasks_in_one_message_are_done_one_after_the_other(api, svc, customer, first, then, says_next,
                                                                task_order, task_tool, task_done):
    """Two tasks that change something, asked in one message: the first runs (its question), the second is kept
    on its own words (its own order) and starts when the first ends, confirmed or dropped; the reply says it
    comes next, and nothing of it happens before (the shop's records judge)."""
    conv = f"l-queue-{customer}-{len(then[0])}"
    out = talk(api, customer, conv, first)
    other = "100240" if customer == "c2" else "100230"
    said = out[0]["reply"]["text"]
    assert says_next in said and other in said and out[0]["flow"]["workflow"] != "invoice", said
    assert said.index(says_next) < said.index("100241" if customer == "c2" else "100236"), said
    assert writes_of(svc, "issue_invoice") == [] and writes_of(svc, task_tool) == []
    rest = talk(api, customer, conv, *then)
    last = rest[-1]
    assert task_done in last["reply"]["text"], last["reply"]
    assert [w["order_id"] for w in writes_of(svc, task_tool)] == ([task_order] if task_order else [])
    assert last["flow"]["workflow"] == "invoice" and last["flow"]["awaiting"] == "title", last["flow"]
    assert writes_of(svc, "issue_invoice") == []    # started, not done: it asks its own question first
    title = "Acme Ltd" if customer == "c2" else "某某公司"
    done = talk(api, customer, conv, title, "none" if customer == "c2" else "无", "yes" if customer == "c2" else "是的")
    assert done[-1]["flow"]["status"] == "completed", [o["reply"]["text"] for o in done]
    assert [w["order_id"] for w in writes_of(svc, "issue_invoice")] == [other]
    assert tickets_of(svc, conv) == 0


@pytest.mark.parametrize("customer, texts, asks, not_shown", [
    ("c5", ("我要退款", "100271", "算了，换成另一个订单吧"), "订单 100270 要退款多少", None),
    ("c5", ("我要退款", "100271", "不粘锅那个"), "订单 100270 要退款多少", None),
    ("c2", ("I want a refund", "100241", "actually, a different order"), "Which order should be refunded?", "100241"),
    ("c2", ("refund 100241", "actually, a different order"), "Which order should be refunded?", "100241"),
])
def test_another_order_at_the_amount_question_picks_the_order_again(api, svc, customer, texts, asks, not_shown):
    """At the amount question, "a different order" / "换成另一个订单" opens the order choice again (the other order
    when only one is left) and another order's item named alone ("不粘锅那个") picks it: the task goes on with that
    order, never dropped; the refund is written for the order picked last."""
    conv = f"l-repick-{customer}-{len(texts)}-{len(texts[-1])}"
    out = talk(api, customer, conv, *texts)
    last = out[-1]
    assert asks in last["reply"]["text"] and last["flow"]["status"] == "waiting", last["reply"]
    if not_shown:
        assert not_shown not in last["reply"]["text"] and last["flow"]["awaiting"] == "order_id"
        more = talk(api, customer, conv, "the lamp", "20", "yes")
        order = "100240"
    else:
        more = talk(api, customer, conv, "50", "是的")
        order = "100270"
    assert more[-1]["flow"]["status"] == "completed", [o["reply"]["text"] for o in more]
    assert [w["order_id"] for w in writes_of(svc, "request_refund")] == [order]
    assert tickets_of(svc, conv) == 0


@pytest.mark.parametrize("customer, texts, answer", [
    ("c1", ("我要开发票，订单100230", "某某公司", "不用了，谢谢你，我还想问下退货运费", "是的"), None),
    ("c2", ("I need an invoice for order 100240", "Acme Ltd", "no need, thanks. how long do card refunds take?", "yes"),
     "3–7"),
])
def test_declining_the_tax_id_with_a_question_keeps_the_invoice(api, svc, customer, texts, answer):
    """"不用了" at the optional tax-id question declines that question, not the invoice: with a question after it the
    invoice goes on to its confirmation (the question answered first when the knowledge base can) and is issued."""
    conv = f"l-decline-{customer}"
    out = talk(api, customer, conv, *texts)
    asked = out[2]
    assert asked["flow"]["workflow"] == "invoice" and asked["flow"]["awaiting"] == "confirmation", asked["reply"]
    if answer is not None:
        said = asked["reply"]["text"]
        assert answer in said and asked["reply"]["citations"] and said.rstrip().endswith("?"), said
    assert out[-1]["flow"]["status"] == "completed", [o["reply"]["text"] for o in out]
    invoices = writes_of(svc, "issue_invoice")
    assert len(invoices) == 1 and invoices[0]["arguments"]["tax_id"] is None
    assert tickets_of(svc, conv) == 0


def test_a_task_kept_for_after_a_reviewed_one_starts_when_the_review_decides(api, svc):
    """The first of two tasks waits for a supervisor: the second is still kept, and starts with the decision (its
    question goes out with the refund's result), then runs on the customer's answers."""
    conv = "l-queue-review"
    out = talk(api, "c2", conv, "refund 100241 and an invoice for 100240", "all", "yes")
    assert out[-1]["flow"]["status"] == "waiting_approval", out[-1]
    assert writes_of(svc, "issue_invoice") == [] and writes_of(svc, "request_refund") == []
    ticket = rows(svc.pool, "SELECT id FROM tickets WHERE kind = 'approval'")[0]
    _, token = make_agent(svc.pool, "sue", role="supervisor", approval_level="supervisor")
    h = {"Authorization": f"Bearer {token}"}
    assert api.post(f"/v1/handoff/tickets/{ticket['id']}/claim", headers=h).status_code == 200
    assert api.post(f"/v1/handoff/tickets/{ticket['id']}/approve", headers=h).status_code == 200
    told = rows(svc.pool, "SELECT payload FROM outbox WHERE kind = 'reply' ORDER BY id DESC LIMIT 1")[0]["payload"]
    assert "Refunded 129" in told["text"] and "What title should the invoice for order" in told["text"], told["text"]
    assert [w["order_id"] for w in writes_of(svc, "request_refund")] == ["100241"]
    done = talk(api, "c2", conv, "Acme Ltd", "none", "yes")
    assert done[-1]["flow"]["workflow"] == "invoice" and done[-1]["flow"]["status"] == "completed", \
        [o["reply"]["text"] for o in done]
    assert [w["order_id"] for w in writes_of(svc, "issue_invoice")] == ["100240"]


@pytest.mark.parametrize("customer, first, other", [
    ("c2", "how do I get a refund for order 100241, and an invoice for order 100240", "100240"),
    ("c1", "订单100234怎么申请退款？另外给订单100230开个发票", "100230"),
    ("c1", "退款怎么申请，订单100234，还有帮我给订单100230开个发票", "100230"),
])
def test_a_kept_task_starts_when_the_request_before_it_is_answered_from_the_knowledge_base(api, svc, customer,
                                                                                         first, other):
    """"How do I get a refund for 100241, and an invoice for 100240": the question is answered (with citations) and
    the kept invoice starts in the same reply, rather than waiting for a task that never runs."""
    conv = f"l-kept-kb-{abs(hash(first))}"
    out = talk(api, customer, conv, first)[0]
    said = out["reply"]["text"]
    assert out["reply"]["citations"] and out["ticket_id"] is None, said
    assert out["flow"]["workflow"] == "invoice" and out["flow"]["awaiting"] == "title", (out["flow"], said)
    assert other in said and writes_of(svc, "request_refund") == []
    title = "Acme Ltd" if customer == "c2" else "某某公司"
    done = talk(api, customer, conv, title, "none" if customer == "c2" else "无", "yes" if customer == "c2" else "是的")
    assert done[-1]["flow"]["status"] == "completed", [o["reply"]["text"] for o in done]
    assert [w["order_id"] for w in writes_of(svc, "issue_invoice")] == [other]


@pytest.mark.parametrize("customer, texts, other", [
    ("c2", ("refund 100241 and an invoice for 100240", "I want to talk to a person"), "100240"),
    ("c1", ("帮我取消订单100235，再给订单100230开个发票", "转人工"), "100230"),
    ("c1", ("帮我取消订单100235，再给订单100230开个发票", "blorp", "zzzz", "qqqq"), "100230"),
])
def test_a_kept_task_goes_to_the_person_who_takes_the_conversation(api, svc, customer, texts, other):
    """The first of two tasks reaches a person (asked for, or the flow hands over after three unclear answers): the
    kept task is in the ticket's context for the agent, the reply says it went with the conversation, and nothing of
    it runs behind the agent's back."""
    conv = f"l-kept-person-{customer}-{len(texts)}"
    out = talk(api, customer, conv, *texts)
    last = out[-1]
    assert last["ticket_id"] is not None and other in last["reply"]["text"], last["reply"]
    ticket = rows(svc.pool, "SELECT kind, context FROM tickets WHERE id = %s", last["ticket_id"])[0]
    kept = ticket["context"]["kept_requests"]
    assert [(k["workflow"], k["slots"]["order_id"]) for k in kept] == [("invoice", other)], kept
    flows = rows(svc.pool, "SELECT status, outcome FROM flow_instances WHERE workflow = 'invoice'")
    assert [(f["status"], f["outcome"]) for f in flows] == [("cancelled", "handed_over")], flows
    assert writes_of(svc, "issue_invoice") == [] and writes_of(svc, "cancel_order") == []
    held = say(api, "hello?", customer=customer, conversation=conv)    # a person holds it: nothing starts
    assert not held.get("flow") and writes_of(svc, "issue_invoice") == []


@pytest.mark.parametrize("customer, texts, question", [
    ("c2", ("I need an invoice for order 100240", "Acme Ltd", "no need, thanks. do you sell phone cases?", "yes"),
     "do you sell phone cases?"),
    ("c1", ("我要开发票，订单100230", "某某公司", "不用了，谢谢，你们卖手机壳吗？", "是的"), "手机壳"),
])
def test_a_question_the_knowledge_base_cannot_answer_beside_a_declined_tax_id_is_not_lost(api, svc, customer, texts,
                                                                                      question):
    """The question said beside the declined tax id, not answerable with confidence: the reply says it comes after
    the invoice; the invoice goes on and is issued; then the question goes on as its own request: a colleague is
    asked (an L2 assist ticket with the knowledge base's draft), and the customer is told so."""
    conv = f"l-kept-question-{customer}"
    out = talk(api, customer, conv, *texts)
    kept = out[2]
    assert kept["flow"]["awaiting"] == "confirmation" and question in kept["reply"]["text"], kept["reply"]
    assert kept["ticket_id"] is None
    last = out[-1]
    assert [w["order_id"] for w in writes_of(svc, "issue_invoice")] == [texts[0][-6:]]
    assert last["flow"]["status"] == "completed" and last["ticket_id"] is not None, last
    ticket = rows(svc.pool, "SELECT kind, reason FROM tickets WHERE id = %s", last["ticket_id"])[0]
    assert ticket["kind"] == "assist" and "L1 could not answer" in ticket["reason"], ticket
    assert last["reply"]["text"].index("INV-") < last["reply"]["text"].index(
        "colleague" if customer == "c2" else "核实"), last["reply"]["text"]


@pytest.mark.parametrize("customer, texts, orders", [
    ("c2", ("refund order 100241 and the lamp one 100240", "10", "yes", "12", "yes"), [("100241", 10.0), ("100240", 12.0)]),
    ("c1", ("退款订单100234，还有龙井那个100230", "50", "是的", "30", "是的"), [("100234", 50.0), ("100230", 30.0)]),
    ("c1", ("帮我取消订单100235和100236", "是的", "是的"), [("100235", None), ("100236", None)]),
])
def test_one_task_over_two_orders_is_done_for_each_order_in_turn(api, svc, customer, texts, orders):
    """One request naming two orders ("refund order 100241 and the lamp one 100240") is one task done per order: the
    first named now, the same task for the other kept and said to come next, then started when the first ends
    (never the last number silently taken, nor the second read as a lookup)."""
    conv = f"l-two-orders-{abs(hash(texts[0]))}"
    out = talk(api, customer, conv, *texts)
    first = out[0]["reply"]["text"]
    assert orders[1][0] in first and first.index(orders[1][0]) < first.rindex(orders[0][0]), first
    tool = "cancel_order" if orders[0][1] is None else "request_refund"
    made = writes_of(svc, tool)
    assert [w["order_id"] for w in made] == [o for o, _ in orders], [o["reply"]["text"] for o in out]
    if orders[0][1] is not None:
        assert [float(w["arguments"]["amount"]) for w in made] == [a for _, a in orders]
    assert out[-1]["flow"]["status"] == "completed" and tickets_of(svc, conv) == 0


@pytest.mark.parametrize("customer, texts, order, why", [
    ("c1", ("取消订单", "耳机那个"), "100234", "无法取消"),                                # shown two, named a third
    ("c1", ("取消耳机那个订单",), "100234", "无法取消"),                                   # named in the request
    ("c5", ("cancel my order", "no, the delivered one"), "100270", "can no longer be cancelled"),   # the only one, taken
    ("c3", ("取消订单", "不对，是已签收那个"), "100251", "无法取消"),
    ("c5", ("cancel my order", "the other one"), "100270", "can no longer be cancelled"),
])
def test_an_order_the_choice_leaves_out_is_answered_with_why_it_cannot_be_done(api, svc, customer, texts, order, why):
    """Only orders that can be cancelled are offered; the customer means another of theirs (by its item, its status,
    "the other one"): the task's own check says why it cannot be done, never "I didn't catch that", no ticket, and
    nothing is cancelled."""
    out = talk(api, customer, f"l-others-{customer}-{len(texts)}-{texts[-1]}", *texts)
    last = out[-1]
    assert order in last["reply"]["text"] and why in last["reply"]["text"], last["reply"]
    assert last["flow"]["status"] == "completed" and last["ticket_id"] is None, last["flow"]
    assert writes_of(svc, "cancel_order") == []


@pytest.mark.parametrize("customer, texts, order, title", [
    ("c1", ("发票能开吗？要公司抬头的", "龙井那个", "杭州某某科技有限公司", "不需要，谢谢。", "是的"), "100230", "杭州某某科技有限公司"),
    ("c2", ("how do I get an invoice?", "the lamp one", "Acme Ltd", "none", "yes"), "100240", "Acme Ltd"),
])
def test_an_answer_to_the_offered_tasks_first_question_takes_the_offer(api, svc, customer, texts, order, title):
    """The answer offers the task ("Shall I issue an invoice for one of your orders?"); the customer answers with the
    order instead of a yes: the task starts with that order taken, then asks for the title; never "I didn't
    understand" and no person for two "unclear" messages. The invoice is issued by the shop's records."""
    out = talk(api, customer, f"l-offer-{customer}", *texts)
    assert out[0]["flow"]["awaiting"] == "offer", out[0]
    picked = out[1]
    assert picked["flow"]["workflow"] == "invoice" and picked["flow"]["awaiting"] == "title", picked
    assert all(o["ticket_id"] is None for o in out), [o["reply"] for o in out]
    issued = writes_of(svc, "issue_invoice")
    assert [(w["order_id"], w["arguments"]["title"]) for w in issued] == [(order, title)], issued
    assert out[-1]["flow"]["status"] == "completed", out[-1]


@pytest.mark.parametrize("customer, texts", [
    ("c5", ("发票能开吗？要公司抬头的", "毛巾那个订单")),
    ("c5", ("发票能开吗？要公司抬头的", "100271")),
])
def test_an_order_named_alone_takes_the_offer_whatever_the_classifier_guessed(api, svc, customer, texts):
    """"毛巾那个订单" to "shall I issue an invoice for one of your orders?" names the order the task asks for first; to
    the classifier an order named alone sounds like an order-status question, so it was served as one (the order's
    status, the offer gone). The task starts with that order and asks for the title."""
    out = talk(api, customer, f"l-offer-bare-{texts[-1]}", *texts)
    assert (out[0].get("flow") or {}).get("awaiting") == "offer", out[0]
    picked = out[1]
    assert picked["flow"]["workflow"] == "invoice" and picked["flow"]["awaiting"] == "title", picked
    assert "100271" in picked["reply"]["text"] and picked["ticket_id"] is None


def flows_of(svc, conversation: str) -> list[dict]:
    return rows(svc.pool, "SELECT f.workflow, f.status, f.outcome FROM flow_instances f JOIN conversations c "
                          "ON c.id::text = f.conversation_id WHERE c.external_id = %s ORDER BY f.created_at", conversation)


@pytest.mark.parametrize("customer, question, statement, outcome, says", [
    ("c1", "发票能开吗？要公司抬头的", "这是我妹妹帮我买的", "lapsed", None),
    ("c2", "how do I get an invoice?", "my sister bought it for me", "lapsed", None),
    ("c1", "发票能开吗？要公司抬头的", "好的，我先问问我老婆", "declined", "先不办理"),
    ("c2", "how do I get an invoice?", "ok I will think about it", "declined", "won't start it"),
    # thanks, with at most an acknowledgement, close the exchange: no yes ("yes thanks" is one)
    ("c2", "how do I get an invoice?", "ok thanks", "lapsed", None),
    ("c1", "发票能开吗？要公司抬头的", "好的，谢谢", "lapsed", None),
])
def test_a_statement_that_gives_nothing_the_offered_task_asks_does_not_start_it(api, svc, customer, question, statement,
                                                                               outcome, says):
    """The answer offers the invoice; the customer says something that names none of their orders and no order
    number: the offer lapses and the message is served as the new message it is (putting it off declines it,
    politely): no task starts, nobody is handed over, nothing is written. "Yes" to the same offer still starts it."""
    conv = f"l-offer-not-{customer}-{outcome}-{len(statement)}"
    out = talk(api, customer, conv, question, statement)
    assert out[0]["flow"]["awaiting"] == "offer", out[0]
    after = out[1]
    assert all(o["ticket_id"] is None for o in out) and tickets_of(svc, conv) == 0, [o["reply"] for o in out]
    assert [(f["workflow"], f["status"], f["outcome"]) for f in flows_of(svc, conv)] == [
        ("invoice", "cancelled", outcome)], after
    assert (after.get("flow") or {}).get("status") != "waiting", after
    if says is not None:
        assert says in after["reply"]["text"], after["reply"]
    assert rows(svc.pool, "SELECT to_regclass('shop.writes') IS NULL AS none")[0]["none"] \
        or writes_of(svc, "issue_invoice") == []
    yes = talk(api, customer, conv + "-yes", question, "是的" if customer == "c1" else "yes")
    assert yes[1]["flow"]["workflow"] == "invoice" and yes[1]["flow"]["awaiting"] == "order_id", yes[1]
