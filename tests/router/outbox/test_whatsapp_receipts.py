"""WhatsApp status notifications (sent, delivered, read, failed) recorded against the outbox row that
got the wamid: stored once per status, never moving backwards, reported by ``outbox status`` and the
conversation trace; receipts for messages we never sent are acknowledged and ignored."""

from __future__ import annotations

import copy

import pytest
from channels_support import (
    channel_app,
    channel_settings,
    count,
    post_concurrently,
    reply_decider,
    whatsapp_recorder,  # noqa: F401 - the "recorder" fixture
    whatsapp_signed,
)

from router.outbox import outbox_status
from router.ops.trace import load_trace

URL = "/v1/channels/whatsapp/webhook"

INBOUND = {
    "object": "whatsapp_business_account",
    "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
        "contacts": [{"profile": {"name": "Sheena Nelson"}, "wa_id": "16505551234"}],
        "messages": [{"from": "16505551234", "id": "wamid.IN1", "timestamp": "1749416383", "type": "text",
                      "text": {"body": "Does it come in another color?"}}],
    }}]}],
}


def status(wamid: str, state: str, ts: int, **extra) -> dict:
    """A status object shaped like the Cloud API's webhook reference (conversation and pricing included)."""
    s = {"id": wamid, "status": state, "timestamp": str(ts), "recipient_id": "16505551234", **extra}
    if state in ("sent", "delivered"):
        s["conversation"] = {"id": "CONVERSATION_ID", "origin": {"type": "service"}}
        s["pricing"] = {"billable": True, "pricing_model": "PMP", "category": "service", "type": "regular"}
    return s


FAILED_131047 = {"errors": [{
    "code": 131047, "title": "Re-engagement message", "message": "Re-engagement message",
    "error_data": {"details": "Message failed to send because more than 24 hours have passed since the customer "
                              "last replied to this number."},
    "href": "https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/"}]}


def notification(*statuses: dict) -> dict:
    return {"object": "whatsapp_business_account", "entry": [{"id": "102290129340398", "changes": [{
        "field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
            "statuses": list(statuses)}}]}]}


signed = whatsapp_signed


@pytest.fixture
def delivered(settings, recorder):
    """An app whose reply to one customer message was delivered with wamid.OUT."""
    with channel_app(channel_settings(settings, recorder.url)) as (client, services, dispatcher):
        body, headers = signed(INBOUND)
        assert client.post(URL, content=body, headers=headers).status_code == 200
        assert dispatcher.drain()["delivered"] == 1
        yield client, services


