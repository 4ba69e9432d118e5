"""The routing set (tests/fixtures/routing_set.jsonl, written for this project in customers' words, zh and en):
questions the bundled knowledge base answers, how-to questions, do-it-for-me requests, account-security cases
and questions the pack cannot answer, each the first message of a new conversation, through the whole gateway
over HTTP (the bundled intents on the e5 classifier, the whole bundled knowledge base, the workflows and the
example shop), as ``make run`` serves them.

Targets: at most 5 % of answerable questions open a ticket (and at most 10 % go unanswered); how-to questions
are answered (90 %), never started as a task (the task may be offered after the answer); requests start their task; hacked, frozen or stolen accounts
go to a person; a question the pack cannot answer gets no answer from the knowledge base (at most one in the
set); every reply is in the customer's language.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from routing_kit import api_client, flow_services

pytestmark = pytest.mark.slow
USES_WHOLE_PACK = True   # tests/conftest.py: the run computes the whole pack's vectors ahead

SET = Path(__file__).resolve().parents[2] / "fixtures" / "routing_set.jsonl"
HAN = re.compile(r"[\u4e00-\u9fff]")
_ids = itertools.count()


@pytest.fixture(scope="module")
def rows():
    out = [json.loads(line) for line in SET.read_text(encoding="utf-8").splitlines() if line.strip()]
    kinds = Counter(r["kind"] for r in out)
    assert len(out) >= 120 and {r["lang"] for r in out} == {"en", "zh"}
    assert set(kinds) == {"answer", "howto", "request", "security", "unanswerable"}, kinds
    return out


@pytest.fixture
def api(fresh_db, pg_server, template_dsn, e5_encoder, tmp_path):
    from router.turn.escalation import SAMPLE_POLICY

    policy = yaml.safe_load(SAMPLE_POLICY.read_text(encoding="utf-8"))
    policy["harness"]["quota"]["max_messages"] = 100000   # one shop customer writes every message of the set
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy, allow_unicode=True), encoding="utf-8")
    svc = flow_services(fresh_db, pg_server, template_dsn, e5_encoder, topics=None, policy_file=path)
    try:
        with api_client(svc) as client:
            yield client
    finally:
        svc.close()


def _post(api, text: str, conversation: str) -> dict:
    r = api.post("/v1/messages", json={"channel": "web", "conversation_id": conversation, "customer_id": "c1",
                                       "message_id": f"rs-{next(_ids)}", "text": text})
    assert r.status_code == 200, r.text
    return r.json()


def _started(out: dict) -> str | None:
    """The workflow the turn started as a task (an offer made after an answer is not a started task)."""
    flow = out.get("flow") or {}
    if not flow.get("workflow") or flow.get("awaiting") == "offer":
        return None
    return flow["workflow"]


def test_the_routing_set_answers_questions_and_starts_only_requests(api, rows):
    ticketed, tasked, unanswered, not_started, not_to_people, invented, wrong_lang = [], [], [], [], [], [], []
    offered, cited = Counter(), Counter()
    by_kind: dict[str, Counter] = {}
    for i, r in enumerate(rows):
        out = _post(api, r["text"], f"rs-{i}")
        reply = out.get("reply") or {}
        citations = [c.get("doc_id") or "" for c in reply.get("citations") or []]
        answered = out["decision"]["tier"] == "L1" and bool(citations)
        started = _started(out)
        kind = r["kind"]
        by_kind.setdefault(kind, Counter())[out["outcome"]] += 1
        line = (r["text"], out["decision"]["intent"], out["outcome"], (reply.get("text") or "")[:60])
        if kind in ("answer", "howto"):
            if out["ticket_id"]:
                ticketed.append(line)
            if not answered:
                unanswered.append(line)
            if started:
                tasked.append((*line, started))
            if answered and any(c.startswith(tuple(r["topic"])) for c in citations):
                cited[kind] += 1
            if (out.get("flow") or {}).get("awaiting") == "offer":
                offered[kind] += 1
        elif kind == "request":
            if started != r["task"] or out["ticket_id"]:
                not_started.append((*line, started, r["task"]))
        elif kind == "security":
            if out["decision"]["tier"] != "L3" or not out["ticket_id"]:
                not_to_people.append(line)
        elif answered:
            invented.append((*line, citations, out["decision"]["explanation"].get("answer")))
        text = reply.get("text") or ""
        shop_data = bool(started)   # a task's reply lists the shop's own records (product names as the shop has them)
        if text and (reply.get("lang") != r["lang"] or (not shop_data and bool(HAN.search(text)) != (r["lang"] == "zh"))):
            wrong_lang.append((r["text"], reply.get("lang"), text[:60]))
    n = Counter(r["kind"] for r in rows)
    answerable = n["answer"] + n["howto"]
    figures = {"messages": len(rows), "answerable": answerable,
               "tickets_for_answerable": len(ticketed), "answerable_not_answered": len(unanswered),
               "howto_tasked": sum(1 for t in tasked if t[0] in {r["text"] for r in rows if r["kind"] == "howto"}),
               "answer_tasked": sum(1 for t in tasked if t[0] in {r["text"] for r in rows if r["kind"] == "answer"}),
               "requests_not_started": len(not_started), "requests": n["request"],
               "security_not_to_people": len(not_to_people), "security": n["security"],
               "unanswerable_answered": len(invented), "unanswerable": n["unanswerable"],
               "cited_expected_article": dict(cited), "task_offered": dict(offered), "wrong_language": len(wrong_lang)}
    print("\nrouting set:", json.dumps(figures, ensure_ascii=False))
    print("outcomes by kind:", "; ".join(f"{k} {dict(v)}" for k, v in sorted(by_kind.items())))
    for name, items in (("ticketed", ticketed), ("not answered", unanswered), ("tasked", tasked),
                        ("requests not started", not_started), ("security not to people", not_to_people),
                        ("unanswerable answered", invented), ("wrong language", wrong_lang)):
        for item in items:
            print(f"  {name}: {item}")
    assert len(ticketed) <= 0.05 * answerable, ticketed
    howto = {r["text"] for r in rows if r["kind"] == "howto"}
    assert [t for t in tasked if t[0] in howto] == [], tasked
    assert len(tasked) <= 0.02 * answerable, tasked
    assert len([u for u in unanswered if u[0] in howto]) <= 0.1 * n["howto"], unanswered
    assert len(unanswered) <= 0.1 * answerable, unanswered
    assert not_started == [], not_started
    assert not_to_people == [], not_to_people
    assert len(invented) <= 1, invented
    assert wrong_lang == [], wrong_lang


def test_an_answer_offers_the_task_and_a_yes_starts_it(api):
    """"衣服不合适能退吗" is answered with the return rules and the refund offered in Chinese; "是的" starts the
    refund (the flow asks which order); "no thanks" to an offer starts nothing; another question lets it lapse."""
    out = _post(api, "衣服不合适能退吗", "offer-zh")
    reply = out["reply"]
    assert out["decision"]["tier"] == "L1" and out["ticket_id"] is None and reply["citations"], out
    assert out["flow"]["workflow"] == "refund" and out["flow"]["awaiting"] == "offer", out["flow"]
    assert "需要我为您的订单办理“退款”吗" in reply["text"] and reply["lang"] == "zh", reply["text"]
    assert reply["suggestions"] == ["是", "否"]
    yes = _post(api, "是的", "offer-zh")
    assert yes["ticket_id"] is None and yes["flow"]["workflow"] == "refund", yes
    assert yes["flow"]["status"] == "waiting" and yes["flow"]["awaiting"] == "order_id", yes["flow"]
    assert "订单" in yes["reply"]["text"], yes["reply"]["text"]

    out = _post(api, "how do I get an e-invoice", "offer-en")
    assert out["decision"]["tier"] == "L1" and out["reply"]["citations"][0]["doc_id"].startswith("invoice-")
    assert out["flow"]["workflow"] == "invoice" and out["flow"]["awaiting"] == "offer"
    assert "Would you like me to help with one of your orders (issue an invoice)?" in out["reply"]["text"]
    no = _post(api, "no thanks", "offer-en")
    assert no["flow"]["workflow"] == "invoice" and no["flow"]["status"] == "cancelled", no["flow"]
    assert no["ticket_id"] is None and "won't start it" in no["reply"]["text"]

    _post(api, "how do I cancel an order?", "offer-lapse")
    other = _post(api, "do you take PayPal?", "offer-lapse")   # moves on: the cancel offer lapses unanswered
    assert other["reply"]["citations"][0]["doc_id"].startswith("payment-methods"), other
    assert (other.get("flow") or {}).get("workflow") != "cancel_order", other["flow"]


def test_a_forgotten_password_is_answered_and_a_hacked_account_goes_to_a_person(api):
    for text in ("I forgot my password", "密码忘了怎么办", "how do I reset my password?"):
        out = _post(api, text, f"pw-{text}")
        assert out["decision"]["tier"] == "L1" and out["ticket_id"] is None, (text, out["decision"])
        assert out["reply"]["citations"][0]["doc_id"].startswith("password-reset"), (text, out["reply"])
        assert out["decision"]["escalation"] is None
    for text in ("my account was hacked, I forgot my password now", "密码被人改了，不是我本人"):
        out = _post(api, text, f"sec-{text}")
        assert out["decision"]["tier"] == "L3" and out["ticket_id"], (text, out["decision"])
        assert out["decision"]["escalation"]["rule"] == "account_security", out["decision"]


def test_a_problem_told_as_a_statement_is_answered_from_its_troubleshooting_entry(api):
    """"my coupon doesn't work" asks why and what to do: the technical-issue intent is an assist ticket, but the
    help centre's "Why can't I use my coupon?" answers it (L1, no ticket); a problem the pack has no entry for
    ("the app keeps crashing") still goes to a colleague, and a locked-out customer whose password was changed
    by someone else to a person, and a problem with an intent's own task ("I can't change my address") starts it."""
    for text, doc in (("my coupon doesn't work", "coupons-en"), ("优惠券用不了", "coupons-zh"),
                      ("my payment failed", "payment-failed-en"), ("验证码收不到", "password-reset-zh")):
        out = _post(api, text, f"problem-{text}")
        assert out["decision"]["tier"] == "L1" and out["ticket_id"] is None, (text, out["decision"])
        assert out["reply"]["citations"][0]["doc_id"] == doc, (text, out["reply"])
    crash = _post(api, "the app keeps crashing", "problem-crash")
    assert crash["decision"]["tier"] == "L2" and crash["ticket_id"] and not crash["reply"].get("citations"), crash
    hacked = _post(api, "I can't log in, someone changed my password", "problem-hacked")
    assert hacked["decision"]["tier"] == "L3" and hacked["ticket_id"], hacked["decision"]
    # a problem with the task an intent does for the customer wants it done: the task starts
    task = _post(api, "I can't change my address", "problem-task")
    assert task["flow"]["workflow"] == "change_address" and task["flow"]["awaiting"] != "offer", task["flow"]


