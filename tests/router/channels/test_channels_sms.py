"""SMS through Twilio: X-Twilio-Signature over URL + sorted params, form webhooks, Messages API delivery."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from channels_support import SECRETS, RecordingServer, channel_app, channel_settings, count, post_concurrently, stored

from router.outbox.leader import wait_until
from router.channels.sms.inbound import twilio_signature

URL = "/v1/channels/sms/webhook"
PUBLIC = "https://cs.example.com"

# The parameters of Twilio's incoming-message webhook (Messaging webhook request), as documented.
DOC_PARAMS = {
    "ToCountry": "US", "ToState": "CA", "SmsMessageSid": "SM1f0e8ae6ade43cb3c0ce4525424e404f", "NumMedia": "0",
    "ToCity": "SAN FRANCISCO", "FromZip": "94105", "SmsSid": "SM1f0e8ae6ade43cb3c0ce4525424e404f",
    "FromState": "CA", "SmsStatus": "received", "FromCity": "SAN FRANCISCO", "Body": "Where is my order 1234?",
    "FromCountry": "US", "To": "+14155550100", "ToZip": "94105", "NumSegments": "1",
    "MessageSid": "SM1f0e8ae6ade43cb3c0ce4525424e404f", "AccountSid": "AC123", "From": "+14155550199",
    "ApiVersion": "2010-04-01",
}


def signed(params: dict, url: str = PUBLIC + URL) -> tuple[bytes, dict]:
    body = urlencode(params).encode()
    sig = twilio_signature(SECRETS["twilio_auth_token"], url, list(params.items()))
    return body, {"X-Twilio-Signature": sig, "Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def recorder():
    server = RecordingServer(answers={"/Messages.json": (201, {"sid": "SMout1", "status": "queued"})})
    yield server
    server.close()


@pytest.fixture
def app(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url, public_url=PUBLIC)) as parts:
        yield parts


def test_signature_matches_twilios_published_example():
    params = [("CallSid", "CA1234567890ABCDE"), ("Caller", "+12349013030"), ("Digits", "1234"),
              ("From", "+12349013030"), ("To", "+18005551212")]
    assert twilio_signature("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params[::-1]) \
        == "0/KCTR6DLpKmkAf8muzZqo1nDgQ="


def test_documented_webhook_is_normalised(app):
    client, services, _ = app
    body, headers = signed(DOC_PARAMS)
    r = client.post(URL, content=body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/xml") and "<Response></Response>" in r.text
    with services.pool.connection() as conn:
        conv = conn.execute("SELECT * FROM conversations").fetchone()
        msg = conn.execute("SELECT * FROM messages WHERE direction = 'in'").fetchone()
        route = conn.execute("SELECT address FROM channel_routes").fetchone()
    assert (conv["external_id"], conv["customer_id"]) == ("+14155550199", "sms:+14155550199")
    assert (msg["external_id"], msg["text"]) == ("SM1f0e8ae6ade43cb3c0ce4525424e404f", "Where is my order 1234?")
    assert msg["metadata"]["to"] == "+14155550100" and msg["metadata"]["kind"] == "text"
    assert route["address"] == {"to": "+14155550199", "from": "+14155550100", "account_sid": "AC123"}


def test_mms_media_metadata(app):
    client, services, _ = app
    params = {**DOC_PARAMS, "MessageSid": "MM2", "NumMedia": "1", "Body": "",
              "MediaUrl0": "https://api.twilio.com/2010-04-01/Accounts/AC123/Messages/MM2/Media/ME1",
              "MediaContentType0": "image/jpeg"}
    body, headers = signed(params)
    assert client.post(URL, content=body, headers=headers).status_code == 200
    with services.pool.connection() as conn:
        meta = conn.execute("SELECT metadata FROM messages WHERE external_id = 'MM2'").fetchone()["metadata"]
    assert meta["kind"] == "mms" and meta["attachments"][0]["mime_type"] == "image/jpeg"


def test_forged_signature_is_401_and_nothing_stored(app):
    client, services, _ = app
    body, headers = signed(DOC_PARAMS)
    cases = [
        (body.replace(b"1234", b"9999"), headers),                      # tampered body
        (body, {**headers, "X-Twilio-Signature": "0/KCTR6DLpKmkAf8muzZqo1nDgQ="}),
        (body, {"Content-Type": "application/x-www-form-urlencoded"}),  # missing
    ]
    _, other_url = signed(DOC_PARAMS, url="https://attacker.example" + URL)
    cases.append((body, other_url))                                     # signed for another URL
    for content, h in cases:
        assert client.post(URL, content=content, headers=h).status_code == 401
    assert set(stored(services).values()) == {0}


def test_duplicate_deliveries_processed_once(app):
    client, services, _ = app
    body, headers = signed(DOC_PARAMS)
    results = post_concurrently(client, URL, body, headers)
    assert [r.status_code for r in results] == [200] * 5
    assert count(services, "SELECT count(*) AS n FROM messages WHERE direction = 'in'") == 1
    assert count(services, "SELECT count(*) AS n FROM outbox") == 1


def test_reply_sent_through_the_messages_api_after_a_failure(app, recorder):
    client, services, dispatcher = app
    body, headers = signed(DOC_PARAMS)
    client.post(URL, content=body, headers=headers)
    recorder.fail_next, recorder.fail_status = 1, 503
    assert dispatcher.drain()["retry"] == 1
    assert wait_until(lambda: dispatcher.drain().get("delivered") == 1, timeout=5)
    calls = recorder.sent("/2010-04-01/Accounts/AC123/Messages.json")
    assert len(calls) == 2
    assert calls[-1].form() == {"To": "+14155550199", "From": "+14155550100", "Body": "echo: Where is my order 1234?"}
    import base64

    assert calls[-1].headers["authorization"] == "Basic " + base64.b64encode(b"AC123:12345").decode()
    with services.pool.connection() as conn:
        assert conn.execute("SELECT provider_message_id FROM outbox").fetchone()["provider_message_id"] == "SMout1"


def test_no_handshake_and_malformed_form(app):
    client, services, _ = app
    assert client.get(URL).status_code == 405
    body, headers = signed({"Body": "no sid, no numbers"})
    r = client.post(URL, content=body, headers=headers)
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
    assert count(services, "SELECT count(*) AS n FROM messages") == 0
