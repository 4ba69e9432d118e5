"""Every place a message lands, on a live gateway: the log (JSON and plain text), the turn trace and its
replay, stored message metadata, the handoff context package and ticket events (agent view), outbox
rows and ``switchboard outbox status``. Personal data is masked; business values stay."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "router"))

from keys_testkit import authorize  # noqa: E402

from channels_support import RecordingServer, channel_app, channel_settings  # noqa: E402
from ops_testkit import agent_token, msg, wire_gateway  # noqa: E402

from router.telemetry.logs import configure_logging  # noqa: E402

PERSONAL = {
    "phone": "138 1234 5678",
    "email": "王五@例子.公司",
    "card": "6222 0212 3456 7890 123",     # fails Luhn: masked because it follows "bank card"
    "id": "11010519491231002X",
    "address": "杭州市西湖区文三路90号",
    "ip": "192.168.1.10",
    "passport": "E12345678",
}
ORDER = "20241130"
TEXT = (f"order {ORDER} never arrived. call {PERSONAL['phone']} or mail {PERSONAL['email']}, bank card "
        f"{PERSONAL['card']}, ID {PERSONAL['id']}, passport {PERSONAL['passport']}, ship to {PERSONAL['address']}, "
        f"my ip {PERSONAL['ip']}: i want a refund")


def _no_personal(blob) -> None:
    text = blob if isinstance(blob, str) else json.dumps(blob, ensure_ascii=False, default=str)
    for label, value in PERSONAL.items():
        assert value not in text, (label, text)
    assert "13812345678" not in text.replace(" ", "") and "5678 123" not in text and "002X" not in text.replace(
        "[id ending 002X]", "")


@pytest.fixture
def gateway(services, tmp_path):
    wire_gateway(services, tmp_path)
    from router.app.factory import create_app

    with TestClient(create_app(services=services)) as client:
        authorize(client, services.pool)
        yield client, services


def test_turn_trace_replay_metadata_and_agent_view_are_masked(gateway):
    client, services = gateway
    body = msg("conv-pii", "m-1", TEXT) | {"metadata": {"from": "+86 138 1234 5678", "note": PERSONAL["email"],
                                                        "order": ORDER}}
    r = client.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    turn = r.json()
    cid, ticket_id = turn["conversation_id"], turn["ticket_id"]
    assert ticket_id, turn

    with services.pool.connection() as conn:
        stored = conn.execute("SELECT trace FROM turns WHERE conversation_id = %s", (cid,)).fetchone()["trace"]
        meta = conn.execute("SELECT metadata FROM messages WHERE conversation_id = %s", (cid,)).fetchone()["metadata"]
    # the stored trace: masked, and the entities keep the order number the turn was about
    _no_personal(stored)
    assert stored["classification"]["entities"]["order_numbers"] == [ORDER]
    # message metadata is stored redacted
    assert meta == {"client": {"from": "[phone]", "note": "[email]", "order": ORDER}}   # the client's own, namespaced

    sup = agent_token(services, "sup", "supervisor")
    replay = client.get(f"/v1/conversations/{cid}/trace", headers={"Authorization": f"Bearer {sup}"}).json()
    _no_personal(replay)
    inbound = replay["turns"][0]["inbound"]["text"]
    for label in ("phone", "email", "card", "id", "passport", "address", "ip"):
        assert f"[{label}]" in inbound, (label, inbound)
    assert f"order {ORDER} never arrived" in inbound
    assert replay["turns"][0]["classification"]["entities"]["order_numbers"] == [ORDER]

    # the agent view: the context package and the ticket's events, in partial form
    agent = agent_token(services, "ann", "agent")
    auth = {"Authorization": f"Bearer {agent}"}
    ticket = client.get(f"/v1/handoff/tickets/{ticket_id}", headers=auth).json()
    package = json.dumps(ticket["context"], ensure_ascii=False)
    _no_personal(package)
    assert "138****5678" in package and "[card ending 0123]" in package and "[id ending 002X]" in package
    assert ORDER in package and ticket["context"]["customer"]["order_numbers"] == [ORDER]
    assert client.post(f"/v1/handoff/tickets/{ticket_id}/claim", headers=auth).status_code == 200
    r = client.post(f"/v1/handoff/tickets/{ticket_id}/messages", headers=auth,
                    json={"text": f"I will call you on {PERSONAL['phone']} about order {ORDER}"})
    assert r.status_code in (200, 201), r.text
    events = client.get(f"/v1/handoff/tickets/{ticket_id}/events", headers=auth).json()
    _no_personal(events)
    with services.pool.connection() as conn:
        rows = conn.execute("SELECT payload FROM ticket_events WHERE ticket_id = %s", (ticket_id,)).fetchall()
    _no_personal([r["payload"] for r in rows])


def _log_lines(json_logs: bool, emit) -> str:
    configure_logging("DEBUG", json_logs=json_logs)
    root = logging.getLogger()
    handler = next(h for h in root.handlers if getattr(h, "_switchboard", False))
    stream = io.StringIO()
    old = handler.setStream(stream)
    try:
        emit()
    finally:
        handler.setStream(old)
        root.removeHandler(handler)
        root.setLevel(logging.WARNING)
    return stream.getvalue()


@pytest.mark.parametrize("json_logs", [True, False])
def test_every_log_format_is_masked(json_logs):
    log = logging.getLogger("switchboard.test.text")

    def emit():
        log.debug("inbound %s", TEXT)
        try:
            raise ValueError(f"bad input from {PERSONAL['phone']}")
        except ValueError:
            log.exception("failed for %s", PERSONAL["email"], extra={"fields": {"card": PERSONAL["card"]}})

    out = _log_lines(json_logs, emit)
    assert "inbound" in out and "ValueError" in out and "[phone]" in out
    _no_personal(out)
    assert f"order {ORDER}" in out


def test_outbox_errors_and_outbox_status_are_masked(settings, dsn, tmp_path, monkeypatch, caplog):
    """A third party's error body echoes the message: last_error, attempts, the log and the CLI mask it."""
    from router.cli import app as cli
    from router.outbox.store import enqueue_outbound

    def echo(rec):
        return 400, {"ok": False, "description": f"Bad Request: cannot send {rec.json()['text']}"}

    server = RecordingServer(answers={"/sendMessage": echo})
    try:
        with channel_app(channel_settings(settings, server.url)) as (client, services, dispatcher):
            with services.pool.connection() as conn, conn.transaction():
                conv = conn.execute("INSERT INTO conversations (channel, external_id, customer_id) "
                                    "VALUES ('telegram', 'c1', 'telegram:c1') RETURNING id").fetchone()["id"]
                conn.execute("INSERT INTO channel_routes (channel, conversation_external_id, channel_user_id, address) "
                             "VALUES ('telegram', 'c1', 'c1', '{\"chat_id\": \"c1\"}')")
                enqueue_outbound(conn, conversation_id=conv, channel="telegram", text=TEXT)
            with caplog.at_level(logging.WARNING):
                assert dispatcher.drain() == {"dead": 1}
            with services.pool.connection() as conn:
                row = conn.execute("SELECT last_error FROM outbox").fetchone()
                attempts = conn.execute("SELECT error FROM outbox_attempts").fetchall()
    finally:
        server.close()
    assert "cannot send" in row["last_error"] and f"order {ORDER}" in row["last_error"]
    _no_personal(row["last_error"])
    _no_personal([a["error"] for a in attempts])
    dead_lines = [r.getMessage() for r in caplog.records if "dead-lettered" in r.getMessage()]
    assert dead_lines
    _no_personal(dead_lines)

    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    for args in (["outbox", "status"], ["outbox", "status", "--json"]):
        r = runner.invoke(cli, args)
        assert r.exit_code == 0, r.output
        assert "cannot send" in r.output
        _no_personal(r.output)