def test_an_item_that_arrived_broken_is_answered_with_what_the_shop_offers(api):
    """"the item arrived broken", "收到的东西坏了": neither the customer's parcel to look up, nor a complaint for a
    person, nor out of scope: the compensation policy answers it (report within 48 hours, replacement or refund);
    a refund asked for beside the damage starts the refund."""
    for text, doc in (("the item arrived broken", "compensation-policy-en"), ("received a damaged product",
                      "compensation-policy-en"), ("收到的东西坏了", "compensation-policy-zh"),
                      ("收到的杯子碎了", "compensation-policy-zh")):
        out = _post(api, text, f"damaged-{text}")
        assert out["decision"]["intent"] == "damaged_item", (text, out["decision"])
        assert out["decision"]["tier"] == "L1" and out["ticket_id"] is None, (text, out["decision"])
        assert out["reply"]["citations"][0]["doc_id"] == doc and "48" in out["reply"]["text"], (text, out["reply"])
    refund = _post(api, "the kettle I got leaks, I want my money back", "damaged-refund")
    assert refund["flow"]["workflow"] == "refund" and refund["flow"]["awaiting"] != "offer", refund["flow"]


def test_damage_the_classifier_is_sure_of_is_answered_from_its_topics_when_another_article_scores_alike(api):
    """"the screen is cracked on arrival" is as close to the warranty's accidental damage as to the compensation for
    a broken delivery, "快递到了盒子都压坏了" to delayed parcels, "东西坏了" to the warranty (the knowledge base unsure):
    the classifier is sure of damaged_item, so its topic articles lead among passages retrieval ranks alike and the
    compensation policy answers (report within 48 hours), at L1 with no ticket."""
    for text, doc in (("the screen is cracked on arrival", "compensation-policy-en"),
                      ("快递到了盒子都压坏了", "compensation-policy-zh"), ("东西坏了", "compensation-policy-zh"),
                      ("打开包裹发现杯子裂了", "compensation-policy-zh")):
        out = _post(api, text, f"prior-{text}")
        assert out["decision"]["intent"] == "damaged_item", (text, out["decision"])
        assert out["decision"]["tier"] == "L1" and out["ticket_id"] is None, (text, out["decision"])
        reply = out["reply"]
        assert reply["citations"][0]["doc_id"] == doc and "48" in reply["text"], (text, reply)
        assert not reply["text"].lstrip().startswith(("Q:", "问")), (text, reply["text"])
        assert bool(HAN.search(reply["text"])) == bool(HAN.search(text)), (text, reply["text"])


