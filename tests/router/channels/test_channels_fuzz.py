"""Property tests: whatever arrives at the channel endpoints, the answer is never a 5xx, and every
error is problem+json. Bodies are sometimes correctly signed, so the fuzz reaches the parsers and the
database, not only the signature checks."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import time
from urllib.parse import quote, urlencode

import pytest
from channels_support import SECRETS, RecordingServer, channel_app, channel_settings
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from router.channels.sms.inbound import twilio_signature
from test_channels_chatwoot import DOC_EVENT
from test_channels_sms import DOC_PARAMS, PUBLIC
from test_channels_telegram import DOC_UPDATE
from test_channels_wechat import DOC_XML, query as wechat_query
from test_channels_whatsapp import DOC_PAYLOAD

CHANNELS = ["web", "wechat", "whatsapp", "telegram", "sms", "chatwoot"]
ALLOWED = {200, 401, 403, 404, 405, 409, 413, 422}
FUZZ = hsettings(max_examples=40, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def sign(channel: str, body: bytes, path: str) -> tuple[dict, dict]:
    """Headers and query parameters that make ``body`` authentic for ``channel``."""
    if channel == "web":
        ts = str(int(time.time()))
        return {"X-Switchboard-Timestamp": ts,
                "X-Switchboard-Signature": "sha256=" + hmac.new(SECRETS["web_hmac_secret"].encode(),
                                                               ts.encode() + b"." + body, hashlib.sha256).hexdigest()}, {}
    if channel == "whatsapp":
        return {"X-Hub-Signature-256": "sha256=" + hmac.new(SECRETS["whatsapp_app_secret"].encode(), body,
                                                           hashlib.sha256).hexdigest()}, {}
    if channel == "telegram":
        return {"X-Telegram-Bot-Api-Secret-Token": SECRETS["telegram_secret_token"]}, {}
    if channel == "wechat":
        return {}, wechat_query()
    if channel == "chatwoot":
        ts = str(int(time.time()))
        sig = hmac.new(SECRETS["chatwoot_webhook_secret"].encode(), ts.encode() + b"." + body, hashlib.sha256)
        return {"X-Chatwoot-Signature": "sha256=" + sig.hexdigest(), "X-Chatwoot-Timestamp": ts}, {}
    if channel == "sms":
        from urllib.parse import parse_qsl

        try:
            pairs = parse_qsl(body.decode(), keep_blank_values=True)
        except UnicodeDecodeError:
            pairs = []
        return {"X-Twilio-Signature": twilio_signature(SECRETS["twilio_auth_token"], PUBLIC + path, pairs)}, {}
    raise AssertionError(channel)


def check(response) -> None:
    assert response.status_code in ALLOWED, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/problem+json"), response.text[:200]
        assert response.json()["status"] == response.status_code


@pytest.fixture
def app(settings):
    server = RecordingServer()
    with channel_app(channel_settings(settings, server.url, public_url=PUBLIC)) as parts:
        yield parts
    server.close()


def _mutate(doc, path_choice: int, value):
    """Replace one node of a documented payload (picked by index in a depth-first walk) by ``value``."""
    doc = copy.deepcopy(doc)
    nodes = []

    def walk(node):
        if isinstance(node, dict):
            for k in node:
                nodes.append((node, k))
                walk(node[k])
        elif isinstance(node, list):
            for i in range(len(node)):
                nodes.append((node, i))
                walk(node[i])
    walk(doc)
    parent, key = nodes[path_choice % len(nodes)]
    parent[key] = value
    return doc


DOCS = {"telegram": DOC_UPDATE, "whatsapp": DOC_PAYLOAD, "chatwoot": DOC_EVENT,
        "web": {"conversation_id": "c", "customer_id": "u", "message_id": "m", "text": "hi"}}


@FUZZ
@given(channel=st.sampled_from(CHANNELS), body=st.binary(max_size=2048), signed=st.booleans(),
       content_type=st.sampled_from(["application/json", "text/xml", "application/x-www-form-urlencoded",
                                     "text/plain", "application/octet-stream"]))
def test_arbitrary_bytes_never_5xx(app, channel, body, signed, content_type):
    client, _, _ = app
    path = f"/v1/channels/{channel}/webhook"
    headers, params = sign(channel, body, path) if signed else ({}, {})
    check(client.post(path, content=body, params=params, headers={**headers, "Content-Type": content_type}))


@FUZZ
@given(channel=st.sampled_from(sorted(DOCS)), where=st.integers(min_value=0, max_value=200), value=json_values,
       whole=st.booleans())
def test_mutated_documented_json_never_5xx(app, channel, where, value, whole):
    client, _, _ = app
    doc = value if whole else _mutate(DOCS[channel], where, value)
    body = json.dumps(doc).encode()
    path = f"/v1/channels/{channel}/webhook"
    headers, params = sign(channel, body, path)
    check(client.post(path, content=body, params=params, headers={**headers, "Content-Type": "application/json"}))


xml_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(["ToUserName", "FromUserName", "CreateTime", "MsgType", "Content",
                                               "MsgId", "Event", "Recognition", "PicUrl", "Location_X", "Label"]),
                              xml_text, max_size=8),
       form=st.dictionaries(st.sampled_from(sorted(DOC_PARAMS) + ["MediaUrl0", "MediaContentType0"]), xml_text,
                            max_size=10))
def test_mutated_wechat_xml_and_twilio_forms_never_5xx(app, fields, form):
    client, _, _ = app
    from xml.sax.saxutils import escape

    xml = "<xml>" + "".join(f"<{k}>{escape(v)}</{k}>" for k, v in fields.items()) + "</xml>"
    body = xml.encode()
    headers, params = sign("wechat", body, "")
    check(client.post("/v1/channels/wechat/webhook", content=body, params=params, headers=headers))
    body = urlencode({**DOC_PARAMS, **form}).encode()
    path = "/v1/channels/sms/webhook"
    headers, _ = sign("sms", body, path)
    check(client.post(path, content=body, headers={**headers, "Content-Type": "application/x-www-form-urlencoded"}))


@FUZZ
@given(channel=st.one_of(st.sampled_from(CHANNELS), st.text(min_size=1, max_size=20)),
       params=st.dictionaries(st.sampled_from(["hub.mode", "hub.verify_token", "hub.challenge", "echostr",
                                               "signature", "timestamp", "nonce", "token", "x"]),
                              st.text(max_size=30), max_size=6),
       method=st.sampled_from(["GET", "POST"]))
def test_handshakes_and_unknown_channels_never_5xx(app, channel, params, method):
    client, _, _ = app
    path = f"/v1/channels/{quote(channel, safe='')}/webhook"
    response = client.request(method, path, params=params)
    assert response.status_code < 500, response.text[:300]


def test_documented_samples_still_pass_the_fuzz_setup(app):
    """The signing helper above is right: the documented payloads are accepted through it."""
    client, _, _ = app
    for channel, doc in DOCS.items():
        body = json.dumps(doc).encode()
        path = f"/v1/channels/{channel}/webhook"
        headers, params = sign(channel, body, path)
        r = client.post(path, content=body, params=params, headers={**headers, "Content-Type": "application/json"})
        assert r.status_code == 200, (channel, r.text)
    headers, params = sign("wechat", DOC_XML.encode(), "")
    assert client.post("/v1/channels/wechat/webhook", content=DOC_XML.encode(), params=params).status_code == 200
    body = urlencode(DOC_PARAMS).encode()
    headers, _ = sign("sms", body, "/v1/channels/sms/webhook")
    r = client.post("/v1/channels/sms/webhook", content=body,
                    headers={**headers, "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200


def test_oversized_bodies_are_413_on_every_channel(app):
    client, services, _ = app
    big = b"x" * (64 * 1024 + 1)
    for channel in CHANNELS:
        r = client.post(f"/v1/channels/{channel}/webhook", content=big)
        assert r.status_code == 413 and r.headers["content-type"].startswith("application/problem+json")
    with services.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM messages").fetchone()["n"] == 0


@pytest.mark.parametrize("text", ["nul \u0000 inside", "lone \ud800 surrogate"])
def test_text_postgres_cannot_store_is_cleaned_not_a_500(app, text):
    client, services, _ = app
    update = copy.deepcopy(DOC_UPDATE)
    update["message"]["text"] = text
    update["message"]["from"]["first_name"] = text
    body = json.dumps(update).encode()          # \u0000 and \ud800 as JSON escapes, as a hostile client sends them
    headers, _ = sign("telegram", body, "")
    r = client.post("/v1/channels/telegram/webhook", content=body, headers={**headers,
                                                                            "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    with services.pool.connection() as conn:
        stored_text = conn.execute("SELECT text FROM messages WHERE direction = 'in'").fetchone()["text"]
    assert "\u0000" not in stored_text and stored_text.startswith(text[:4])
