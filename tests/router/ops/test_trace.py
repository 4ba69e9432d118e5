"""Per-turn traces and their replay, CSAT feedback, and PII redaction in traces and logs."""

from __future__ import annotations

import io
import json
import logging
import re
import uuid

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from ops_testkit import agent_token, msg, wire_gateway
from keys_testkit import authorize

from router.telemetry.logs import JsonFormatter, _RequestIdFilter, redact, redact_obj, request_id_var

PROBLEM = "application/problem+json"
PII = {
    "phone": "13812345678",
    "email": "li.lei@example.com",
    "card": "4111 1111 1111 1111",
    "cn_id": "11010519491231002X",
}


# ------------------------------------------------------------------------------------------ redaction


def _luhn_complete(body: str) -> str:
    for check in "0123456789":
        digits = body + check
        total = sum((int(d) * 2 - 9 if int(d) * 2 > 9 else int(d) * 2) if i % 2 else int(d)
                    for i, d in enumerate(reversed(digits)))
        if total % 10 == 0:
            return digits
    raise AssertionError


cn_mobiles = st.builds(lambda p, rest, fmt: fmt.format(p=p, a=rest[:4], b=rest[4:]),
                       st.sampled_from(["13", "15", "17", "18", "19"]).flatmap(
                           lambda two: st.sampled_from([two + d for d in "0123456789"])),
                       st.text("0123456789", min_size=8, max_size=8),
                       st.sampled_from(["{p}{a}{b}", "{p} {a} {b}", "{p}-{a}-{b}", "+86 {p}{a}{b}", "+86-{p}-{a}-{b}",
                                        "0086{p}{a}{b}"]))
cards = st.builds(lambda body, sep: sep.join(re.findall(".{1,4}", _luhn_complete(body))),
                  st.text("0123456789", min_size=15, max_size=15).filter(lambda s: s[0] != "0"),
                  st.sampled_from(["", " ", "-"]))
cn_ids = st.builds(lambda region, y, m, d, seq, chk: f"{region}{y}{m:02d}{d:02d}{seq}{chk}",
                   st.text("0123456789", min_size=6, max_size=6).filter(lambda s: s[0] != "0"),
                   st.integers(1930, 2015), st.integers(1, 12), st.integers(1, 28),
                   st.text("0123456789", min_size=3, max_size=3), st.sampled_from(list("0123456789Xx")))
emails = st.from_regex(r"[a-z][a-z0-9._]{0,12}@[a-z][a-z0-9-]{0,10}\.(com|cn|com\.cn|org)", fullmatch=True)
contexts = st.sampled_from(["{}", "我的电话是{}谢谢", "call me at {} please", "号码：{}。", "({})", "id={}",
                            "请联系{}，或者明天再说", "Name: Li; contact {}; thanks"])


@settings(max_examples=150, deadline=None)
@given(pii=st.one_of(cn_mobiles, cards, cn_ids, emails), ctx=contexts)
def test_pii_is_masked_wherever_it_sits(pii, ctx):
    out = redact(ctx.format(pii))
    digits = re.sub(r"\D", "", pii)
    assert pii not in out
    if len(digits) >= 7:
        assert digits not in re.sub(r"\D", "", out), out
    assert re.search(r"\[(phone|card|id|email)\]", out)


@settings(max_examples=150, deadline=None)
@given(st.uuids(), st.floats(min_value=0, max_value=1, allow_nan=False), st.text("0123456789", min_size=14,
                                                                                 max_size=14))
def test_identifiers_and_scores_are_left_alone(u, f, order_digits):
    for text in (str(u), f"{f:.8f}", f"NW{order_digits}", f"ORD-{order_digits[:8]}-{order_digits[8:12]}",
                 "2026-11-30T18:36:43.572844+00:00", "returns-7day-en#0003"):
        assert redact(text) == text


def test_known_shapes():
    for text, label in [("+44 20 7946 0958", "phone"), ("(010) 6552-9988", "phone"), ("555-123-4567", "phone"),
                        ("tel:+1-202-555-0143", "phone"), ("400-820-8820", "phone")]:
        assert f"[{label}]" in redact(text), text
    # order numbers are not cards: the Luhn check fails
    assert redact("order 20261130123456") == "order 20261130123456"
    assert redact_obj({"a": ["13812345678", 5, None], "b": {"c": "x@y.org"}}) == {"a": ["[phone]", 5, None],
                                                                                  "b": {"c": "[email]"}}


