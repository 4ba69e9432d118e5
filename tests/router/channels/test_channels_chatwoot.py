"""Chatwoot Agent Bot: signed message_created events, incoming only, replies via the messages API, and on
an L3 handoff the conversation is opened for Chatwoot's agents and the bot falls silent."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import time

import pytest
from channels_support import SECRETS, RecordingServer, channel_app, channel_settings, count, post_concurrently, stored

from router.outbox.leader import wait_until

URL = "/v1/channels/chatwoot/webhook"

# The sample message_created payload of Chatwoot's webhook documentation (conversation details as in
# the agent-bot payload: id is the display id used by the API, status pending while the bot handles it).
DOC_EVENT = {
    "event": "message_created",
    "id": "1",
    "content": "Hi",
    "created_at": "2020-03-03 13:05:57 UTC",
    "message_type": "incoming",
    "content_type": "text",
    "content_attributes": {},
    "source_id": "",
    "private": False,
    "sender": {"id": "1", "name": "contact-name", "type": "contact"},
    "contact": {"id": "1", "name": "contact-name"},
    "conversation": {
        "display_id": "1",
        "id": 1,
        "status": "pending",
        "inbox_id": 1,
        "contact_inbox": {"id": 1, "contact_id": 1, "inbox_id": 1, "source_id": "abc"},
        "additional_attributes": {"browser": {"device_name": "Macbook", "browser_name": "Chrome"}},
    },
    "account": {"id": "1", "name": "Chatwoot"},
    "inbox": {"id": 1, "name": "Website"},
}


def signed(event, secret=SECRETS["chatwoot_webhook_secret"], ts=None) -> tuple[bytes, dict]:
    body = json.dumps(event).encode()
    ts = str(int(time.time()) if ts is None else ts)
    sig = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return body, {"X-Chatwoot-Signature": f"sha256={sig}", "X-Chatwoot-Timestamp": ts,
                  "Content-Type": "application/json"}


def event(**over):
    e = copy.deepcopy(DOC_EVENT)
    for k, v in over.items():
        if k == "status":
            e["conversation"]["status"] = v
        else:
            e[k] = v
    return e


@pytest.fixture
def recorder():
    server = RecordingServer(answers={"/messages": (200, {"id": 4242, "content": "x"}),
                                      "/toggle_status": (200, {"meta": {}, "payload": {"success": True}})})
    yield server
    server.close()


@pytest.fixture
def app(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as parts:
        yield parts


def test_documented_event_is_normalised_and_answered(app, recorder):
    client, services, dispatcher = app
    body, headers = signed(DOC_EVENT)
    r = client.post(URL, content=body, headers=headers)
    assert r.status_code == 200, r.text
    with services.pool.connection() as conn:
        conv = conn.execute("SELECT * FROM conversations").fetchone()
        msg = conn.execute("SELECT * FROM messages WHERE direction = 'in'").fetchone()
        route = conn.execute("SELECT address FROM channel_routes").fetchone()
        ident = conn.execute("SELECT profile FROM channel_identities").fetchone()
    assert (conv["external_id"], conv["customer_id"]) == ("1:1", "chatwoot:1:1")
    assert (msg["external_id"], msg["text"]) == ("1:1", "Hi")
    assert msg["sent_at"].isoformat() == "2020-03-03T13:05:57+00:00"
    assert route["address"] == {"account_id": "1", "conversation_id": "1"}
    assert ident["profile"] == {"name": "contact-name"}
    assert dispatcher.drain()["delivered"] == 1
    call = recorder.sent("/api/v1/accounts/1/conversations/1/messages")[0]
    assert call.headers["api_access_token"] == SECRETS["chatwoot_api_token"]
    assert call.json() == {"content": "echo: Hi", "message_type": "outgoing", "private": False}


@pytest.mark.parametrize("variant", [
    {"message_type": "outgoing"}, {"message_type": "activity"}, {"message_type": "template"},
    {"private": True}, {"event": "conversation_status_changed"}, {"status": "open"},
])
def test_outgoing_private_activity_and_open_conversations_are_ignored(app, variant):
    client, services, _ = app
    body, headers = signed(event(**variant))
    r = client.post(URL, content=body, headers=headers)
    assert r.status_code == 200 and r.json()["messages"] == [] and r.json()["ignored"]
    assert count(services, "SELECT count(*) AS n FROM messages") == 0


def test_l3_handoff_opens_the_conversation_and_the_bot_stops(app, recorder):
    client, services, dispatcher = app
    body, headers = signed(event(id="2", content="I want to talk to a human"))
    r = client.post(URL, content=body, headers=headers)
    assert r.status_code == 200, r.text
    # a retry of the same delivery queues nothing more
    client.post(URL, content=body, headers=headers)
    with services.pool.connection() as conn:
        kinds = [r["kind"] for r in conn.execute("SELECT kind FROM outbox ORDER BY id")]
    assert kinds == ["reply", "conversation_status"]
    assert dispatcher.drain()["delivered"] == 2
    paths = [r.path for r in recorder.requests]
    assert paths == ["/api/v1/accounts/1/conversations/1/messages", "/api/v1/accounts/1/conversations/1/toggle_status"]
    assert recorder.requests[1].json() == {"status": "open"}
    # Chatwoot now reports the conversation open: the customer's next messages are the agents' business
    body, headers = signed(event(id="3", content="hello?", status="open"))
    r = client.post(URL, content=body, headers=headers)
    assert r.json()["ignored"] == ["conversation_open"]
    assert count(services, "SELECT count(*) AS n FROM messages WHERE direction = 'in'") == 1
    assert dispatcher.drain() == {}


def test_forged_or_stale_signature_is_401_and_nothing_stored(app):
    client, services, _ = app
    body, headers = signed(DOC_EVENT)
    _, wrong = signed(DOC_EVENT, secret="not-the-secret")
    _, stale = signed(DOC_EVENT, ts=int(time.time()) - 3600)
    for h in (wrong, stale, {"Content-Type": "application/json"}, {**headers, "X-Chatwoot-Timestamp": "nope"}):
        assert client.post(URL, content=body, headers=h).status_code == 401
    assert client.post(URL, content=body.replace(b'"Hi"', b'"Hey"'), headers=headers).status_code == 401
    assert set(stored(services).values()) == {0}


def test_token_mode_for_chatwoot_versions_that_do_not_sign(settings, recorder):
    from pydantic import SecretStr

    s = channel_settings(settings, recorder.url, chatwoot_webhook_secret=None,
                         chatwoot_webhook_token=SecretStr("bot-url-token"))
    with channel_app(s) as (client, services, _):
        assert client.post(URL, json=DOC_EVENT).status_code == 401
        assert client.post(URL + "?token=wrong", json=DOC_EVENT).status_code == 401
        assert client.post(URL + "?token=bot-url-token", json=DOC_EVENT).status_code == 200


def test_duplicate_deliveries_processed_once(app):
    client, services, _ = app
    body, headers = signed(DOC_EVENT)
    results = post_concurrently(client, URL, body, headers)
    assert [r.status_code for r in results] == [200] * 5
    assert count(services, "SELECT count(*) AS n FROM messages WHERE direction = 'in'") == 1
    assert count(services, "SELECT count(*) AS n FROM outbox") == 1


def test_reply_retried_then_dead_lettered_after_max_attempts(app, recorder):
    client, services, dispatcher = app
    body, headers = signed(DOC_EVENT)
    client.post(URL, content=body, headers=headers)
    recorder.fail_always = True
    outcomes = []
    assert wait_until(lambda: outcomes.append(dispatcher.drain()) or
                      count(services, "SELECT count(*) AS n FROM outbox WHERE status = 'dead'") == 1, timeout=10)
    with services.pool.connection() as conn:
        row = conn.execute("SELECT attempts, last_error, dead_at FROM outbox").fetchone()
        log = [r["outcome"] for r in conn.execute("SELECT outcome FROM outbox_attempts ORDER BY id")]
    assert row["attempts"] == 3 and row["dead_at"] is not None
    assert row["last_error"].startswith("gave up after 3 attempts: chatwoot messages: HTTP 500")
    assert log == ["retry", "retry", "dead"]
    assert len(recorder.sent("/messages")) == 3


def test_with_the_real_router_a_human_request_opens_the_conversation(settings, recorder, minilm_encoder, tmp_path):
    """The production decider (rules, escalation, state, handoff ticket) behind the Chatwoot webhook."""
    from fastapi.testclient import TestClient
    from routing_kit import classifier_for   # the bundled intents, fitted once per test run

    from router.app.factory import create_app
    from router.app.composition import build_services, wire_handoff, wire_router
    from router.outbox import build_dispatcher

    s = channel_settings(settings, recorder.url)
    services = build_services(s, load_models=False)
    services.encoder = minilm_encoder
    services.classifier = classifier_for(minilm_encoder, tmp_path)
    wire_handoff(services)
    wire_router(services)
    dispatcher = build_dispatcher(s, services.pool)
    try:
        with TestClient(create_app(services=services)) as client:
            body, headers = signed(event(id="9", content="I want to talk to a human"))
            r = client.post(URL, content=body, headers=headers)
            assert r.status_code == 200, r.text
            client.post(URL, content=body, headers=headers)          # a retry changes nothing
            with services.pool.connection() as conn:
                turn = conn.execute("SELECT response FROM turns").fetchone()["response"]
                rows = conn.execute("SELECT kind, payload FROM outbox ORDER BY id").fetchall()
                tickets = conn.execute("SELECT count(*) AS n FROM tickets").fetchone()["n"]
            assert turn["decision"]["tier"] == "L3" and turn["ticket_id"] and tickets == 1
            # the router's own acknowledgement, then the status change: nothing queued twice
            assert [r["kind"] for r in rows][-1] == "conversation_status" and len(rows) == 2
            assert rows[0]["payload"]["text"] == turn["reply"]["text"]
            assert dispatcher.drain()["delivered"] == 2
        assert [r.path.rsplit("/", 1)[1] for r in recorder.requests] == ["messages", "toggle_status"]
    finally:
        dispatcher.close()
        services.close()
