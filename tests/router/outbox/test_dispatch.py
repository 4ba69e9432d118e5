"""The outbox dispatcher on the real database and a real HTTP server: backoff, rate limits, ordering,
leases, dead letters, leader election, the app's background loop and the ``switchboard outbox`` CLI."""

from __future__ import annotations

import json
import random
import time

import pytest
from channels_support import SECRETS, RecordingServer, channel_app, channel_settings, count
from typer.testing import CliRunner

from router.outbox import DispatcherLoop, backoff_seconds, build_dispatcher, requeue_dead
from router.outbox.leader import wait_until
from router.outbox.ratelimit import TokenBucket
from router.outbox.store import enqueue_outbound
from router.turn.pipeline import TurnResult
from router.schemas import Decision

SEND = "/bot123456:ABC-DEF/sendMessage"


@pytest.fixture
def recorder():
    server = RecordingServer(answers={"/sendMessage": (200, {"ok": True, "result": {"message_id": 1}})})
    yield server
    server.close()


@pytest.fixture
def app(settings, recorder):
    with channel_app(channel_settings(settings, recorder.url)) as parts:
        yield parts


def conversation(services, ext="chat-1", channel="telegram", address=None) -> str:
    with services.pool.connection() as conn, conn.transaction():
        conv = conn.execute("INSERT INTO conversations (channel, external_id, customer_id) VALUES (%s, %s, %s) "
                            "RETURNING id", (channel, ext, f"{channel}:{ext}")).fetchone()["id"]
        if address is not False:
            conn.execute("INSERT INTO channel_routes (channel, conversation_external_id, channel_user_id, address) "
                         "VALUES (%s, %s, %s, %s)",
                         (channel, ext, ext, json.dumps(address or {"chat_id": ext})))
    return conv


def queue(services, conv, text, channel="telegram", kind="reply") -> int:
    with services.pool.connection() as conn, conn.transaction():
        return enqueue_outbound(conn, conversation_id=conv, channel=channel, text=text, kind=kind)["outbox_id"]


def drain_until(dispatcher, predicate, timeout=10.0) -> bool:
    return wait_until(lambda: dispatcher.drain(max_seconds=2) is not None and predicate(), timeout=timeout)


def test_backoff_is_exponential_with_jitter():
    rng = random.Random(7)
    for attempt in range(1, 8):
        full = min(10.0, 1.0 * 2 ** (attempt - 1))
        samples = [backoff_seconds(attempt, 1.0, 10.0, rng) for _ in range(50)]
        assert all(full / 2 <= s <= full for s in samples)
        assert max(samples) - min(samples) > full / 10      # jittered, not a fixed schedule


def test_token_bucket_refills_at_its_rate():
    now = [0.0]
    bucket = TokenBucket(rate=4, clock=lambda: now[0])
    assert bucket.available() == 4 and bucket.take(4) and not bucket.take(1)
    now[0] += 0.5
    assert bucket.available() == 2
    now[0] += 10
    assert bucket.available() == 4          # never more than the burst


def test_rate_limit_holds_per_channel(settings, recorder):
    s = channel_settings(settings, recorder.url, outbox_rate_limits={"telegram": 5.0})
    with channel_app(s) as (client, services, dispatcher):
        for i in range(12):
            queue(services, conversation(services, ext=f"c{i}"), f"m{i}")
        assert drain_until(dispatcher, lambda: len(recorder.sent(SEND)) == 12)
    times = sorted(r.at for r in recorder.sent(SEND))
    # a burst of at most 5, then 5 per second: no 1-second window holds more than 5 + 5
    assert max(sum(1 for t in times if a <= t < a + 1.0) for a in times) <= 10
    assert times[-1] - times[0] >= (12 - 5) / 5 - 0.3


def test_messages_of_a_conversation_stay_in_order_across_a_retry(app, recorder):
    client, services, dispatcher = app
    conv = conversation(services)
    other = conversation(services, ext="chat-2")
    for text in ("first", "second", "third"):
        queue(services, conv, text)
    queue(services, other, "independent")
    recorder.fail_next, recorder.fail_match = 1, b"first"
    assert drain_until(dispatcher, lambda: count(services, "SELECT count(*) AS n FROM outbox "
                                                           "WHERE status = 'delivered'") == 4)
    texts = [r.json()["text"] for r in recorder.sent(SEND) if r.json()["chat_id"] == "chat-1"]
    assert texts[-3:] == ["first", "second", "third"] and texts.count("first") == 2


