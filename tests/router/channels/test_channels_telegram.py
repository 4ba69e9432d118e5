"""Telegram Bot API webhook: secret-token header, Update normalisation, idempotency, sendMessage delivery."""

from __future__ import annotations

import copy
import json
import threading

import pytest
from channels_support import SECRETS, RecordingServer, channel_app, channel_settings, count, stored

URL = "/v1/channels/telegram/webhook"
HEADERS = {"X-Telegram-Bot-Api-Secret-Token": SECRETS["telegram_secret_token"]}

# The example update of Telegram's webhook guide (core.telegram.org/bots/webhooks, "Testing your bot").
DOC_UPDATE = {
    "update_id": 10000,
    "message": {
        "date": 1441645532,
        "chat": {"last_name": "Test Lastname", "id": 1111111, "type": "private", "first_name": "Test",
                 "username": "Test"},
        "message_id": 1365,
        "from": {"last_name": "Test Lastname", "id": 1111111, "first_name": "Test", "username": "Test",
                 "is_bot": False},
        "text": "/start",
    },
}


@pytest.fixture
def recorder():
    server = RecordingServer(answers={"/sendMessage": (200, {"ok": True, "result": {"message_id": 777}})})
    yield server
    server.close()


@pytest.fixture
def app(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as parts:
        yield parts


def test_documented_update_is_normalised(app):
    client, services, _ = app
    r = client.post(URL, json=DOC_UPDATE, headers=HEADERS)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "accepted" and body["messages"][0]["message_id"] == "1111111:1365"
    with services.pool.connection() as conn:
        conv = conn.execute("SELECT * FROM conversations").fetchone()
        msg = conn.execute("SELECT * FROM messages WHERE direction = 'in'").fetchone()
        ident = conn.execute("SELECT * FROM channel_identities").fetchone()
        route = conn.execute("SELECT * FROM channel_routes").fetchone()
    assert (conv["channel"], conv["external_id"], conv["customer_id"]) == ("telegram", "1111111", "telegram:1111111")
    assert msg["text"] == "/start" and msg["external_id"] == "1111111:1365"
    assert msg["sent_at"].timestamp() == 1441645532
    assert msg["metadata"]["kind"] == "text" and msg["metadata"]["chat_type"] == "private"
    assert ident["profile"] == {"first_name": "Test", "last_name": "Test Lastname", "username": "Test"}
    assert route["address"] == {"chat_id": 1111111}


def test_photo_caption_and_ignored_updates(app):
    client, services, _ = app
    photo = copy.deepcopy(DOC_UPDATE)
    photo["update_id"] += 1
    msg = photo["message"]
    del msg["text"]
    msg["message_id"] = 1366
    msg["caption"] = "my parcel arrived broken"
    msg["photo"] = [{"file_id": "small", "width": 90, "height": 90}, {"file_id": "big", "width": 800, "height": 800}]
    r = client.post(URL, json=photo, headers=HEADERS)
    assert r.status_code == 200, r.text
    with services.pool.connection() as conn:
        row = conn.execute("SELECT text, metadata FROM messages WHERE external_id = '1111111:1366'").fetchone()
    assert row["text"] == "my parcel arrived broken"
    assert row["metadata"]["attachments"] == [{"type": "photo", "file_id": "big", "width": 800, "height": 800}]
    edited = {"update_id": 10005, "edited_message": DOC_UPDATE["message"]}
    r = client.post(URL, json=edited, headers=HEADERS)
    assert r.status_code == 200 and r.json()["ignored"] == ["update:edited_message"]
    assert count(services, "SELECT count(*) AS n FROM messages WHERE direction = 'in'") == 1


@pytest.mark.parametrize("headers", [{}, {"X-Telegram-Bot-Api-Secret-Token": "wrong"}])
def test_forged_secret_is_401_and_nothing_stored(app, headers):
    client, services, _ = app
    r = client.post(URL, json=DOC_UPDATE, headers=headers)
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")
    assert set(stored(services).values()) == {0}


def test_no_get_handshake(app):
    client, _, _ = app
    r = client.get(URL)
    assert r.status_code == 405 and r.headers["content-type"].startswith("application/problem+json")


def test_five_concurrent_duplicates_store_one_message_and_one_reply(app):
    client, services, dispatcher = app
    results = []

    def send():
        results.append(client.post(URL, content=json.dumps(DOC_UPDATE), headers={**HEADERS,
                                                                                 "Content-Type": "application/json"}))

    threads = [threading.Thread(target=send) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in results] == [200] * 5
    assert sum(1 for r in results if not r.json()["messages"][0]["replayed"]) == 1
    assert count(services, "SELECT count(*) AS n FROM messages WHERE direction = 'in'") == 1
    assert count(services, "SELECT count(*) AS n FROM turns") == 1
    assert count(services, "SELECT count(*) AS n FROM outbox") == 1
    # a later retry by Telegram is still processed once
    assert client.post(URL, json=DOC_UPDATE, headers=HEADERS).json()["messages"][0]["replayed"] is True
    assert count(services, "SELECT count(*) AS n FROM outbox") == 1


def test_reply_delivered_after_a_failure(app, recorder):
    client, services, dispatcher = app
    client.post(URL, json=DOC_UPDATE, headers=HEADERS)
    recorder.fail_next = 1
    first = dispatcher.drain()
    assert first["retry"] == 1
    final = dispatcher.drain(max_seconds=5)
    import time

    deadline = time.monotonic() + 5
    while not final.get("delivered") and time.monotonic() < deadline:
        time.sleep(0.05)
        final = dispatcher.drain()
    assert final["delivered"] == 1
    calls = recorder.sent("/bot123456:ABC-DEF/sendMessage")
    assert len(calls) == 2
    assert calls[-1].json() == {"chat_id": 1111111, "text": "echo: /start"}
    with services.pool.connection() as conn:
        row = conn.execute("SELECT status, attempts, provider_message_id FROM outbox").fetchone()
        attempts = conn.execute("SELECT outcome, http_status FROM outbox_attempts ORDER BY id").fetchall()
    assert (row["status"], row["attempts"], row["provider_message_id"]) == ("delivered", 2, "777")
    assert [(a["outcome"], a["http_status"]) for a in attempts] == [("retry", 500), ("delivered", 200)]
