"""Handoff under faults and bad input: malformed resume ids and cursors, streams of revoked tokens and
disabled agents, the per-token stream limit, lost after-commit notifications, and the approval audit."""

from __future__ import annotations

import base64
import json
import time
from contextlib import ExitStack, contextmanager

import httpx
import psycopg
from test_handoff_api import _outbox, _problem
from test_handoff_sse import Stream, live  # noqa: F401 - the live uvicorn fixture

from handoff import agents as agent_store
from handoff_testkit import bearer, events_of, make_config


def _cursor(values) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def test_malformed_last_event_id_and_cursors_are_422(api, make_agent):
    _, token = make_agent("ana")
    h = bearer(token)
    for bad in (b"\xb2", b"12a", b"-1", b"99999999999999999999"):   # b"\xb2" arrives as "²" (latin-1)
        r = api.get("/v1/handoff/events", headers={**h, "Last-Event-ID": bad})
        _problem(r, 422)
    infinity = base64.urlsafe_b64encode(b"[Infinity]").decode().rstrip("=")
    for cursor in (infinity, _cursor([1, "x", "y", "z"]).replace("MQ", "SW"), "%%%",
                   base64.urlsafe_b64encode(b'[Infinity, "2024-01-01T00:00:00+00:00", "2024-01-01T00:00:00+00:00", '
                                            b'"6f1c2b9e-0000-4000-8000-000000000000"]').decode().rstrip("="),
                   base64.urlsafe_b64encode(b'[NaN, "a", "b", "c"]').decode().rstrip("=")):
        _problem(api.get("/v1/handoff/tickets", params={"cursor": cursor}, headers=h), 422)


def _ended(stream: Stream) -> bool:
    got = stream.until(lambda e: e[0] == "end", timeout=20)
    return got[-1][0] == "end"


def test_streams_of_a_revoked_token_or_a_disabled_agent_end(live, pool, make_agent):  # noqa: F811
    url = f"{live[0]}/v1/handoff/events"
    assert live[1].config.stream_recheck_seconds < 5
    _, ana = make_agent("ana")
    _, bob = make_agent("bob")
    sa, sb = Stream(url, ana), Stream(url, bob)
    try:
        for s in (sa, sb):
            assert s.next()[2] == 200 and s.next()[0] == "ready"
        with pool.connection() as conn:
            agent_store.revoke_token(conn, ana, actor="test")
            agent_store.disable_agent(conn, "bob", actor="test")
        assert _ended(sa) and _ended(sb)
    finally:
        sa.close()
        sb.close()


@contextmanager
def _stream(url: str, token: str):
    """An event stream read in this thread up to its ``ready`` event; leaving the block closes its socket."""
    with httpx.Client(timeout=httpx.Timeout(30.0, read=60.0)) as c, \
            c.stream("GET", url, headers=bearer(token)) as r:
        lines = r.iter_lines()   # kept referenced: a collected line iterator closes the connection
        if r.status_code == 200:
            for line in lines:
                if line.startswith("event:") and line[6:].strip() == "ready":
                    break
        yield r


def test_a_token_may_hold_only_a_few_streams(live, make_agent):  # noqa: F811
    url, service = live
    service.config = make_config(max_streams_per_token=2)
    events = f"{url}/v1/handoff/events"
    _, ana = make_agent("ana")
    _, bob = make_agent("bob")
    with ExitStack() as held:
        first = held.enter_context(_stream(events, ana))
        with _stream(events, ana) as second:
            assert first.status_code == 200 and second.status_code == 200
            r = httpx.get(events, headers=bearer(ana), timeout=10)
            assert r.status_code == 429 and r.headers["content-type"].startswith("application/problem+json")
            assert r.json()["limit"] == 2
            with _stream(events, bob) as other:   # another token is not affected
                assert other.status_code == 200
        # the second stream is closed: its slot is free once the server has seen the disconnect
        freed = False
        deadline = time.monotonic() + 30
        while not freed and time.monotonic() < deadline:
            with _stream(events, ana) as again:
                freed = again.status_code == 200
            if not freed:
                time.sleep(0.25)
        assert freed