def test_something_sent_that_never_came_is_answered_and_a_parcel_never_got_stays_the_lookups(api):
    """"I didn't get the verification code" tells a problem as "验证码收不到" does: the technical-issue intent is an
    assist ticket, but the password article's "Not receiving the verification code" answers it (L1, no ticket). A
    parcel marked delivered but never got is the order lookup's own report, as before: the order's status with the
    lost-parcel advice, never the password article."""
    for text, doc in (("I didn't get the verification code", "password-reset-en"),
                      ("haven't received the SMS code", "password-reset-en"), ("验证码没收到", "password-reset-zh")):
        out = _post(api, text, f"unsent-{text}")
        assert out["decision"]["tier"] == "L1" and out["ticket_id"] is None, (text, out["decision"])
        assert out["reply"]["citations"][0]["doc_id"] == doc, (text, out["reply"])
    for text, advice in (("my order was delivered but I never got it", "delayed-lost-parcels-en"),
                         ("it says delivered but I didn't receive my package", "delayed-lost-parcels-en"),
                         ("包裹显示签收了但我没收到", "delayed-lost-parcels-zh"), ("my parcel never arrived", None)):
        out = _post(api, text, f"parcel-{text}")
        cited = [c["doc_id"] for c in (out.get("reply") or {}).get("citations") or []]
        assert out["decision"]["intent"] == "shipping_status" and out["ticket_id"] is None, (text, out["decision"])
        assert (out.get("flow") or {}).get("workflow") == "order_status", (text, out)
        assert not any(d.startswith("password-reset") for d in cited), (text, cited)
        if advice:
            assert "100230" in out["reply"]["text"] and cited[0] == advice, (text, out["reply"])