def test_full_width_digits_are_masked_too():
    """IME input often types digits full-width; the masks must not miss (or half-mask) them."""
    out = redact("电话１３８１２３４５６７８，邮箱 a@b.com 或 a＠b.com，卡号４１１１ １１１１ １１１１ １１１１")
    assert "[phone]" in out and "[card]" in out and out.count("[email]") == 2
    assert not any(ch.isdigit() for ch in out)
    assert redact("订单号 ＯＲＤ-２０２４１２３") == "订单号 ＯＲＤ-2024123"   # not PII: digits normalised, kept


def test_logs_are_json_with_request_id_and_no_pii():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(_RequestIdFilter())
    logger = logging.getLogger("switchboard.test.logs")
    logger.addHandler(handler)
    logger.propagate = False
    token = request_id_var.set("req-123")
    try:
        logger.warning("customer %s wrote from %s", PII["phone"], PII["email"],
                       extra={"fields": {"card": PII["card"], "ticket": "87231722-498b-47eb-a62f-e891d17fe936"}})
    finally:
        request_id_var.reset(token)
        logger.removeHandler(handler)
    line = json.loads(stream.getvalue())
    assert line["request_id"] == "req-123" and line["level"] == "WARNING"
    assert line["msg"] == "customer [phone] wrote from [email]"
    assert line["card"] == "[card]" and line["ticket"] == "87231722-498b-47eb-a62f-e891d17fe936"


# ------------------------------------------------------------------------------------------ replay


@pytest.fixture
def gateway(services, tmp_path):
    wire_gateway(services, tmp_path)
    from router.app.factory import create_app

    with TestClient(create_app(services=services)) as client:
        authorize(client, services.pool)
        yield client, services


def _assert_no_pii(payload) -> None:
    text = json.dumps(payload, ensure_ascii=False)
    for value in PII.values():
        assert value not in text
    assert "1381234" not in text and "4111111111111111" not in re.sub(r"[ -]", "", text)


