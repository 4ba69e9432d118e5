"""The web channel: the /v1/messages shape on a channel webhook, optional HMAC, signed callbacks."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest
from channels_support import SECRETS, RecordingServer, channel_app, channel_settings, count, post_concurrently, stored

from router.outbox.leader import wait_until

URL = "/v1/channels/web/webhook"
MSG = {"conversation_id": "c-1", "customer_id": "u-1", "message_id": "m-1", "text": "where is my order?",
       "sent_at": "2026-01-02T03:04:05Z", "metadata": {"page": "/orders"}}


def signed(body: dict) -> tuple[bytes, dict]:
    raw = json.dumps(body).encode()
    ts = str(int(time.time()))
    sig = hmac.new(SECRETS["web_hmac_secret"].encode(), ts.encode() + b"." + raw, hashlib.sha256).hexdigest()
    return raw, {"X-Switchboard-Timestamp": ts, "X-Switchboard-Signature": f"sha256={sig}",
                 "Content-Type": "application/json"}


@pytest.fixture
def recorder():
    server = RecordingServer(answers={"/web-callback": (200, {"id": "site-msg-1"})})
    yield server
    server.close()


@pytest.fixture
def app(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as parts:
        yield parts


def test_signed_message_is_routed_like_v1_messages(app):
    client, services, _ = app
    raw, headers = signed(MSG)
    r = client.post(URL, content=raw, headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["reply"]["text"] == "echo: where is my order?" and body["decision"]["tier"] == "L1"
    with services.pool.connection() as conn:
        conv = conn.execute("SELECT * FROM conversations").fetchone()
        msg = conn.execute("SELECT * FROM messages WHERE direction = 'in'").fetchone()
    assert (conv["channel"], conv["external_id"], conv["customer_id"]) == ("web", "c-1", "u-1")
    assert msg["metadata"]["client"] == {"page": "/orders"} and msg["sent_at"].year == 2026
    r2 = client.post(URL, content=raw, headers=headers)
    assert r2.json() == body and r2.headers["idempotent-replayed"] == "true"


def test_forged_signature_is_401_and_nothing_stored(app):
    client, services, _ = app
    raw, headers = signed(MSG)
    for content, h in ((raw, {"Content-Type": "application/json"}),
                       (raw.replace(b"order", b"ordre"), headers),
                       (raw, {**headers, "X-Switchboard-Signature": "sha256=" + "f" * 64})):
        r = client.post(URL, content=content, headers=h)
        assert r.status_code == 401 and r.headers["content-type"].startswith("application/problem+json")
    assert set(stored(services).values()) == {0}


def test_without_a_secret_the_web_webhook_is_off_unless_unsigned_is_chosen(settings, recorder):
    """No secret: 404 problem+json and nothing stored, whatever customer the body names; unsigned only when
    SWITCHBOARD_WEB_UNSIGNED says so."""
    with channel_app(channel_settings(settings, recorder.url, web_hmac_secret=None)) as (client, services, _):
        r = client.post(URL, json=MSG)
        assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")
        assert "SWITCHBOARD_WEB_HMAC_SECRET" in r.json()["detail"]
        assert set(stored(services).values()) == {0}
    with channel_app(channel_settings(settings, recorder.url, web_hmac_secret=None, web_unsigned=True)) as (
            client, services, _):
        assert client.post(URL, json=MSG).status_code == 200


@pytest.mark.parametrize("bad", [
    b"{not json", b"[]", json.dumps({**MSG, "channel": "sms"}).encode(), json.dumps({**MSG, "text": ""}).encode(),
    json.dumps({k: v for k, v in MSG.items() if k != "message_id"}).encode(),
])
def test_malformed_is_422(app, bad):
    client, services, _ = app
    ts = str(int(time.time()))
    sig = hmac.new(SECRETS["web_hmac_secret"].encode(), ts.encode() + b"." + bad, hashlib.sha256).hexdigest()
    r = client.post(URL, content=bad, headers={"X-Switchboard-Signature": f"sha256={sig}",
                                               "X-Switchboard-Timestamp": ts})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert count(services, "SELECT count(*) AS n FROM messages") == 0


def test_limits_unknown_channel_and_disabled_channel(settings, recorder):
    s = channel_settings(settings, recorder.url, telegram_secret_token=None)
    with channel_app(s) as (client, services, _):
        r = client.post("/v1/channels/fax/webhook", json=MSG)
        assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")
        r = client.post("/v1/channels/telegram/webhook", json={"update_id": 1})
        assert r.status_code == 404 and "SWITCHBOARD_TELEGRAM_SECRET_TOKEN" in r.json()["detail"]
        raw, headers = signed({**MSG, "text": "x" * 70_000})
        assert client.post(URL, content=raw, headers=headers).status_code == 413
        raw, headers = signed({**MSG, "text": "y" * (s.max_text_chars + 1)})
        r = client.post(URL, content=raw, headers=headers)
        assert r.status_code == 413 and r.headers["content-type"].startswith("application/problem+json")
        assert set(stored(services).values()) == {0}


def test_concurrent_duplicates_one_message_one_reply(app):
    client, services, _ = app
    raw, headers = signed(MSG)
    results = post_concurrently(client, URL, raw, headers)
    assert [r.status_code for r in results] == [200] * 5
    assert len({r.json()["turn_id"] for r in results}) == 1
    assert count(services, "SELECT count(*) AS n FROM messages WHERE direction = 'in'") == 1
    assert count(services, "SELECT count(*) AS n FROM outbox") == 1


def test_reply_posted_to_the_signed_callback_after_a_failure(app, recorder):
    client, services, dispatcher = app
    raw, headers = signed(MSG)
    client.post(URL, content=raw, headers=headers)
    recorder.fail_next = 1
    assert dispatcher.drain()["retry"] == 1
    assert wait_until(lambda: dispatcher.drain().get("delivered") == 1, timeout=5)
    calls = recorder.sent("/web-callback")
    assert len(calls) == 2
    call = calls[-1]
    ts = call.headers["x-switchboard-timestamp"]
    assert abs(int(ts) - time.time()) < 3600
    expected = hmac.new(SECRETS["web_hmac_secret"].encode(), ts.encode() + b"." + call.body,
                        hashlib.sha256).hexdigest()
    assert call.headers["x-switchboard-signature"] == f"sha256={expected}"
    assert call.headers["idempotency-key"].startswith("outbox-")
    payload = call.json()
    assert (payload["conversation_id"], payload["customer_id"], payload["text"]) == \
        ("c-1", "u-1", "echo: where is my order?")


def test_without_a_callback_url_the_reply_is_recorded_as_skipped(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url, web_api_base_url=None)) as (client, services, dispatcher):
        raw, headers = signed(MSG)
        client.post(URL, content=raw, headers=headers)
        assert dispatcher.drain() == {"skipped": 1}
        with services.pool.connection() as conn:
            assert conn.execute("SELECT status FROM outbox").fetchone()["status"] == "delivered"
        assert recorder.requests == []