def test_a_question_as_likely_about_the_policy_as_about_an_own_order_is_answered_then_the_lookup_offered(api):
    """"when will my refund show on my Visa?" reads as the customer's refund status and the refund-times question
    within a hair of each other (either may lead): the knowledge base answers it (3–7 business days) and the lookup
    is offered after, never a new refund (the task of the cited article); a "yes" starts it. A lookup said plainly ("has my refund been processed?") is looked up at once."""
    out = _post(api, "when will my refund show on my Visa?", "close-en")
    reply = out["reply"]
    assert out["decision"]["tier"] == "L1" and out["ticket_id"] is None, out["decision"]
    assert reply["citations"][0]["doc_id"] == "refund-timelines-en" and "3–7 business days" in reply["text"], reply
    assert out["flow"]["workflow"] == "order_status" and out["flow"]["awaiting"] == "offer", out["flow"]
    assert "Would you like me to help with one of your orders (order status)?" in reply["text"], reply["text"]
    yes = _post(api, "yes please", "close-en")
    assert yes["flow"]["workflow"] == "order_status" and yes["flow"]["awaiting"] != "offer", yes["flow"]
    assert yes["ticket_id"] is None and "order" in yes["reply"]["text"].lower(), yes["reply"]

    plain = _post(api, "has my refund been processed?", "close-plain")
    assert plain["flow"]["workflow"] == "order_status" and plain["flow"]["awaiting"] != "offer", plain["flow"]
    assert not plain["reply"].get("citations"), plain["reply"]


