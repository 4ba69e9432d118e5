"""The harness (checks before any model), in zh and en, on a real Postgres through the real pipeline."""

from __future__ import annotations

import textwrap

import pytest

from router.classify import IntentClassifier
from router.turn.escalation import Policy, PolicyError, load_policy
from router.turn.guards import Harness, customer_flags, normalise, set_sensitive, squash
from router.classify.intents import BUNDLED_INTENTS, load_intents
from router.telemetry.metrics import Metrics
from router.turn.pipeline import Pipeline
from router.problems import Problem
from router.schemas import InboundMessage


@pytest.fixture(scope="module")
def rules_classifier():
    """The real classifier with the bundled intents, rules channel only (no encoder needed here)."""
    return IntentClassifier.from_config(load_intents(BUNDLED_INTENTS), None)


def make_pipeline(pool, classifier, policy: Policy | None = None):
    from router.turn.decider import Decider

    return Pipeline(pool, Metrics(), Decider(policy=policy or load_policy(), classifier=classifier))


_n = iter(range(1_000_000))


def send(pipe, text, *, conv="c-1", customer="u-1", channel="web", message_id=None):
    msg = InboundMessage(channel=channel, conversation_external_id=conv, customer_id=customer,
                         message_external_id=message_id or f"m-{next(_n)}", text=text)
    return pipe.handle(msg)[0]


def outbox_count(pool) -> int:
    with pool.connection() as conn:
        return conn.execute("SELECT count(*) AS n FROM outbox").fetchone()["n"]


def test_normalise_folds_width_case_and_traditional_chinese():
    assert normalise("ＳＴＯＰ") == "stop"
    assert normalise("轉人工") == "转人工"
    assert squash(" Stop! ") == "stop" and squash("退订。") == "退订"


@pytest.mark.parametrize("word", ["STOP", "stop", " Stop. ", "unsubscribe", "退订", "退訂", "TD"])
def test_stop_marks_do_not_contact_and_silences_everything(pool, rules_classifier, word):
    pipe = make_pipeline(pool, rules_classifier)
    out = send(pipe, word)
    assert out["reply"] is None and out["ticket_id"] is None
    assert out["decision"]["channel"] == "harness" and out["decision"]["explanation"]["rule"] == "stop"
    with pool.connection() as conn:
        assert customer_flags(conn, "web", "u-1")["do_not_contact"] is True
    # later messages, in any language, get no reply and nothing is queued; they are still stored
    for text in ["where is my order?", "我的订单到哪了", "I want a refund"]:
        out = send(pipe, text)
        assert out["reply"] is None
        assert out["decision"]["explanation"]["rule"] == "do_not_contact"
    assert outbox_count(pool) == 0
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM messages WHERE direction = 'in'").fetchone()["n"] == 4


@pytest.mark.parametrize("start", ["START", "订阅"])
def test_start_lifts_do_not_contact(pool, rules_classifier, start):
    pipe = make_pipeline(pool, rules_classifier)
    send(pipe, "退订")
    out = send(pipe, start)
    assert out["decision"]["explanation"]["rule"] == "start" and out["reply"]["text"]
    with pool.connection() as conn:
        assert customer_flags(conn, "web", "u-1")["do_not_contact"] is False
    out = send(pipe, "order status NW20261015083142")
    assert out["decision"]["channel"] == "rules" and out["decision"]["intent"] == "order_query"
    # from a customer who never stopped, "start" is an ordinary message
    out = send(pipe, start, customer="u-2", conv="c-2")
    assert out["decision"]["channel"] != "harness"


@pytest.mark.parametrize("text", ["how do I stop my order from shipping?", "我想退订单", "stop sending me the wrong size"])
def test_stop_must_be_the_whole_message(pool, rules_classifier, text):
    pipe = make_pipeline(pool, rules_classifier)
    out = send(pipe, text)
    assert out["decision"]["channel"] != "harness"
    with pool.connection() as conn:
        assert customer_flags(conn, "web", "u-1")["do_not_contact"] is False


@pytest.mark.parametrize("text,matched", [
    ("我真的不想活了", "不想活了"), ("最近压力很大，想自杀", "自杀"), ("我要炸了你们公司", "炸了你们"),
    ("I want to kill myself", "kill myself"), ("there is a BOMB in your warehouse", "bomb"),
    ("I'm having suicidal thoughts", "suicidal"),
])
def test_crisis_goes_to_l3_urgent_with_the_safe_reply(pool, rules_classifier, text, matched):
    pipe = make_pipeline(pool, rules_classifier)
    out = send(pipe, text)
    d = out["decision"]
    assert d["tier"] == "L3" and d["channel"] == "harness"
    assert d["escalation"] == {"rule": "crisis", "reason": f"crisis words ({matched})", "priority": "urgent"}
    hotline = load_policy().harness.hotline
    assert hotline in out["reply"]["text"]
    # in the customer's language only
    zh = any("\u4e00" <= ch <= "\u9fff" for ch in text)
    assert ("请立即拨打" in out["reply"]["text"]) == zh and ("please call" in out["reply"]["text"]) == (not zh)
    assert out["lang"] == out["reply"]["lang"] == ("zh" if zh else "en")
    assert out["state"] == "l3_queuing"
    assert d["intent"] is None   # no model ran
    with pool.connection() as conn:
        row = conn.execute("SELECT kind, payload FROM outbox").fetchone()
        assert row["kind"] == "reply" and hotline in row["payload"]["text"]


