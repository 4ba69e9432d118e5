"""WhatsApp Cloud API webhook: X-Hub-Signature-256, hub.challenge handshake, batched messages, delivery."""

from __future__ import annotations

import copy

import pytest
from channels_support import (
    SECRETS,
    channel_app,
    channel_settings,
    count,
    post_concurrently,
    stored,
    whatsapp_recorder,  # noqa: F401 - the "recorder" fixture
    whatsapp_signed,
)

URL = "/v1/channels/whatsapp/webhook"

# The "text message" example of Meta's Cloud API webhook reference (placeholders filled in).
DOC_PAYLOAD = {
    "object": "whatsapp_business_account",
    "entry": [{
        "id": "102290129340398",
        "changes": [{
            "value": {
                "messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
                "contacts": [{"profile": {"name": "Sheena Nelson"}, "wa_id": "16505551234"}],
                "messages": [{
                    "from": "16505551234",
                    "id": "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=",
                    "timestamp": "1749416383",
                    "type": "text",
                    "text": {"body": "Does it come in another color?"},
                }],
            },
            "field": "messages",
        }],
    }],
}

# A delivery-status notification (no customer message).
STATUS_PAYLOAD = {
    "object": "whatsapp_business_account",
    "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
        "statuses": [{"id": "wamid.out1", "status": "delivered", "timestamp": "1750263773",
                      "recipient_id": "16505551234"}],
    }}]}],
}


signed = whatsapp_signed


@pytest.fixture
def app(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as parts:
        yield parts


def test_documented_payload_is_normalised(app):
    client, services, _ = app
    body, headers = signed(DOC_PAYLOAD)
    r = client.post(URL, content=body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["messages"][0]["message_id"].startswith("wamid.HBgL")
    with services.pool.connection() as conn:
        conv = conn.execute("SELECT * FROM conversations").fetchone()
        msg = conn.execute("SELECT * FROM messages WHERE direction = 'in'").fetchone()
        ident = conn.execute("SELECT * FROM channel_identities").fetchone()
        route = conn.execute("SELECT address FROM channel_routes").fetchone()
    assert (conv["external_id"], conv["customer_id"]) == ("16505551234", "whatsapp:16505551234")
    assert msg["text"] == "Does it come in another color?"
    assert msg["sent_at"].timestamp() == 1749416383
    assert msg["metadata"]["phone_number_id"] == "106540352242922"
    assert ident["profile"] == {"name": "Sheena Nelson"}
    assert route["address"] == {"phone_number_id": "106540352242922", "to": "16505551234"}


def test_batch_media_and_statuses(app):
    client, services, _ = app
    payload = copy.deepcopy(DOC_PAYLOAD)
    value = payload["entry"][0]["changes"][0]["value"]
    value["messages"].append({"from": "16505551234", "id": "wamid.IMG", "timestamp": "1749416390", "type": "image",
                              "image": {"caption": "the dent", "mime_type": "image/jpeg", "sha256": "abc",
                                        "id": "media-1"}})
    value["statuses"] = STATUS_PAYLOAD["entry"][0]["changes"][0]["value"]["statuses"]
    body, headers = signed(payload)
    r = client.post(URL, content=body, headers=headers)
    assert r.status_code == 200, r.text
    assert len(r.json()["messages"]) == 2 and r.json()["ignored"] == ["status:delivered"]
    with services.pool.connection() as conn:
        img = conn.execute("SELECT text, metadata FROM messages WHERE external_id = 'wamid.IMG'").fetchone()
    assert img["text"] == "the dent"
    assert img["metadata"]["attachments"] == [{"type": "image", "id": "media-1", "mime_type": "image/jpeg",
                                               "sha256": "abc"}]
    # one conversation per customer per channel
    assert count(services, "SELECT count(*) AS n FROM conversations") == 1
    body, headers = signed(STATUS_PAYLOAD)
    r = client.post(URL, content=body, headers=headers)
    assert r.status_code == 200 and r.json()["messages"] == []


def test_forged_signature_is_401_and_nothing_stored(app):
    client, services, _ = app
    body, headers = signed(DOC_PAYLOAD)
    tampered = body.replace(b"another color", b"another colour")
    for h in (headers, {"Content-Type": "application/json"},
              {**headers, "X-Hub-Signature-256": "sha256=" + "0" * 64}):
        r = client.post(URL, content=tampered if h is headers else body, headers=h)
        assert r.status_code == 401, r.text
    assert set(stored(services).values()) == {0}


def test_verification_handshake(app):
    client, _, _ = app
    ok = {"hub.mode": "subscribe", "hub.verify_token": SECRETS["whatsapp_verify_token"], "hub.challenge": "1158201444"}
    r = client.get(URL, params=ok)
    assert r.status_code == 200 and r.text == "1158201444"
    r = client.get(URL, params={**ok, "hub.verify_token": "nope"})
    assert r.status_code == 403 and r.headers["content-type"].startswith("application/problem+json")


def test_duplicate_deliveries_processed_once(app):
    client, services, _ = app
    body, headers = signed(DOC_PAYLOAD)
    results = post_concurrently(client, URL, body, headers)
    assert [r.status_code for r in results] == [200] * 5
    assert count(services, "SELECT count(*) AS n FROM messages WHERE direction = 'in'") == 1
    assert count(services, "SELECT count(*) AS n FROM outbox WHERE kind = 'reply'") == 1


def test_reply_delivered_with_retry_then_dead_letter(app, recorder):
    client, services, dispatcher = app
    body, headers = signed(DOC_PAYLOAD)
    client.post(URL, content=body, headers=headers)
    recorder.fail_next = 1
    assert dispatcher.drain()["retry"] == 1
    from router.outbox.leader import wait_until

    assert wait_until(lambda: dispatcher.drain().get("delivered") == 1, timeout=5)
    call = recorder.sent("/106540352242922/messages")[-1]
    assert call.headers["authorization"] == f"Bearer {SECRETS['whatsapp_access_token']}"
    assert call.json() == {"messaging_product": "whatsapp", "recipient_type": "individual", "to": "16505551234",
                           "type": "text", "text": {"preview_url": False, "body": "echo: Does it come in another color?"}}
    # a 4xx (e.g. outside the 24-hour window) is final at once: dead letter with the reason
    recorder.answers["/messages"] = (400, {"error": {"message": "Re-engagement message", "code": 131047}})
    payload = copy.deepcopy(DOC_PAYLOAD)
    payload["entry"][0]["changes"][0]["value"]["messages"][0]["id"] = "wamid.SECOND"
    body, headers = signed(payload)
    client.post(URL, content=body, headers=headers)
    assert dispatcher.drain()["dead"] == 1
    with services.pool.connection() as conn:
        dead = conn.execute("SELECT last_error, attempts FROM outbox WHERE status = 'dead'").fetchone()
    assert "HTTP 400" in dead["last_error"] and "131047" in dead["last_error"] and dead["attempts"] == 1
