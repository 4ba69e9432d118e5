"""Replies longer than a channel takes go out as ordered parts, cut at paragraph / sentence
boundaries, each within the channel's limit as the channel counts it; a failure on a later part
retries from that part without sending the earlier ones again."""

from __future__ import annotations

import itertools
import json
import re
import threading
from urllib.parse import urlencode

import pytest
from channels_support import SECRETS, RecordingServer, channel_app, channel_settings, reply_decider
from hypothesis import given, settings as hsettings, strategies as st

from router.outbox import requeue_dead
from router.outbox.leader import wait_until
from router.channels.split import TextLimit, split_text
from router.channels.sms.inbound import twilio_signature

PUBLIC = "https://cs.example.com"


def long_reply() -> str:
    """10,000 characters of Chinese and English: paragraphs, sentences, emoji, and one sentence longer
    than any channel's limit (it can only be hard-cut)."""
    zh = "您好！关于七天无理由退货：请保留商品包装和配件，在订单页面提交申请。审核通过后，快递员会上门取件？"
    en = ("Refunds go back to the original payment method within 5 business days. Keep the receipt! "
          "Did the parcel arrive damaged? Send us a photo and we will replace it. ")
    paragraphs = []
    for i in itertools.count():
        paragraphs.append((zh * 3 + "\n" + en * 2 + "👍🏽 e\u0301 ") if i % 2 else (en + zh * 2))
        if sum(map(len, paragraphs)) > 4000:
            break
    run = "这是一个非常长而且没有任何标点符号的句子用来检验硬切分" * 100        # 2,700 characters, no boundary
    head = "\n\n".join(paragraphs) + "\n\n" + run + "🎉" * 40 + run[:2000] + "\n\n"
    tail = "\n\n".join(paragraphs)
    text = (head + tail)[:10_000]
    assert len(text) == 10_000
    return text


LONG = long_reply()


def utf16(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def assert_ordered_cover(parts: list[str], original: str) -> None:
    """The parts are consecutive pieces of the original; only whitespace lies between them."""
    pos = 0
    for p in parts:
        assert p and p == p.strip()
        i = original.index(p, pos)
        assert original[pos:i].strip() == "", f"text lost before a part: {original[pos:i][:40]!r}"
        pos = i + len(p)
    assert original[pos:].strip() == ""


# -- the splitter itself ------------------------------------------------------------------------

_ALPHABET = st.sampled_from(list("abc xyz一二三四。！？.!?,，\n") + ["\n\n", "😀", "e\u0301", "👨\u200d👩\u200d👧", ". "])


@hsettings(max_examples=300, deadline=None)
@given(st.lists(_ALPHABET, max_size=400).map("".join),
       st.integers(min_value=8, max_value=120), st.sampled_from(["chars", "utf16", "utf8"]))
def test_parts_fit_and_cover_the_text(text, size, unit):
    limit = TextLimit(size, unit)
    parts = split_text(text, limit)
    if limit.fits(text):
        assert parts == [text]
        return
    assert all(limit.fits(p) for p in parts)
    assert_ordered_cover(parts, text)
    if size >= 20:              # room for the longest cluster here (the ZWJ family: 18 UTF-8 bytes)
        for a in parts[:-1]:    # never a combining mark or a ZWJ sequence torn from its base character
            assert not a.endswith("\u200d")
        for b in parts[1:]:
            assert b[0] not in "\u0301\u200d"


def test_cuts_prefer_paragraphs_then_sentences():
    paragraphs = ["第一段。" * 10, "Second paragraph. " * 3, "第三段！" * 10]
    parts = split_text("\n\n".join(paragraphs), TextLimit(60))
    assert parts == [paragraphs[0], paragraphs[1].strip(), paragraphs[2]]
    sentences = "".join(f"Sentence number {i} is here. 第{i}句话在这里。" for i in range(30))
    parts = split_text(sentences, TextLimit(100))
    assert len(parts) > 5 and all(p[-1] in "。." for p in parts)
    assert split_text("a" * 25, TextLimit(10)) == ["a" * 10, "a" * 10, "a" * 5]


# -- through the real senders to the recording server ------------------------------------------

def _telegram(client):
    update = {"update_id": 1, "message": {"message_id": 5, "date": 1441645532, "text": "long please",
                                          "chat": {"id": 1111111, "type": "private"},
                                          "from": {"id": 1111111, "is_bot": False, "first_name": "T"}}}
    return client.post("/v1/channels/telegram/webhook", json=update,
                       headers={"X-Telegram-Bot-Api-Secret-Token": SECRETS["telegram_secret_token"]})


def _whatsapp(client):
    import hashlib
    import hmac

    payload = {"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{"field": "messages", "value": {
        "messaging_product": "whatsapp", "metadata": {"display_phone_number": "1555", "phone_number_id": "106540352242922"},
        "messages": [{"from": "16505551234", "id": "wamid.IN", "timestamp": "1749416383", "type": "text",
                      "text": {"body": "long please"}}]}}]}]}
    body = json.dumps(payload).encode()
    sig = hmac.new(SECRETS["whatsapp_app_secret"].encode(), body, hashlib.sha256).hexdigest()
    return client.post("/v1/channels/whatsapp/webhook", content=body,
                       headers={"X-Hub-Signature-256": f"sha256={sig}", "Content-Type": "application/json"})