def test_crisis_of_a_stopped_customer_still_reaches_a_person_but_nothing_is_sent(pool, rules_classifier):
    pipe = make_pipeline(pool, rules_classifier)
    send(pipe, "STOP")
    out = send(pipe, "i want to end my life")
    assert out["decision"]["escalation"]["rule"] == "crisis" and out["state"] == "l3_queuing"
    assert out["reply"] is None and outbox_count(pool) == 0


def test_crisis_words_do_not_fire_on_ordinary_text():
    h = Harness(load_policy().harness)
    for text in ["the bomber jacket is too small", "where is my order", "我的订单到哪了", "kill the noise filter"]:
        assert h._crisis.find(text) is None, text


def _quota_policy(n=3, window=60) -> Policy:
    p = load_policy()
    return p.model_copy(update={"harness": p.harness.model_copy(
        update={"quota": p.harness.quota.model_copy(update={"max_messages": n, "window_seconds": window})})})


def test_quota_refuses_with_429_stores_nothing_and_routes_its_retry_later(pool, rules_classifier):
    pipe = make_pipeline(pool, rules_classifier, _quota_policy(3, 60))
    for i, text in enumerate(["order status NW20261015083142", "我的订单状态", "where is my order"]):
        send(pipe, text, conv=f"c-{i % 2}")          # the quota is per customer, across conversations
    with pool.connection() as conn:
        before = conn.execute("SELECT (SELECT count(*) FROM messages) AS m, (SELECT count(*) FROM conversations) AS c,"
                              " (SELECT count(*) FROM turns) AS t").fetchone()
    with pytest.raises(Problem) as err:
        send(pipe, "查订单", message_id="over-1", conv="c-new")
    p = err.value
    assert p.status == 429 and 1 <= p.extra["retry_after"] <= 60
    assert p.extra["headers"]["Retry-After"] == str(p.extra["retry_after"])
    assert "Nothing was stored" in p.detail and "kept" not in p.detail
    with pytest.raises(Problem):                      # hammering does not count against the window
        send(pipe, "查订单!!", message_id="over-2")
    with pool.connection() as conn:                   # nothing of the refused messages: not even the new conversation
        after = conn.execute("SELECT (SELECT count(*) FROM messages) AS m, (SELECT count(*) FROM conversations) AS c,"
                             " (SELECT count(*) FROM turns) AS t").fetchone()
        assert after == before
        assert conn.execute("SELECT 1 FROM messages WHERE external_id IN ('over-1', 'over-2')").fetchone() is None
    # another customer is unaffected
    assert send(pipe, "where is my order", customer="u-2", conv="other")["decision"]["intent"] == "order_query"
    # time passes: the window slides
    with pool.connection() as conn:
        conn.execute("UPDATE messages SET received_at = received_at - interval '61 seconds'")
    out = send(pipe, "查订单", message_id="over-1")       # the same message id, retried after Retry-After
    assert out["decision"]["intent"] == "order_query"
    assert send(pipe, "查订单", message_id="over-1") == out   # and now it is an ordinary idempotent replay


def test_sensitive_customer_goes_to_l3_or_gets_the_script(pool, rules_classifier):
    pipe = make_pipeline(pool, rules_classifier)
    with pool.connection() as conn:
        set_sensitive(conn, "web", "vip-1", True, note="legal case")
    out = send(pipe, "where is my order", customer="vip-1", conv="v-1")
    d = out["decision"]
    assert d["tier"] == "L3" and d["escalation"]["rule"] == "sensitive" and d["escalation"]["priority"] == "high"
    assert out["state"] == "l3_queuing" and d["intent"] is None

    p = load_policy()
    scripted = p.model_copy(update={"harness": p.harness.model_copy(update={"sensitive_action": "script"})})
    pipe = make_pipeline(pool, rules_classifier, scripted)
    out = send(pipe, "我的订单到哪了", customer="vip-1", conv="v-2")
    assert out["reply"]["text"] == p.harness.sensitive_script["zh"] and out["decision"]["tier"] is None
    assert out["state"] == "idle"


def test_policy_file_errors_name_line_and_field(tmp_path):
    bad = tmp_path / "policy.yaml"
    bad.write_text(textwrap.dedent("""\
        version: 1
        harness:
          quota:
            max_messages: 0
        escalation:
          refund_amount_over: lots
          priorities:
            human_request: normal
        """), encoding="utf-8")
    with pytest.raises(PolicyError) as err:
        load_policy(bad)
    msg = str(err.value)
    assert f"{bad}:4: harness.quota.max_messages" in msg
    assert f"{bad}:6: escalation.refund_amount_over" in msg
    bad.write_text("escalation:\n  priorities:\n    nonsense_rule: urgent\n", encoding="utf-8")
    with pytest.raises(PolicyError, match="nonsense_rule"):
        load_policy(bad)
    bad.write_text("harness: [unclosed\n", encoding="utf-8")
    with pytest.raises(PolicyError, match="not valid YAML"):
        load_policy(bad)
    assert load_policy().harness.quota.max_messages >= 1   # the bundled sample is valid
