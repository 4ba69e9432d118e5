"""A message read in the context of the conversation, end to end (HTTP, classifier, workflows, the MCP shop, the
knowledge base): what was just done is not offered again, a short follow-up to the last answer is answered about
it, and "when will it ship?" is told when."""

from __future__ import annotations

import itertools

import pytest

from routing_kit import rows, talk

pytestmark = pytest.mark.slow

_ids = itertools.count()
OFFER = ("Would you like me to help", "需要我为您的订单办理")
CLARIFY = ("did not quite get that", "没太明白")


def said(out: dict) -> str:
    return (out.get("reply") or {}).get("text") or ""


def tickets(svc) -> int:
    return rows(svc.pool, "SELECT count(*) AS n FROM tickets")[0]["n"]


def test_a_task_just_done_is_not_offered_again(api, svc):
    # the lookup's result was given a moment ago: the shipping answer goes alone
    for customer, conversation, texts in [
            ("c2", "o-en", ("where is my order 100241", "how long does shipping usually take?")),
            ("c1", "o-en-picked", ("where's my package", "100234", "how long does shipping usually take?")),
            ("c1", "o-zh", ("我的订单100234到哪了", "快递一般几天能到？")),
            # a write too: the refund just made is not offered beside the refund times
            ("c5", "o-zh-refund", ("订单100270我要退款", "50", "是的", "退款多久到账？"))]:
        *_, last = talk(api, customer, conversation, *texts)
        assert last["reply"]["citations"], (texts, said(last))
        assert not any(o in said(last) for o in OFFER), (texts, said(last))
        assert (last.get("flow") or {}).get("awaiting") != "offer", (texts, last.get("flow"))
    # nothing done yet in the conversation: the lookup is still offered
    fresh = talk(api, "c2", "o-fresh", "how long does shipping usually take?")[-1]
    assert any(o in said(fresh) for o in OFFER), said(fresh)
    assert tickets(svc) == 0


@pytest.mark.parametrize("customer,first,follow_up", [
    ("c1", "我的订单100234到哪了", "能快点吗"),
    ("c1", "我的订单100234到哪了", "为什么这么慢"),
    ("c3", "我的手机什么时候发货", "能不能早点到"),
    ("c2", "where is my order 100241", "can you make it faster?"),
    ("c2", "where is my order 100242", "any way to speed it up?"),
    ("c2", "where is my order 100241", "why is it so slow?"),
])
def test_a_short_follow_up_is_read_with_the_last_answer(api, svc, customer, first, follow_up):
    status, answer = talk(api, customer, f"f-{next(_ids)}", first, follow_up)
    assert (status.get("flow") or {}).get("status") == "completed", said(status)
    assert not any(c in said(answer) for c in CLARIFY), said(answer)
    assert answer["ticket_id"] is None and tickets(svc) == 0
    cited = [c["doc_id"] for c in answer["reply"]["citations"]]
    assert cited and all(d.startswith("shipping-times") for d in cited), (said(answer), cited)


def test_a_message_about_something_else_is_still_clarified(api, svc):
    for customer, first, other in [("c2", "where is my order 100241", "tell me a joke"),
                                   ("c2", "where is my order 100241", "what about the weather"),
                                   ("c1", "我的订单100234到哪了", "今天天气怎么样")]:
        _, out = talk(api, customer, f"w-{next(_ids)}", first, other)
        assert any(c in said(out) for c in CLARIFY), (other, said(out))


def test_when_it_ships_is_told_for_an_order_not_shipped_yet(api, svc):
    asked = [("c3", "我的手机什么时候发货", "16:00前付款的订单当天发货"),
             ("c2", "when will my order 100242 ship?", "dispatched the same day"),
             ("c2", "how soon will order 100242 be sent out?", "dispatched the same day"),
             ("c1", "订单100236什么时候能发出", "付款后发货")]
    for customer, text, promise in asked:
        out = talk(api, customer, f"s-{next(_ids)}", text)[-1]
        assert promise in said(out), (text, said(out))
    # asked which order first: the question's "when" is kept for the answer
    _, picked = talk(api, "c2", "s-picked", "when will my order ship?", "100242")
    assert "dispatched the same day" in said(picked), said(picked)
    # a plain status question is answered as before
    plain = talk(api, "c2", "s-plain", "where is my order 100242")[-1]
    assert said(plain) == "Order 100242 is paid (not shipped yet).", said(plain)


@pytest.mark.parametrize("customer,texts,name", [
    ("c1", ("我要开发票", "100230", "抬头是我的名字", "无", "是的"), "王小明"),
    ("c1", ("我要开发票", "100230", "就写我的名字吧", "无", "是的"), "王小明"),
    ("c2", ("I need an invoice for order 100240", "just use my name", "none", "yes"), "Emily Carter"),
])
def test_my_name_as_the_invoice_title_is_the_customers_name(api, svc, customer, texts, name):
    out = talk(api, customer, f"n-{next(_ids)}", *texts)
    assert out[-1]["flow"]["status"] == "completed", [said(o) for o in out]
    written = rows(svc.pool, "SELECT arguments FROM shop.writes WHERE tool = 'issue_invoice' ORDER BY id")
    assert [w["arguments"]["title"] for w in written] == [name], [said(o) for o in out]
    assert all("名字" not in said(o) or o is out[0] for o in out[3:]), [said(o) for o in out]