def _sms(client):
    params = {"MessageSid": "SMin1", "AccountSid": "AC123", "From": "+14155550199", "To": "+14155550100",
              "Body": "long please", "NumMedia": "0"}
    url = PUBLIC + "/v1/channels/sms/webhook"
    sig = twilio_signature(SECRETS["twilio_auth_token"], url, list(params.items()))
    return client.post("/v1/channels/sms/webhook", content=urlencode(params).encode(),
                       headers={"X-Twilio-Signature": sig, "Content-Type": "application/x-www-form-urlencoded"})


def _wechat(client):
    import hashlib
    import time

    ts, nonce = str(int(time.time())), "1516141345"     # a signed timestamp within the replay window
    sig = hashlib.sha1("".join(sorted([SECRETS["wechat_token"], ts, nonce])).encode()).hexdigest()
    xml = ("<xml><ToUserName><![CDATA[gh_acct]]></ToUserName><FromUserName><![CDATA[oUser]]></FromUserName>"
           "<CreateTime>1348831860</CreateTime><MsgType><![CDATA[text]]></MsgType>"
           "<Content><![CDATA[long please]]></Content><MsgId>1234567890123456</MsgId></xml>")
    return client.post("/v1/channels/wechat/webhook", params={"signature": sig, "timestamp": ts, "nonce": nonce},
                       content=xml.encode())


# channel -> (inbound, API path, the text of a recorded call, the limit as the channel counts it)
CHANNELS = {
    "telegram": (_telegram, "/sendMessage", lambda r: r.json()["text"], lambda s: utf16(s) <= 4096),
    "whatsapp": (_whatsapp, "/messages", lambda r: r.json()["text"]["body"], lambda s: utf16(s) <= 4096),
    "sms": (_sms, "/Messages.json", lambda r: r.form()["Body"], lambda s: len(s) <= 1600 and utf16(s) <= 1600),
    "wechat": (_wechat, "/cgi-bin/message/custom/send", lambda r: r.json()["text"]["content"],
               lambda s: len(s.encode()) <= 2048),
}


def numbered(path):
    """Each API call answers with its own message id, as the channels do."""
    counter = itertools.count(1)
    lock = threading.Lock()

    def answer(rec):
        with lock:
            n = next(counter)
        return 200, {"ok": True, "result": {"message_id": n}, "messages": [{"id": f"wamid.{n}"}], "sid": f"SM{n}",
                     "errcode": 0, "msgid": n}
    return answer


