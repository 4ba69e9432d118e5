"""Quick replies (a reply's ``suggestions``) as each channel renders them, sent through the real outbox
dispatcher to a recording HTTP server: Telegram reply keyboard, WhatsApp reply buttons, web JSON."""

from __future__ import annotations

import json

import pytest
from channels_support import WHATSAPP_SENT, RecordingServer, channel_app, channel_settings, count

from router.outbox.leader import wait_until
from router.outbox.store import enqueue_outbound

SUGGESTIONS = ["Where is my order?", "Returns and refunds", "Talk to a person", "A fourth, too long for a button"]


@pytest.fixture
def recorder():
    server = RecordingServer(answers={"/sendMessage": (200, {"ok": True, "result": {"message_id": 1}}),
                                      **WHATSAPP_SENT, "/web-callback": (200, {"id": "w-1"})})
    yield server
    server.close()


def _queue(services, channel, address, text, payload):
    with services.pool.connection() as conn, conn.transaction():
        conv = conn.execute("INSERT INTO conversations (channel, external_id, customer_id) VALUES (%s, 'x-1', 'u-1') "
                            "RETURNING id", (channel,)).fetchone()["id"]
        conn.execute("INSERT INTO channel_routes (channel, conversation_external_id, channel_user_id, address) "
                     "VALUES (%s, 'x-1', 'u-1', %s)", (channel, json.dumps(address)))
        enqueue_outbound(conn, conversation_id=conv, channel=channel, text=text, payload=payload)


def _deliver(services, dispatcher):
    assert wait_until(lambda: dispatcher.drain(max_seconds=2) is not None and count(
        services, "SELECT count(*) AS n FROM outbox WHERE status IN ('delivered', 'skipped')") == 1, timeout=10)


def test_telegram_renders_suggestions_as_a_one_time_reply_keyboard(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as (_, services, dispatcher):
        _queue(services, "telegram", {"chat_id": "42"}, "What would you like to do?",
               {"suggestions": SUGGESTIONS, "lang": "en"})
        _deliver(services, dispatcher)
    [sent] = [r.json() for r in recorder.sent("/sendMessage")]
    assert sent["text"] == "What would you like to do?"
    assert sent["reply_markup"]["keyboard"] == [[{"text": s}] for s in SUGGESTIONS]
    assert sent["reply_markup"]["one_time_keyboard"] is True


def test_whatsapp_renders_suggestions_as_reply_buttons(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as (_, services, dispatcher):
        _queue(services, "whatsapp", {"phone_number_id": "1001", "to": "15550001"}, "请问您需要什么帮助？",
               {"suggestions": ["查询订单", "退货退款", "转人工", "第四个"], "lang": "zh"})
        _deliver(services, dispatcher)
    [sent] = [r.json() for r in recorder.sent("/messages")]
    assert sent["type"] == "interactive" and sent["interactive"]["type"] == "button"
    assert sent["interactive"]["body"]["text"] == "请问您需要什么帮助？"
    titles = [b["reply"]["title"] for b in sent["interactive"]["action"]["buttons"]]
    assert titles == ["查询订单", "退货退款", "转人工"]          # the Cloud API takes at most three


def test_whatsapp_without_suggestions_stays_a_text_message(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as (_, services, dispatcher):
        _queue(services, "whatsapp", {"phone_number_id": "1001", "to": "15550001"}, "Hello!", {"lang": "en"})
        _deliver(services, dispatcher)
    [sent] = [r.json() for r in recorder.sent("/messages")]
    assert sent["type"] == "text" and sent["text"]["body"] == "Hello!"


def test_web_callback_carries_suggestions_and_language_in_its_json(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as (_, services, dispatcher):
        _queue(services, "web", {}, "What would you like to do?", {"suggestions": SUGGESTIONS[:3], "lang": "en"})
        _deliver(services, dispatcher)
    [sent] = [r.json() for r in recorder.sent("/web-callback")]
    assert sent["suggestions"] == SUGGESTIONS[:3] and sent["lang"] == "en"