def test_a_crashed_senders_lease_expires_and_the_row_is_sent(app, recorder):
    client, services, dispatcher = app
    conv = conversation(services)
    stuck = queue(services, conv, "stuck")
    fresh = queue(services, conversation(services, ext="chat-2"), "in flight elsewhere")
    with services.pool.connection() as conn:
        conn.execute("UPDATE outbox SET status = 'sending', attempts = 1, lease_until = now() - interval '1 second' "
                     "WHERE id = %s", (stuck,))
        conn.execute("UPDATE outbox SET status = 'sending', attempts = 1, lease_until = now() + interval '1 hour' "
                     "WHERE id = %s", (fresh,))
    assert dispatcher.drain() == {"delivered": 1}
    with services.pool.connection() as conn:
        rows = {r["id"]: r for r in conn.execute("SELECT id, status, attempts FROM outbox")}
    assert (rows[stuck]["status"], rows[stuck]["attempts"]) == ("delivered", 2)
    assert rows[fresh]["status"] == "sending"


def test_undeliverable_rows_are_dead_lettered_with_their_reason(settings, recorder):
    s = channel_settings(settings, recorder.url, whatsapp_access_token=None)
    with channel_app(s) as (client, services, dispatcher):
        ids = {
            "no sender": queue(services, conversation(services, ext="f1", channel="fax", address={"x": 1}), "a",
                               channel="fax"),
            "no address": queue(services, conversation(services, ext="t1", address=False), "b"),
            "not configured": queue(services, conversation(services, ext="w1", channel="whatsapp"), "c",
                                    channel="whatsapp"),
        }
        assert dispatcher.drain() == {"dead": 3}
        with services.pool.connection() as conn:
            errors = {r["id"]: r["last_error"] for r in conn.execute("SELECT id, last_error FROM outbox")}
            assert requeue_dead(conn, [ids["no address"]]) == 1
            assert conn.execute("SELECT status, attempts FROM outbox WHERE id = %s",
                                (ids["no address"],)).fetchone() == {"status": "pending", "attempts": 0}
    assert errors[ids["no sender"]] == "no sender for channel 'fax'"
    assert errors[ids["no address"]] == "no chat_id in the conversation's address"
    assert "SWITCHBOARD_WHATSAPP_ACCESS_TOKEN" in errors[ids["not configured"]]
    assert recorder.requests == []


def test_retry_after_of_a_429_is_honoured(settings, recorder):
    recorder.answers["/sendMessage"] = (429, {"ok": False, "parameters": {"retry_after": 30}}, {"Retry-After": "30"})
    with channel_app(channel_settings(settings, recorder.url, outbox_backoff_max_seconds=120)) as (_, services, d):
        queue(services, conversation(services), "hello")
        assert d.drain() == {"retry": 1}
        with services.pool.connection() as conn:
            wait = conn.execute("SELECT EXTRACT(EPOCH FROM next_attempt_at - now()) AS s FROM outbox").fetchone()["s"]
    assert 28 <= float(wait) <= 31


def test_reply_is_queued_when_the_decider_did_not(settings, recorder):
    def reply_only(ctx):   # answers but leaves the outbox to the gateway
        return TurnResult(decision=Decision(tier="L1", channel="rules"), state="l1_resolved",
                          reply={"text": "answer", "citations": []})

    update = {"update_id": 1, "message": {"message_id": 5, "date": 1700000000, "text": "hi",
                                          "chat": {"id": 42, "type": "private"}, "from": {"id": 42, "is_bot": False}}}
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRETS["telegram_secret_token"]}
    with channel_app(channel_settings(settings, recorder.url), decider=reply_only) as (client, services, d):
        for _ in range(3):
            assert client.post("/v1/channels/telegram/webhook", json=update, headers=headers).status_code == 200
        with services.pool.connection() as conn:
            rows = conn.execute("SELECT dedupe_key, payload FROM outbox").fetchall()
        assert len(rows) == 1 and rows[0]["dedupe_key"].startswith("reply:") and rows[0]["payload"]["text"] == "answer"
        assert count(services, "SELECT count(*) AS n FROM messages WHERE direction = 'out'") == 1
        assert d.drain() == {"delivered": 1}
    assert recorder.sent(SEND)[0].json() == {"chat_id": 42, "text": "answer"}