def test_trace_replays_a_conversation_with_pii_masked(gateway):
    client, services = gateway
    texts = ["where is my order",
             f"my phone is {PII['phone']}, mail {PII['email']}, card {PII['card']}, ID {PII['cn_id']}: i want a refund",
             "转人工"]
    turns = []
    for i, text in enumerate(texts):
        r = client.post("/v1/messages", json=msg("conv-pii", f"m-{i}", text))
        assert r.status_code == 200, r.text
        turns.append(r.json())
    cid = turns[0]["conversation_id"]
    sup = agent_token(services, "sup", "supervisor")
    admin = agent_token(services, "root", "admin")
    agent = agent_token(services, "ann", "agent")
    auth = {"Authorization": f"Bearer {sup}"}

    # the agent takes the ticket opened by "转人工" and answers: the replay shows it after that turn
    ticket_id = turns[-1]["ticket_id"]
    assert ticket_id, turns[-1]
    a_auth = {"Authorization": f"Bearer {agent}"}
    assert client.post(f"/v1/handoff/tickets/{ticket_id}/claim", headers=a_auth).status_code == 200
    r = client.post(f"/v1/handoff/tickets/{ticket_id}/messages", headers=a_auth,
                    json={"text": f"Hi, I will call you on {PII['phone']}"})
    assert r.status_code in (200, 201), r.text

    r = client.get(f"/v1/conversations/{cid}/trace", headers=auth)
    assert r.status_code == 200, r.text
    replay = r.json()
    _assert_no_pii(replay)
    assert replay["conversation"]["id"] == cid and replay["conversation"]["state"] == "l3_connected"
    assert [t["turn_id"] for t in replay["turns"]] == [t["turn_id"] for t in turns]
    assert replay["sessions"] == [{"session_no": 1, "turns": 3, "started_at": replay["turns"][0]["at"],
                                   "feedback": None}]
    state = "idle"
    for stored, t in zip(turns, replay["turns"], strict=True):
        assert t["decision"]["tier"] == stored["decision"]["tier"]
        assert t["decision"]["explanation"] == json.loads(json.dumps(stored["decision"]["explanation"]))
        names = [s["stage"] for s in t["stages"]]
        assert names[0] == "harness" and "decide" in names
        assert all(s["ms"] >= 0 for s in t["stages"])
        decide_ms = next(s["ms"] for s in t["stages"] if s["stage"] == "decide")
        assert decide_ms >= max(s["ms"] for s in t["stages"] if s["stage"] != "decide")
        # transitions recorded by the turn, chained from the state it found to the state it left
        chain = t["transitions"]
        assert t["state_after"] == stored["state"]
        if chain:
            assert chain[0]["from"] == state and chain[-1]["to"] == t["state_after"]
            assert all(a["to"] == b["from"] for a, b in zip(chain, chain[1:]))
        else:   # a message while a person reviews the draft joins the ticket: the state stays
            assert t["state_after"] == state == "l2_assisting"
        state = t["state_after"]
        assert t["inbound"]["external_id"] == f"m-{turns.index(stored)}"
    first = replay["turns"][0]
    assert first["classification"]["intent"] == "order_query" and first["classification"]["decided_by"] == "rules"
    retrieval = first["retrieval"]
    assert retrieval["candidates"], "L1 retrieval candidates with scores"
    assert all(isinstance(c["score"], float) and c["doc_id"] and c["title"] for c in retrieval["candidates"])
    assert [c["rank"] for c in retrieval["candidates"]] == list(range(1, len(retrieval["candidates"]) + 1))
    breakdown = next(s for s in first["stages"] if s["stage"] == "retrieval")["breakdown"]
    assert {"bm25", "dense"} <= {b["stage"] for b in breakdown}
    # the reply that went out, and its delivery state (no dispatcher runs here: pending)
    assert first["outbound"] and first["outbound"][0]["sender"] == "bot"
    assert first["outbound"][0]["delivery"]["status"] == "pending"
    assert first["outbound"][0]["text"] == (first["reply"] or {}).get("text")
    # the PII turn: its text is masked, not dropped
    pii_turn = replay["turns"][1]["inbound"]["text"]
    assert "[phone]" in pii_turn and "[email]" in pii_turn and "[card]" in pii_turn and "[id]" in pii_turn
    last = replay["turns"][2]
    assert last["decision"]["tier"] == "L3" and last["decision"]["escalation"]["rule"] == "human_request"
    assert last["escalation"]["rule"] == "human_request" and last["ticket"]["id"] == ticket_id
    actions = [e["action"] for e in last["events_after"] if e["type"] == "ticket_event"]
    # the refund turn opened an assist ticket; "转人工" escalated that same ticket, then an agent took it
    assert [e["action"] for e in replay["turns"][1]["events_after"]] == ["opened"]
    assert replay["turns"][1]["ticket"]["id"] == ticket_id and replay["turns"][1]["ticket"]["kind"] == "assist"
    assert actions[:3] == ["escalated", "claimed", "agent_message"], actions
    assert any(e["type"] == "transition" and e["to"] == "l3_connected" for e in last["events_after"])
    agent_out = [o for o in last["outbound"] if o["sender"] == "agent"]
    assert agent_out and agent_out[0]["text"] == "Hi, I will call you on [phone]"

    # admins may read it too; agents may not; strangers not at all
    assert client.get(f"/v1/conversations/{cid}/trace", headers={"Authorization": f"Bearer {admin}"}).status_code == 200
    for headers, status in (({}, 401), ({"Authorization": "Bearer sbt_nope"}, 401), (a_auth, 403)):
        r = client.get(f"/v1/conversations/{cid}/trace", headers=headers)
        assert r.status_code == status and r.headers["content-type"].startswith(PROBLEM), r.text
    r = client.get(f"/v1/conversations/{uuid.uuid4()}/trace", headers=auth)
    assert r.status_code == 404 and r.headers["content-type"].startswith(PROBLEM)
    r = client.get("/v1/conversations/not-a-known-id/trace", headers=auth)   # nor a client's id
    assert r.status_code == 404 and r.headers["content-type"].startswith(PROBLEM)
    r = client.get(f"/v1/conversations/{'x' * 201}/trace", headers=auth)
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM)

    # the trace stored in Postgres is itself redacted (it is what other tools read)
    with services.pool.connection() as conn:
        stored = conn.execute("SELECT trace FROM turns WHERE conversation_id = %s", (cid,)).fetchall()
    _assert_no_pii([s["trace"] for s in stored])