@pytest.mark.parametrize("channel", list(CHANNELS))
def test_long_reply_reaches_the_channel_in_ordered_parts(settings, channel):
    inbound, path, text_of, fits = CHANNELS[channel]
    server = RecordingServer(answers={"/cgi-bin/token": (200, {"access_token": "ACCESS", "expires_in": 7200})})
    server.answers[path] = numbered(path)
    s = channel_settings(settings, server.url, public_url=PUBLIC, wechat_passive_reply_seconds=0.2)
    try:
        with channel_app(s, decider=reply_decider(lambda _: LONG)) as (client, services, dispatcher):
            assert inbound(client).status_code == 200
            assert wait_until(lambda: dispatcher.drain().get("delivered") == 1, timeout=10)
            parts = [text_of(r) for r in server.sent(path)]
            with services.pool.connection() as conn:
                box = conn.execute("SELECT id, status, attempts, provider_message_id FROM outbox").fetchone()
                stored = conn.execute("SELECT part, parts FROM outbox_parts ORDER BY part").fetchall()
                note = conn.execute("SELECT error FROM outbox_attempts").fetchone()["error"]
    finally:
        server.close()
    assert len(parts) >= 3 and all(fits(p) for p in parts), [len(p) for p in parts]
    assert_ordered_cover(parts, LONG)
    assert re.sub(r"\s", "", "".join(parts)) == re.sub(r"\s", "", LONG)
    assert (box["status"], box["attempts"]) == ("delivered", 1)
    assert [(r["part"], r["parts"]) for r in stored] == [(i, len(parts)) for i in range(len(parts))]
    assert note == f"{len(parts)} parts"


def test_failure_on_the_second_part_resumes_there(settings):
    server = RecordingServer()
    calls = itertools.count(1)

    def second_call_fails(rec):
        n = next(calls)
        if n == 2:
            return 502, {"ok": False, "description": "Bad Gateway"}
        return 200, {"ok": True, "result": {"message_id": 100 + n}}

    server.answers["/sendMessage"] = second_call_fails
    try:
        with channel_app(channel_settings(settings, server.url), decider=reply_decider(lambda _: LONG)) as (
                client, services, dispatcher):
            assert _telegram(client).status_code == 200
            assert dispatcher.drain()["retry"] == 1
            assert wait_until(lambda: dispatcher.drain().get("delivered") == 1, timeout=10)
            calls_made = [r.json()["text"] for r in server.sent("/sendMessage")]
            with services.pool.connection() as conn:
                attempts = conn.execute("SELECT outcome, error FROM outbox_attempts ORDER BY id").fetchall()
                box = conn.execute("SELECT provider_message_id, attempts FROM outbox").fetchone()
                ids = [r["provider_message_id"] for r in conn.execute(
                    "SELECT provider_message_id FROM outbox_parts ORDER BY part")]
    finally:
        server.close()
    # call 1: part 1 ok; call 2: part 2 fails; the retry starts again at part 2
    assert calls_made[1] == calls_made[2], "the retry must resend the failed part"
    delivered = [calls_made[0]] + calls_made[2:]
    assert len(set(delivered)) == len(delivered), "no part is delivered twice"
    assert_ordered_cover(delivered, LONG)
    assert [a["outcome"] for a in attempts] == ["retry", "delivered"]
    assert attempts[0]["error"].startswith(f"part 2/{len(delivered)}: telegram sendMessage: HTTP 502")
    assert attempts[1]["error"] == f"{len(delivered)} parts, 1 of them delivered by earlier attempts"
    assert box["attempts"] == 2 and box["provider_message_id"] == "101"
    assert ids == ["101"] + [str(100 + n) for n in range(3, len(delivered) + 2)]


def test_dead_letter_on_a_later_part_is_requeued_from_that_part(settings):
    server = RecordingServer()
    calls = itertools.count(1)
    server.answers["/sendMessage"] = lambda rec: (
        (400, {"ok": False, "description": "Bad Request: chat not found"}) if next(calls) == 2
        else (200, {"ok": True, "result": {"message_id": 7}}))
    try:
        with channel_app(channel_settings(settings, server.url), decider=reply_decider(lambda _: LONG)) as (
                client, services, dispatcher):
            assert _telegram(client).status_code == 200
            assert dispatcher.drain()["dead"] == 1            # a 4xx is final: dead letter after part 1
            with services.pool.connection() as conn:
                assert "part 2/" in conn.execute("SELECT last_error FROM outbox").fetchone()["last_error"]
                assert requeue_dead(conn) == 1
            assert dispatcher.drain()["delivered"] == 1
            texts = [r.json()["text"] for r in server.sent("/sendMessage")]
    finally:
        server.close()
    assert texts[1] == texts[2] and texts.count(texts[0]) == 1
    assert_ordered_cover([texts[0]] + texts[2:], LONG)
