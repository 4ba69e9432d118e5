"""WeChat Official Account: sha1 signature, echostr handshake, XML messages, passive replies vs the
customer-service API through the outbox."""

from __future__ import annotations

import hashlib
import threading
import time

import defusedxml.ElementTree as ET
import pytest
from channels_support import (
    SECRETS,
    RecordingServer,
    answering_decider,
    channel_app,
    channel_settings,
    count,
    stored,
)

from router.outbox.leader import wait_until

URL = "/v1/channels/wechat/webhook"

# The text-message example of the Official Account documentation (接收普通消息 / 文本消息).
DOC_XML = """<xml>
  <ToUserName><![CDATA[toUser]]></ToUserName>
  <FromUserName><![CDATA[fromUser]]></FromUserName>
  <CreateTime>1348831860</CreateTime>
  <MsgType><![CDATA[text]]></MsgType>
  <Content><![CDATA[this is a test]]></Content>
  <MsgId>1234567890123456</MsgId>
</xml>"""


def query(token=SECRETS["wechat_token"], timestamp=None, nonce="1516141345", **extra):
    timestamp = timestamp or str(int(time.time()))     # signed timestamps older than the window are refused
    sig = hashlib.sha1("".join(sorted([token, timestamp, nonce])).encode()).hexdigest()
    return {"signature": sig, "timestamp": timestamp, "nonce": nonce, **extra}


@pytest.fixture
def recorder():
    server = RecordingServer(answers={"/cgi-bin/token": (200, {"access_token": "ACCESS", "expires_in": 7200}),
                                      "/cgi-bin/message/custom/send": (200, {"errcode": 0, "errmsg": "ok"})})
    yield server
    server.close()


@pytest.fixture
def app(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as parts:
        yield parts


def slow_decider(seconds):
    def decide(ctx):
        time.sleep(seconds)
        return answering_decider(ctx)
    return decide


def test_echostr_handshake(app):
    client, _, _ = app
    r = client.get(URL, params=query(echostr="5838479218127813673"))
    assert r.status_code == 200 and r.text == "5838479218127813673"
    r = client.get(URL, params=query(token="not-the-token", echostr="x"))
    assert r.status_code == 403
    r = client.get(URL, params={"echostr": "x"})
    assert r.status_code == 403 and r.headers["content-type"].startswith("application/problem+json")


def test_documented_message_gets_a_passive_reply(app, recorder):
    client, services, dispatcher = app
    r = client.post(URL, params=query(openid="fromUser"), content=DOC_XML.encode(),
                    headers={"Content-Type": "text/xml"})
    assert r.status_code == 200, r.text
    reply = ET.fromstring(r.content)
    assert reply.findtext("ToUserName") == "fromUser" and reply.findtext("FromUserName") == "toUser"
    assert reply.findtext("MsgType") == "text" and reply.findtext("Content") == "echo: this is a test"
    with services.pool.connection() as conn:
        msg = conn.execute("SELECT * FROM messages WHERE direction = 'in'").fetchone()
        conv = conn.execute("SELECT * FROM conversations").fetchone()
        box = conn.execute("SELECT status, provider_message_id FROM outbox").fetchone()
    assert msg["external_id"] == "1234567890123456" and msg["text"] == "this is a test"
    assert msg["sent_at"].timestamp() == 1348831860
    assert (conv["external_id"], conv["customer_id"]) == ("fromUser", "wechat:fromUser")
    # answered in the HTTP response: marked delivered, never also sent through the API
    assert (box["status"], box["provider_message_id"]) == ("delivered", "passive-reply")
    assert dispatcher.drain() == {}
    assert recorder.requests == []


def test_retried_delivery_is_processed_once_and_answered_again(app):
    client, services, _ = app
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        client.post(URL, params=query(), content=DOC_XML.encode()))) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in results] == [200] * 5
    assert count(services, "SELECT count(*) AS n FROM messages WHERE direction = 'in'") == 1
    assert count(services, "SELECT count(*) AS n FROM outbox") == 1
    # WeChat retries only when our answer did not arrive: the passive reply is given again
    assert b"echo: this is a test" in client.post(URL, params=query(), content=DOC_XML.encode()).content


def test_forged_signature_is_401_and_nothing_stored(app):
    client, services, _ = app
    for params in (query(token="forged"), {}, {**query(), "nonce": "other"}):
        r = client.post(URL, params=params, content=DOC_XML.encode())
        assert r.status_code == 401, r.text
    assert set(stored(services).values()) == {0}


def test_events_are_ignored_and_xml_bombs_refused(app):
    client, services, _ = app
    event = ("<xml><ToUserName><![CDATA[toUser]]></ToUserName><FromUserName><![CDATA[FromUser]]></FromUserName>"
             "<CreateTime>123456789</CreateTime><MsgType><![CDATA[event]]></MsgType>"
             "<Event><![CDATA[subscribe]]></Event></xml>")
    r = client.post(URL, params=query(), content=event.encode())
    assert r.status_code == 200 and r.text == "success"
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><xml>&b;</xml>'
    r = client.post(URL, params=query(), content=bomb.encode())
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
    assert count(services, "SELECT count(*) AS n FROM messages") == 0


def test_late_reply_goes_through_the_customer_service_api(settings, recorder):
    s = channel_settings(settings, recorder.url, wechat_passive_reply_seconds=0.2)
    with channel_app(s, decider=slow_decider(0.6)) as (client, services, dispatcher):
        recorder.fail_next = 1      # the first API call (the token) fails: retried with backoff
        r = client.post(URL, params=query(), content=DOC_XML.encode())
        assert r.status_code == 200 and r.text == "success"
        assert wait_until(lambda: count(services, "SELECT count(*) AS n FROM outbox") == 1, timeout=10)
        # the row waits out the passive-reply window, then retries after the failed token call
        assert wait_until(lambda: dispatcher.drain().get("delivered") == 1, timeout=10)
        send = recorder.sent("/cgi-bin/message/custom/send")
        assert len(send) == 1 and send[0].query == {"access_token": "ACCESS"}
        assert send[0].json() == {"touser": "fromUser", "msgtype": "text", "text": {"content": "echo: this is a test"}}
        assert len(recorder.sent("/cgi-bin/token")) == 2
        with services.pool.connection() as conn:
            outcomes = [r["outcome"] for r in conn.execute("SELECT outcome FROM outbox_attempts ORDER BY id")]
        assert outcomes == ["retry", "delivered"]