def test_an_error_body_cut_at_300_never_leaves_part_of_a_value(settings):
    """The channel's error body is masked before it is cut: a phone number straddling character 300 of the body
    is masked whole in last_error and the attempts (cutting first left '13812' for no detector to find)."""
    from router.outbox.store import enqueue_outbound

    text = f"please call 13812345678 about order {ORDER}"
    at = {}

    def echo(rec):
        sent = rec.json()["text"]
        head = len(json.dumps({"ok": False, "description": ""})) - 2      # where the description starts
        pad = "x" * (296 - head - sent.index("138"))
        body = {"ok": False, "description": pad + sent}
        at["phone"] = json.dumps(body).index("138")
        return 400, body

    server = RecordingServer(answers={"/sendMessage": echo})
    try:
        with channel_app(channel_settings(settings, server.url)) as (client, services, dispatcher):
            with services.pool.connection() as conn, conn.transaction():
                conv = conn.execute("INSERT INTO conversations (channel, external_id, customer_id) "
                                    "VALUES ('telegram', 'c2', 'telegram:c2') RETURNING id").fetchone()["id"]
                conn.execute("INSERT INTO channel_routes (channel, conversation_external_id, channel_user_id, address) "
                             "VALUES ('telegram', 'c2', 'c2', '{\"chat_id\": \"c2\"}')")
                enqueue_outbound(conn, conversation_id=conv, channel="telegram", text=text)
            assert dispatcher.drain() == {"dead": 1}
            with services.pool.connection() as conn:
                error = conn.execute("SELECT last_error FROM outbox").fetchone()["last_error"]
                attempts = [r["error"] for r in conn.execute("SELECT error FROM outbox_attempts").fetchall()]
    finally:
        server.close()
    assert at["phone"] < 300 < at["phone"] + 11, at                      # the value straddles the cut
    for stored in (error, *attempts):
        assert "1381" not in stored and "38123" not in stored and "xxxx" in stored, stored
        assert not re.search(r"\[[a-z ]*$", stored), stored                 # no half mask token at the end


def test_metrics_labels_never_carry_a_client_value(gateway):
    client, _ = gateway
    r = client.post("/v1/messages", json=msg("conv-m", "m-1", "where is my order", channel="p13812345678"))
    assert r.status_code == 422, r.text          # a channel outside the registry is refused at the door
    ok = client.post("/v1/messages", json=msg("conv-m", "m-2", "where is my order 12345678"))
    assert ok.status_code == 200, ok.text
    text = client.get("/metrics").text
    assert "13812345678" not in text and "p1381" not in text
    assert 'switchboard_messages_total{channel="web"} 1.0' in text