def test_how_to_change_a_phone_number_and_who_pays_return_shipping_are_answered_whole(api):
    """"how do I change my phone number on my account?" gets the section on a lost phone number, which says where
    to start and that the new number is linked after review, not the FAQ's shorthand that names a button alone;
    "退货要自己出运费吗" gets the return-shipping article's general rule (who pays depends on the reason, then the
    cases), not the FAQ entry about a broken item, in Chinese as in English."""
    out = _post(api, "how do I change my phone number on my account?", "phone-change")
    reply = out["reply"]
    assert out["decision"]["tier"] == "L1" and reply["citations"][0]["doc_id"] == "password-reset-en", out
    assert "on the reset page" in reply["text"] and "link your new phone number" in reply["text"], reply["text"]
    for text, doc, rule, case in (("退货要自己出运费吗", "return-shipping-cost-zh", "取决于退货的原因", "买家承担运费"),
                                  ("do I have to pay for return shipping?", "return-shipping-cost-en",
                                   "depends on why you are returning it", "paid by you")):
        out = _post(api, text, f"return-postage-{text}")
        reply = out["reply"]
        assert out["decision"]["tier"] == "L1" and reply["citations"][0]["doc_id"] == doc, (text, out)
        assert rule in reply["text"] and case in reply["text"], (text, reply["text"])
        assert bool(HAN.search(reply["text"])) == (doc.endswith("-zh")), reply["text"]


# Questions the knowledge base answers reach it: the shop's phone number is neither who the bot is nor a person; a
# part of a parcel missing is the compensation policy's missing item, not the order lookup; whether an order can be
# changed is answered ("items in a paid order cannot be edited"), not started as a lookup asking for the order number.

@pytest.mark.parametrize("text,article,says", [
    ("what's your phone number?", "contact-hours-en", "400-000-6688"),
    ("what is your customer service number", "contact-hours-en", "400-000-6688"),
    ("客服电话是多少", "contact-hours-zh", "400-000-6688"),
    ("你们的电话多少", "contact-hours-zh", "400-000-6688"),
    ("one item is missing from my package", "compensation-policy-en", None),
    ("can I add something to my order?", "order-change-address-en", None),
])
def test_the_question_is_answered_from_its_article(api, text, article, says):
    out = _post(api, text, f"qa-{next(_ids)}")
    reply = out.get("reply") or {}
    flow = out.get("flow") or {}
    assert out["ticket_id"] is None and out["decision"]["tier"] == "L1", (out["decision"], reply)
    assert flow.get("awaiting") in (None, "offer"), (flow, reply.get("text"))     # no lookup asking for an order
    assert reply.get("citations") and reply["citations"][0]["doc_id"] == article, (reply, out["decision"])
    if says is not None:
        assert says in reply["text"], reply["text"]


@pytest.mark.parametrize("text,intent", [
    ("my order came with something missing", "damaged_item"),
    ("包裹里少了一件", "damaged_item"),
    ("订单能加东西吗", "faq"),
    ("已经付款的订单可以修改尺码吗", "faq"),
])
def test_never_the_order_lookup(api, text, intent):
    """The classifier's part: the intent that answers, never the lookup that asks for the order number (what the
    knowledge base then finds for these words is its own)."""
    out = _post(api, text, f"qa-{next(_ids)}")
    flow = out.get("flow") or {}
    assert out["decision"]["intent"] == intent, out["decision"]
    assert flow.get("awaiting") != "order_id" and flow.get("workflow") in (None, "change_address"), flow


@pytest.mark.parametrize("text, workflow", [
    ("耳机能开个发票吗", "invoice"), ("杯子那单能开张发票吗", "invoice"), ("耳机那单可以开发票吗？", "invoice"),
    ("the mug I ordered is the wrong colour, can I return it?", "refund"), ("买的耳机不想要了，能退吗", "refund"),
])
def test_a_question_about_a_task_the_bot_does_is_answered_or_the_task_offered_never_a_ticket(api, text, workflow):
    """A question whose intent has a task the bot does for the customer ("can I get an invoice for my earbuds?")
    wants it done: the knowledge base's answer with the task offered after it, or, when the knowledge base cannot
    answer, the task offered alone. A colleague is never asked to answer it, and nothing starts before a yes."""
    out = _post(api, text, f"offer-{abs(hash(text))}")
    assert out["ticket_id"] is None and out["decision"]["tier"] == "L1", (text, out["decision"], out["reply"])
    assert out["flow"]["workflow"] == workflow and out["flow"]["awaiting"] == "offer", (text, out["flow"])


def test_a_question_that_reports_something_wrong_still_goes_to_a_colleague_when_unanswered(api):
    """"why is the amount on my invoice wrong?" asks why: no task is offered in place of an answer."""
    out = _post(api, "why is the amount on my invoice wrong? it doesn't match what I paid", "offer-wrong")
    assert (out.get("flow") or {}).get("awaiting") != "offer" or out["reply"]["citations"], (out["decision"],
                                                                                           out["reply"])