def test_trace_by_the_clients_conversation_id_over_http_and_the_cli(gateway, dsn, monkeypatch, capsys):
    client, services = gateway
    for i, text in enumerate(["where is my order", f"call me on {PII['phone']}"]):
        r = client.post("/v1/messages", json=msg("shop-chat-7", f"m-{i}", text))
        assert r.status_code == 200, r.text
    cid = r.json()["conversation_id"]
    auth = {"Authorization": f"Bearer {agent_token(services, 'sup', 'supervisor')}"}
    by_client = client.get("/v1/conversations/shop-chat-7/trace", headers=auth)
    assert by_client.status_code == 200, by_client.text
    assert by_client.json() == client.get(f"/v1/conversations/{cid}/trace", headers=auth).json()
    assert by_client.json()["conversation"]["id"] == cid and len(by_client.json()["turns"]) == 2
    assert client.get("/v1/conversations/shop-chat-7/trace?channel=web", headers=auth).status_code == 200
    r = client.get("/v1/conversations/shop-chat-7/trace?channel=app", headers=auth)
    assert r.status_code == 404 and r.headers["content-type"].startswith(PROBLEM)
    # the same client id on a second channel: the channel must be named
    r = client.post("/v1/messages", json={**msg("shop-chat-7", "m-app-0", "hello"), "channel": "app"})
    assert r.status_code == 200, r.text
    r = client.get("/v1/conversations/shop-chat-7/trace", headers=auth)
    assert r.status_code == 409 and "channel" in r.json()["detail"], r.text
    assert client.get("/v1/conversations/shop-chat-7/trace?channel=app", headers=auth).json()["conversation"][
        "channel"] == "app"

    from router.cli import main

    def cli(*args):
        monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
        monkeypatch.setattr("sys.argv", ["switchboard", *args])
        with pytest.raises(SystemExit) as stop:
            main()
        out = capsys.readouterr()
        return stop.value.code or 0, out.out, out.err

    code, out, _ = cli("trace", "shop-chat-7", "--channel", "web", "--json")
    assert code == 0 and json.loads(out) == by_client.json()
    code, text, _ = cli("trace", "shop-chat-7", "--channel", "web")
    assert code == 0 and "conversation shop-chat-7 (web" in text and "> where is my order" in text
    assert "[phone]" in text and PII["phone"] not in text
    code, _, err = cli("trace", "shop-chat-7")
    assert code == 2 and "--channel" in err
    code, out, _ = cli("trace", "no-such-chat", "--json")
    assert code == 1 and "no conversation" in json.loads(out)["error"]


def test_feedback_is_idempotent_per_session_and_closes_a_resolved_session(gateway):
    client, services = gateway
    r = client.post("/v1/messages", json=msg("conv-fb", "m-1", "where is my order"))
    turn = r.json()
    cid = turn["conversation_id"]
    url = f"/v1/conversations/{cid}/feedback"
    before = client.get("/metrics").text

    r = client.post(url, json={"csat": 4, "comment": f"ok, call {PII['phone']}", "turn_id": turn["turn_id"]})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["csat"] == 4 and body["session_no"] == 1 and body["turn_id"] == turn["turn_id"]
    resolved = turn["state"] in ("l1_resolved", "l2_resolved", "feedback_pending")
    assert body["state"] == ("closed" if resolved else turn["state"])
    # the same rating again: the stored one, nothing new
    r2 = client.post(url, json={"csat": 4, "comment": f"ok, call {PII['phone']}", "turn_id": turn["turn_id"]})
    assert r2.status_code == 200 and r2.headers["idempotent-replayed"] == "true" and r2.json() == body
    # a different rating for the same session is a conflict
    r3 = client.post(url, json={"csat": 1})
    assert r3.status_code == 409 and r3.headers["content-type"].startswith(PROBLEM)
    assert r3.json()["existing"]["csat"] == 4
    with services.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM feedback").fetchone()["n"] == 1
    # bad input
    for bad in ({"csat": 6}, {"csat": 0}, {"csat": "great"}, {}, {"csat": 3, "extra": 1}, {"csat": 3, "comment": "x" * 2001}):
        r = client.post(url, json=bad)
        assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM), bad
    assert client.post(f"/v1/conversations/{uuid.uuid4()}/feedback", json={"csat": 3}).status_code == 404
    other = client.post("/v1/messages", json=msg("conv-other", "m-9", "hello")).json()
    r = client.post(url, json={"csat": 3, "turn_id": other["turn_id"]})
    assert r.status_code == 422 and "not a turn" in r.json()["detail"]
    # the rating counts once on /metrics and appears, masked, in the replay
    after = client.get("/metrics").text
    assert _sample(after, 'switchboard_csat_ratings_total{score="4"}') - \
        _sample(before, 'switchboard_csat_ratings_total{score="4"}') == 1
    sup = agent_token(services, "sup2", "supervisor")
    replay = client.get(f"/v1/conversations/{cid}/trace", headers={"Authorization": f"Bearer {sup}"}).json()
    assert replay["sessions"][0]["feedback"]["csat"] == 4
    assert replay["sessions"][0]["feedback"]["comment"] == "ok, call [phone]"
    if resolved:
        # the session is closed: the next message starts session 2, which can be rated again
        nxt = client.post("/v1/messages", json=msg("conv-fb", "m-2", "where is my order")).json()
        with services.pool.connection() as conn:
            assert conn.execute("SELECT session_no FROM conversations WHERE id = %s", (cid,)).fetchone()["session_no"] == 2
        r = client.post(url, json={"csat": 2, "turn_id": nxt["turn_id"]})
        assert r.status_code == 201 and r.json()["session_no"] == 2


def _sample(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