def test_a_notification_lost_after_commit_is_republished_on_a_fresh_connection(live, hs, pool, dsn, conversation,
                                                                              make_agent):  # noqa: F811
    _, sue = make_agent("sue", role="supervisor")
    s = Stream(f"{live[0]}/v1/handoff/events", sue)
    try:
        assert s.next()[2] == 200 and s.next()[0] == "ready"
        notes: list[str] = []
        with pool.connection() as conn:
            with conn.transaction():
                t = hs.open_ticket(conn, kind="handoff", conversation_id=conversation(), channel="web",
                                   customer_id="u1", reason="asks_for_human", context={}, notes=notes)
            pid = conn.info.backend_pid
            with psycopg.connect(dsn, autocommit=True) as admin:   # the connection dies after the commit
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            hs.publish(conn, notes)
        got = s.until(lambda e: e[0] == "ticket" and e[2]["ticket_id"] == t["id"])
        assert got[-1][2]["action"] == "opened"
    finally:
        s.close()


def test_a_notification_that_cannot_be_sent_makes_the_screens_resync(live, pool, make_agent):  # noqa: F811
    url, service = live
    _, sue = make_agent("sue", role="supervisor")
    s = Stream(f"{url}/v1/handoff/events", sue)
    try:
        assert s.next()[2] == 200 and s.next()[0] == "ready"
        too_long = json.dumps({"id": 1, "pad": "x" * 9000})   # Postgres refuses NOTIFY payloads over 8000 bytes
        with pool.connection() as conn:
            service.publish(conn, [too_long])
        got = s.until(lambda e: e[0] in ("resync", "ticket"))
        assert got[-1][0] == "resync"
    finally:
        s.close()


def test_the_approval_audit_records_the_proposed_action(api, pool, make_agent, open_ticket, conversation):
    _, sue = make_agent("sue", role="supervisor")
    conv = conversation(state="l2_assisting")
    draft = {"text": "Here is how to reset it.", "proposed_action": "reply to password_reset with the draft"}
    t = open_ticket(conversation_id=conv, kind="assist", draft=draft, reason="intent password_reset")
    base = f"/v1/handoff/tickets/{t['id']}"
    assert api.post(f"{base}/claim", headers=bearer(sue)).status_code == 200
    assert api.post(f"{base}/approve", headers=bearer(sue)).status_code == 200
    ev = events_of(pool, t["id"])[-1]
    assert ev["action"] == "approved" and ev["payload"]["action"] == draft["proposed_action"]


def test_edit_and_send_of_a_draft_with_an_amount_needs_the_same_approval_as_approve(api, pool, make_agent,
                                                                                    open_ticket, conversation):
    ana_agent, ana = make_agent("ana")                    # approval level auto: <= 50
    sue_agent, sue = make_agent("sue", role="supervisor")  # <= 500
    conv = conversation(state="l2_assisting")
    # the ticket was opened without an amount; the draft's proposed action carries one
    draft = {"text": "已为您退款 300 元。", "proposed_action": {"type": "refund", "amount": 300, "currency": "CNY"}}
    t = open_ticket(conversation_id=conv, kind="assist", draft=draft, reason="refund_request")
    base = f"/v1/handoff/tickets/{t['id']}"
    assert api.post(f"{base}/claim", headers=bearer(ana)).status_code == 200
    for path, body in (("approve", None), ("edit-and-send", {"text": "已为您退款 300 元，请查收。"})):
        p = _problem(api.post(f"{base}/{path}", json=body, headers=bearer(ana)), 403)
        assert p["required_level"] == "supervisor"
    assert _outbox(pool, conv) == []
    api.post(f"{base}/transfer", json={"agent": "sue"}, headers=bearer(ana))
    r = api.post(f"{base}/edit-and-send", json={"text": "已为您退款 300 元，请查收。"}, headers=bearer(sue))
    assert r.status_code == 200, r.text
    ev = events_of(pool, t["id"])[-1]
    assert ev["action"] == "edited" and ev["payload"]["required_level"] == "supervisor"
    assert ev["payload"]["action"] == draft["proposed_action"]