def test_an_agent_message_reaches_the_customers_channel(app, recorder):
    client, services, dispatcher = app
    conv = conversation(services, ext="77", address={"chat_id": 77})
    queue(services, conv, "Hi, I am Ana from support.", kind="agent_message")
    assert dispatcher.drain() == {"delivered": 1}
    assert recorder.sent(SEND)[0].json() == {"chat_id": 77, "text": "Hi, I am Ana from support."}


def test_one_leader_at_a_time_and_failover(app):
    client, services, _ = app
    loops = [DispatcherLoop(services.dsn, build_dispatcher(services.settings, services.pool), poll_seconds=0.05,
                            retry_leader_seconds=0.05) for _ in range(2)]
    try:
        for loop in loops:
            loop.start()
        assert wait_until(lambda: sum(loop.is_leader for loop in loops) == 1, timeout=5)
        time.sleep(0.3)
        assert sum(loop.is_leader for loop in loops) == 1
        leader = next(loop for loop in loops if loop.is_leader)
        follower = next(loop for loop in loops if loop is not leader)
        leader.stop()
        assert wait_until(lambda: follower.is_leader, timeout=5)
    finally:
        for loop in loops:
            loop.stop()
            loop.dispatcher.close()


def test_the_apps_background_loop_delivers(settings, recorder):
    from router.app.composition import wire_dispatcher

    s = channel_settings(settings, recorder.url, dispatcher_enabled=True, outbox_poll_seconds=0.05)
    update = {"update_id": 9, "message": {"message_id": 1, "date": 1700000000, "text": "ping",
                                          "chat": {"id": 9, "type": "private"}, "from": {"id": 9}}}
    with channel_app(s) as (client, services, _):
        wire_dispatcher(services)
        r = client.post("/v1/channels/telegram/webhook", json=update,
                        headers={"X-Telegram-Bot-Api-Secret-Token": SECRETS["telegram_secret_token"]})
        assert r.status_code == 200
        assert wait_until(lambda: len(recorder.sent(SEND)) == 1, timeout=10)
        assert client.get("/readyz").json()["checks"]["dispatcher"]["detail"] == "leader"
    assert recorder.sent(SEND)[0].json() == {"chat_id": 9, "text": "echo: ping"}


def test_outbox_cli(app, recorder, dsn, tmp_path, monkeypatch):
    from router.cli import app as cli

    client, services, dispatcher = app
    env = {"SWITCHBOARD_DATABASE_URL": dsn, "SWITCHBOARD_HOME": str(tmp_path / "home"),
           "SWITCHBOARD_TELEGRAM_BOT_TOKEN": SECRETS["telegram_bot_token"],
           "SWITCHBOARD_TELEGRAM_API_BASE_URL": recorder.url}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    queue(services, conversation(services), "from the cli")
    queue(services, conversation(services, ext="x", channel="fax", address={"x": 1}), "nowhere", channel="fax")
    runner = CliRunner()
    r = runner.invoke(cli, ["outbox", "status", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["by_channel"] == {"fax": {"pending": 1}, "telegram": {"pending": 1}}
    r = runner.invoke(cli, ["outbox", "run", "--once", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["delivered"], out["dead"]) == (1, 1)
    assert out["outbox"]["dead_letters"][0]["last_error"] == "no sender for channel 'fax'"
    assert recorder.sent(SEND)[0].json()["text"] == "from the cli"
    r = runner.invoke(cli, ["outbox", "retry", "--json"])
    assert r.exit_code == 2
    r = runner.invoke(cli, ["outbox", "retry", "--all", "--channel", "fax", "--json"])
    assert json.loads(r.output) == {"requeued": 1}
    # while another process leads, a one-shot run refuses instead of breaking the rate limits
    loop = DispatcherLoop(dsn, build_dispatcher(services.settings, services.pool), poll_seconds=0.05)
    loop.start()
    try:
        assert wait_until(lambda: loop.is_leader, timeout=5)
        r = runner.invoke(cli, ["outbox", "run", "--once", "--json"])
        assert r.exit_code == 2 and "leader lock" in json.loads(r.output)["error"]
    finally:
        loop.stop()
        loop.dispatcher.close()
