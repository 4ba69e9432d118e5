"""WeChat: a message answered "success" before its turn committed is never lost.

The turn is made to outlast the passive-reply budget by a real row lock on its conversation, then
to fail by terminating its backend (twice: the pipeline retries a lost connection once). The
webhook had already answered "success"; the inbound worker must finish the message.
"""

from __future__ import annotations

import threading

import psycopg
import pytest
from channels_support import RecordingServer, channel_app, channel_settings, count
from test_channels_wechat import DOC_XML, URL, query

from router.outbox.leader import wait_until


@pytest.fixture
def recorder():
    server = RecordingServer(answers={"/cgi-bin/token": (200, {"access_token": "ACCESS", "expires_in": 7200}),
                                      "/cgi-bin/message/custom/send": (200, {"errcode": 0, "errmsg": "ok"})})
    yield server
    server.close()


def _waiting_pid(admin, exclude) -> int | None:
    rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                         "AND wait_event_type = 'Lock'").fetchall()
    pids = [r[0] for r in rows if r[0] not in exclude]
    return pids[0] if pids else None


def test_a_message_acknowledged_before_its_turn_failed_is_finished_by_the_inbound_worker(settings, recorder, dsn):
    from router.app.composition import wire_inbound

    s = channel_settings(settings, recorder.url, wechat_passive_reply_seconds=0.2, inbound_retry_seconds=0,
                         inbound_poll_seconds=0.1)
    second = DOC_XML.replace("1234567890123456", "1234567890123457").replace("this is a test", "second one")
    with channel_app(s) as (client, services, dispatcher):
        first = client.post(URL, params=query(), content=DOC_XML.encode())
        assert first.status_code == 200 and b"echo: this is a test" in first.content
        out: dict = {}
        with psycopg.connect(dsn, autocommit=True) as admin, psycopg.connect(dsn) as locker:
            locker.execute("SELECT 1 FROM conversations WHERE external_id = 'fromUser' FOR UPDATE")
            t = threading.Thread(target=lambda: out.setdefault(
                "r", client.post(URL, params=query(nonce="1516141346"), content=second.encode())))
            t.start()
            t.join(30)
            # answered while the turn still waits for the lock
            assert out["r"].status_code == 200 and out["r"].text == "success"
            assert count(services, "SELECT count(*) AS n FROM inbound_queue WHERE status = 'pending'") == 1
            killed: set[int] = set()
            for _ in range(2):   # the turn and its one retry
                assert wait_until(lambda: _waiting_pid(admin, killed) is not None, timeout=20)
                pid = _waiting_pid(admin, killed)
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                killed.add(pid)
            locker.rollback()
        # the turn has failed: nothing of the second message is stored yet, but it is held
        assert wait_until(lambda: _waiting_pid_gone(dsn), timeout=10)
        assert count(services, "SELECT count(*) AS n FROM messages WHERE external_id = '1234567890123457'") == 0
        wire_inbound(services)
        assert wait_until(lambda: count(services, "SELECT count(*) AS n FROM inbound_queue "
                                                  "WHERE status = 'done'") == 1, timeout=20)
        assert count(services, "SELECT count(*) AS n FROM messages WHERE external_id = '1234567890123457'") == 1
        assert count(services, "SELECT count(*) AS n FROM turns t JOIN messages m ON m.id = t.message_id "
                               "WHERE m.external_id = '1234567890123457'") == 1
        # its reply goes out through the customer-service API, once
        assert count(services, "SELECT count(*) AS n FROM outbox WHERE payload->>'text' = 'echo: second one'") == 1
        assert wait_until(lambda: dispatcher.drain().get("delivered") == 1, timeout=10)
        send = recorder.sent("/cgi-bin/message/custom/send")
        assert [r.json()["text"]["content"] for r in send] == ["echo: second one"]
        # WeChat retrying anyway changes nothing
        again = client.post(URL, params=query(nonce="1516141346"), content=second.encode())
        assert again.status_code == 200
        assert count(services, "SELECT count(*) AS n FROM messages WHERE direction = 'in'") == 2
        assert count(services, "SELECT count(*) AS n FROM outbox WHERE payload->>'text' = 'echo: second one'") == 1


def _waiting_pid_gone(dsn) -> bool:
    with psycopg.connect(dsn, autocommit=True) as admin:
        return _waiting_pid(admin, set()) is None