def post(client, *statuses):
    body, headers = signed(notification(*statuses))
    r = client.post(URL, content=body, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def row(services):
    with services.pool.connection() as conn:
        return conn.execute("SELECT id, receipt_status, receipt_at, receipt_error FROM outbox").fetchone()


def test_receipts_advance_and_are_stored_once(delivered):
    client, services = delivered
    assert post(client, status("wamid.OUT", "sent", 1750263770))["receipts"] == 1
    assert row(services)["receipt_status"] == "sent"
    post(client, status("wamid.OUT", "delivered", 1750263773))
    assert row(services)["receipt_status"] == "delivered"
    answer = post(client, status("wamid.OUT", "read", 1750263790))
    assert answer["receipts"] == 1 and answer["ignored"] == []
    r = row(services)
    assert r["receipt_status"] == "read" and r["receipt_at"].timestamp() == 1750263790
    # Meta retries a notification: stored once
    post(client, status("wamid.OUT", "delivered", 1750263773))
    post(client, status("wamid.OUT", "read", 1750263790))
    with services.pool.connection() as conn:
        receipts = conn.execute("SELECT status, status_at FROM outbox_receipts ORDER BY id").fetchall()
    assert [x["status"] for x in receipts] == ["sent", "delivered", "read"]
    assert row(services)["receipt_status"] == "read"


def test_out_of_order_receipts_never_downgrade(delivered):
    client, services = delivered
    # read first, then the late delivered and sent in one batch: still read, at read's time
    post(client, status("wamid.OUT", "read", 1750263790))
    post(client, status("wamid.OUT", "delivered", 1750263773), status("wamid.OUT", "sent", 1750263770))
    r = row(services)
    assert r["receipt_status"] == "read" and r["receipt_at"].timestamp() == 1750263790
    assert count(services, "SELECT count(*) AS n FROM outbox_receipts") == 3
    # five copies of one notification at once: one row, same state
    body, headers = signed(notification(status("wamid.OUT", "delivered", 1750263773)))
    assert [x.status_code for x in post_concurrently(client, URL, body, headers)] == [200] * 5
    assert count(services, "SELECT count(*) AS n FROM outbox_receipts") == 3


def test_failed_receipt_keeps_error_and_is_reported(delivered):
    client, services = delivered
    post(client, status("wamid.OUT", "sent", 1750263770))
    post(client, status("wamid.OUT", "failed", 1750263800, **FAILED_131047))
    r = row(services)
    assert r["receipt_status"] == "failed"
    assert r["receipt_error"].startswith("131047 Re-engagement message: Message failed to send")
    with services.pool.connection() as conn:
        st = outbox_status(conn)
        conv_id = conn.execute("SELECT id FROM conversations").fetchone()["id"]
        trace = load_trace(conn, str(conv_id))
    assert st["receipts"] == {"whatsapp": {"failed": 1}}
    (failed,) = st["failed_receipts"]
    assert (failed["id"], failed["error_code"], failed["error_title"]) == (r["id"], "131047", "Re-engagement message")
    delivery = trace["turns"][0]["outbound"][0]["delivery"]
    assert delivery["status"] == "delivered" and delivery["provider_message_id"] == "wamid.OUT"
    assert delivery["receipt"]["status"] == "failed" and "131047" in delivery["receipt"]["error"]


def test_unknown_wamid_is_acknowledged_and_ignored(delivered):
    client, services = delivered
    answer = post(client, status("wamid.SOMEONE-ELSES", "delivered", 1750263773),
                  status("wamid.OUT", "delivered", 1750263774), {"id": "wamid.OUT", "status": "deleted"}, "junk")
    assert answer["receipts"] == 1
    assert answer["ignored"] == ["status:deleted", "status:?", "status:delivered"]
    assert count(services, "SELECT count(*) AS n FROM outbox_receipts") == 1
    assert row(services)["receipt_status"] == "delivered"


def test_forged_receipt_is_401_and_changes_nothing(delivered):
    client, services = delivered
    body, headers = signed(notification(status("wamid.OUT", "read", 1750263790)))
    r = client.post(URL, content=body.replace(b"read", b"sent"), headers=headers)
    assert r.status_code == 401
    assert count(services, "SELECT count(*) AS n FROM outbox_receipts") == 0
    assert row(services)["receipt_status"] is None


def test_receipt_for_any_part_of_a_long_reply(settings, recorder):
    """A reply sent in parts has one wamid per part; each finds the row."""
    counter = iter(range(1, 100))
    recorder.answers["/messages"] = lambda rec: (200, {"messages": [{"id": f"wamid.PART{next(counter)}"}]})
    doubling = reply_decider(lambda text: text + "\n\n" + text)     # 6,000 characters: two WhatsApp texts
    with channel_app(channel_settings(settings, recorder.url), decider=doubling) as (client, services, dispatcher):
        payload = copy.deepcopy(INBOUND)
        payload["entry"][0]["changes"][0]["value"]["messages"][0]["text"]["body"] = ("Long question. " * 200)
        body, headers = signed(payload)
        assert client.post(URL, content=body, headers=headers).status_code == 200
        assert dispatcher.drain()["delivered"] == 1
        assert len(recorder.sent("/messages")) == 2
        post(client, status("wamid.PART2", "read", 1750263790), status("wamid.PART1", "delivered", 1750263780))
        with services.pool.connection() as conn:
            parts = conn.execute("SELECT part, status FROM outbox_receipts ORDER BY part").fetchall()
            box = conn.execute("SELECT provider_message_id, receipt_status FROM outbox").fetchone()
        assert [(p["part"], p["status"]) for p in parts] == [(0, "delivered"), (1, "read")]
        assert (box["provider_message_id"], box["receipt_status"]) == ("wamid.PART1", "read")
