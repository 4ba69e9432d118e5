"""Database faults on real Postgres: a killed backend mid-turn, a stopped and restarted server.

The session-wide server is never stopped here: restart tests run a private embedded server of
their own (module scope), so the rest of the suite does not notice.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from keys_testkit import authorize

from router.channels.web.inbound import signed_headers

PROBLEM = "application/problem+json"


WEB_SECRET = "faults-web-secret"


def _msg(**over):
    body = {"channel": "web", "conversation_id": "c-1", "customer_id": "u-1", "message_id": "m-1",
            "text": "where is my order?"}
    body.update(over)
    return body


def _wait_for(fn, timeout: float = 20.0, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(step)
    return None


def _lock_waiter(admin: psycopg.Connection, exclude: set[int]) -> int | None:
    """The pid of a backend of this database waiting for a row lock (the blocked turn)."""
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchall()
    pids = [r[0] for r in rows if r[0] not in exclude]
    return pids[0] if pids else None


def _counter(client, name: str, label: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f"{name}{{") and label in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _post_in_thread(client, body, out: dict):
    def run():
        out["response"] = client.post("/v1/messages", json=body)

    t = threading.Thread(target=run)
    t.start()
    return t


def _terminating(dsn: str, client, body, kills: int) -> tuple[object, int]:
    """Post ``body`` while the conversation row is locked; terminate the blocked turn's backend ``kills``
    times (each retry blocks again on the lock), then release the lock. Returns (response, kills done)."""
    done = 0
    with psycopg.connect(dsn, autocommit=True) as admin, psycopg.connect(dsn) as locker:
        locker.execute("SELECT 1 FROM conversations WHERE external_id = 'c-1' FOR UPDATE")
        out: dict = {}
        t = _post_in_thread(client, body, out)
        killed: set[int] = set()
        for _ in range(kills):
            pid = _wait_for(lambda: _lock_waiter(admin, killed))
            if pid is None:
                break
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            killed.add(pid)
            done += 1
            if _wait_for(lambda: "response" in out, timeout=0.5) and done < kills:
                break      # answered already (the turn gave up): no second attempt to kill
        locker.rollback()
        t.join(30)
    return out.get("response"), done


def test_a_turn_whose_backend_is_killed_is_retried_once_on_a_fresh_connection(client, services, dsn):
    assert client.post("/v1/messages", json=_msg(message_id="m-0", text="hello")).status_code == 200
    before = _counter(client, "switchboard_turn_failures_total", 'cause="server_shutdown"')
    r, kills = _terminating(dsn, client, _msg(), kills=1)
    assert kills == 1
    assert r is not None and r.status_code == 200, r and r.text
    assert r.headers.get("idempotent-replayed") is None
    with services.pool.connection() as conn:
        n = conn.execute("SELECT count(*) AS n FROM messages WHERE external_id = 'm-1'").fetchone()["n"]
        turns = conn.execute("SELECT count(*) AS n FROM turns t JOIN messages m ON m.id = t.message_id "
                             "WHERE m.external_id = 'm-1'").fetchone()["n"]
    assert (n, turns) == (1, 1)
    assert _counter(client, "switchboard_turn_failures_total", 'cause="server_shutdown"') == before + 1
    # committed messages only: m-0 and m-1, not the rolled-back attempt
    assert _counter(client, "switchboard_messages_total", 'channel="web"') == 2


def test_a_turn_that_loses_its_connection_twice_answers_503_and_stores_nothing(client, services, dsn):
    assert client.post("/v1/messages", json=_msg(message_id="m-0", text="hello")).status_code == 200
    r, kills = _terminating(dsn, client, _msg(), kills=2)
    assert kills == 2
    assert r.status_code == 503, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    assert int(r.headers["retry-after"]) >= 1
    assert r.json()["request_id"] == r.headers["x-request-id"]
    with services.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM messages WHERE external_id = 'm-1'").fetchone()["n"] == 0
    # the client retries the same message id: routed normally
    again = client.post("/v1/messages", json=_msg())
    assert again.status_code == 200 and again.headers.get("idempotent-replayed") is None


def test_an_unhandled_error_keeps_its_request_id_and_is_logged_once(services, caplog):
    from router.app.factory import create_app

    app = create_app(services=services)

    @app.get("/test-only/boom")
    def boom():
        raise RuntimeError("boom")

    with TestClient(app) as c, caplog.at_level(logging.ERROR):
        r = c.get("/test-only/boom", headers={"X-Request-ID": "req-42"})
        assert r.status_code == 500
        assert r.headers["x-request-id"] == "req-42"
        assert r.headers["content-type"].startswith(PROBLEM)
        assert r.json()["request_id"] == "req-42"
        errors = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
        assert len(errors) == 1
        assert errors[0].request_id == "req-42"
        # a request id that is not sane is replaced by a generated one, on error answers too
        r = c.get("/test-only/boom", headers={"X-Request-ID": "bad id\twith spaces"})
        assert r.headers["x-request-id"] != "bad id\twith spaces" and len(r.headers["x-request-id"]) == 32
        assert r.json()["request_id"] == r.headers["x-request-id"]


# -- a private server: stopped, restarted ------------------------------------------------------------

@pytest.fixture(scope="module")
def private_pg():
    """An embedded server of this module's own (so stopping it disturbs no other test)."""
    from router.db import EmbeddedPostgres, migrate

    root = Path(tempfile.mkdtemp(prefix="sbpg-faults-"))
    server = EmbeddedPostgres(root / "pg")
    uri = server.start()
    migrate(uri)
    yield server, uri
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _gateway(private_pg, home: Path, minilm_path, minilm_encoder, acquire_timeout: float):
    from router.app.factory import create_app
    from router.app.composition import build_services
    from router.app.settings import Settings

    server, uri = private_pg
    if not server.status().running:
        server.start()
    s = Settings(home=home, database_url=uri, embedding_model=str(minilm_path), load_sample_kb=False,
                 log_json=False, db_acquire_timeout=acquire_timeout, db_pool_min=2, db_pool_max=4, db_retry_after=7,
                 web_hmac_secret=WEB_SECRET)
    svc = build_services(s, load_models=False)
    svc.encoder = minilm_encoder
    try:
        with TestClient(create_app(services=svc)) as c:
            authorize(c, svc.pool)
            yield c, svc, server
    finally:
        if not server.status().running:
            server.start()
        svc.close()


@pytest.fixture
def private_client(private_pg, tmp_path, minilm_path, minilm_encoder):
    with _gateway(private_pg, tmp_path / "home", minilm_path, minilm_encoder, acquire_timeout=0.5) as g:
        yield g


@pytest.fixture
def patient_client(private_pg, tmp_path, minilm_path, minilm_encoder):
    """A gateway whose acquire bound (10 s) comfortably holds a clean restart of the private server."""
    with _gateway(private_pg, tmp_path / "home", minilm_path, minilm_encoder, acquire_timeout=10.0) as g:
        yield g


def _unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


def test_database_down_answers_503_fast_with_retry_after_then_serves_again(private_client):
    client, svc, server = private_client
    conv = _unique("conv")
    assert client.post("/v1/messages", json=_msg(conversation_id=conv, message_id=_unique("m"))).status_code == 200
    server.stop()
    try:
        mid = _unique("m")
        t0 = time.monotonic()
        r = client.post("/v1/messages", json=_msg(conversation_id=conv, message_id=mid),
                        headers={"X-Request-ID": "outage-1"})
        waited = time.monotonic() - t0
        assert r.status_code == 503, r.text
        assert r.headers["content-type"].startswith(PROBLEM)
        assert int(r.headers["retry-after"]) == svc.settings.db_retry_after == 7    # the configured value, not a default
        assert r.headers["x-request-id"] == "outage-1" and r.json()["request_id"] == "outage-1"
        # the wait bound (0.5 s here) is honoured, generously: before it was the pool's 30 s
        assert waited < 15
        # the channel webhooks answer the same way
        raw = json.dumps(_msg(conversation_id=conv, message_id=_unique("w"))).encode()
        w = client.post("/v1/channels/web/webhook", content=raw,
                        headers={"Content-Type": "application/json", **signed_headers(WEB_SECRET, raw)})
        assert w.status_code == 503 and w.headers["retry-after"] == "7"
        # readiness: 503 at once, naming what failed and nothing of the exception
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.headers["retry-after"] == "7"
        body = ready.json()
        assert body["checks"]["database"] == {"ok": False, "detail": "unreachable"}
        text = ready.text
        assert "Error" not in text and "/" not in text.replace("about:blank", "")
    finally:
        server.start()
    # serving resumes: the same message id is accepted (bounded wait for the pool to reconnect)
    ok = _wait_for(lambda: client.post("/v1/messages", json=_msg(conversation_id=conv, message_id=mid))
                   .status_code == 200, timeout=20, step=0.1)
    assert ok
    assert _wait_for(lambda: client.get("/readyz").status_code == 200, timeout=10, step=0.2)


def test_a_clean_restart_costs_the_next_request_nothing(private_client):
    client, svc, server = private_client
    conv = _unique("conv")
    for _ in range(3):   # several pooled connections, all of which the restart closes
        assert client.post("/v1/messages", json=_msg(conversation_id=conv, message_id=_unique("m"))).status_code == 200
    server.stop()
    server.start()
    r = client.post("/v1/messages", json=_msg(conversation_id=conv, message_id=_unique("m")))
    assert r.status_code == 200, r.text


def test_requests_in_flight_and_arriving_during_a_clean_restart_all_succeed_once(patient_client, private_pg):
    """`db stop` + `db start` under requests: a turn and an integration-key check in flight (each held on a
    lock, so the stop ends their sessions mid-statement) and requests arriving while the server is down all
    wait for the server within the acquire bound and answer 200; every message is stored once."""
    client, svc, server = patient_client
    _, uri = private_pg
    conv = _unique("conv")
    assert client.post("/v1/messages", json=_msg(conversation_id=conv, message_id=_unique("m"))).status_code == 200
    sent: dict[str, dict] = {}
    threads = []

    def post(mid: str, conversation: str) -> None:
        out = sent[mid] = {}
        threads.append(_post_in_thread(client, _msg(conversation_id=conversation, message_id=mid), out))

    admin = psycopg.connect(uri, autocommit=True)
    locker = psycopg.connect(uri)
    try:
        waiting: set[int] = set()
        # a turn in flight: blocked on its conversation's row lock
        locker.execute("SELECT 1 FROM conversations WHERE external_id = %s FOR UPDATE", (conv,))
        post(_unique("in-turn"), conv)
        waiting.add(_wait_for(lambda: _lock_waiter(admin, waiting)))
        # an integration-key check in flight: blocked on the key table
        locker.execute("LOCK TABLE integration_keys IN ACCESS EXCLUSIVE MODE")
        post(_unique("in-key"), _unique("conv"))
        waiting.add(_wait_for(lambda: _lock_waiter(admin, waiting)))
        assert None not in waiting and len(waiting) == 2
    finally:
        with suppress(psycopg.Error):
            admin.close()
    server.stop()                     # what `switchboard db stop` runs: the two sessions end mid-statement
    try:
        with suppress(psycopg.Error):
            locker.close()
        for _ in range(3):            # arriving while the server is down
            post(_unique("while-down"), _unique("conv"))
        time.sleep(0.3)
        assert all("response" not in out for out in sent.values())
    finally:
        server.start()                # `switchboard db start`
    for t in threads:
        t.join(30)
    statuses = {mid: out["response"].status_code if "response" in out else None for mid, out in sent.items()}
    assert set(statuses.values()) == {200}, {mid: sent[mid]["response"].text for mid in sent
                                              if statuses[mid] != 200 and "response" in sent[mid]}
    with svc.pool.connection() as conn:
        rows = conn.execute(
            "SELECT m.external_id, count(DISTINCT m.id) AS messages, count(t.id) AS turns FROM messages m "
            "LEFT JOIN turns t ON t.message_id = m.id WHERE m.external_id = ANY(%s) GROUP BY m.external_id",
            (list(sent),)).fetchall()
    assert {r["external_id"]: (r["messages"], r["turns"]) for r in rows} == {mid: (1, 1) for mid in sent}


def test_a_clean_restart_is_recognised_and_the_pool_polls_for_the_server(private_client):
    client, svc, server = private_client
    pool = svc.pool
    conv = _unique("conv")
    assert client.post("/v1/messages", json=_msg(conversation_id=conv, message_id=_unique("m"))).status_code == 200
    seen = pool.restarts_seen
    normal = pool.reconnect_delay_cap()
    server.stop()
    try:
        # a request while it is down: 503 at once; the dead connections told the pool why they died
        r = client.post("/v1/messages", json=_msg(conversation_id=conv, message_id=_unique("m")))
        assert r.status_code == 503 and "retry-after" in r.headers
        assert pool.restarting() and pool.restarts_seen == seen + 1
        assert pool.reconnect_delay_cap() == pool.restart_poll < normal    # polls instead of backing off
    finally:
        server.start()
    assert _wait_for(lambda: client.post("/v1/messages", json=_msg(conversation_id=conv, message_id=_unique("m")))
                     .status_code == 200, timeout=20, step=0.05)


def test_restart_signs_are_told_apart_from_other_connection_failures(private_pg, tmp_path):
    from router.db.pool import restart_sign

    server, uri = private_pg
    if not server.status().running:
        server.start()
    with psycopg.connect(uri, autocommit=True) as admin, psycopg.connect(uri) as victim:
        pid = victim.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.OperationalError) as lost:
            victim.execute("SELECT 1")
    assert restart_sign(lost.value)                # admin_shutdown (57P01): ended on purpose
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(f"postgresql://postgres@/x?host={tmp_path}", connect_timeout=2)
    assert not restart_sign(refused.value)         # nobody listening: no sign of a restart
    assert not restart_sign(RuntimeError("the database is fine"))


def test_stop_checkpoints_while_still_serving(private_pg):
    server, uri = private_pg
    if not server.status().running:
        server.start()

    def requested() -> int:
        with psycopg.connect(uri) as conn:
            return conn.execute("SELECT num_requested FROM pg_stat_checkpointer").fetchone()[0]

    before = requested()
    with psycopg.connect(uri) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS scratch_dirty (n int)")
        conn.execute("INSERT INTO scratch_dirty SELECT generate_series(1, 5000)")
    assert server.checkpoint() is True
    assert requested() == before + 1
    server.stop()
    assert server.checkpoint() is False            # not running: nothing to flush, no error
    server.start()


def test_a_server_known_to_be_down_is_answered_sooner_than_the_full_wait(private_pg):
    from router.db import open_pool
    from router.db.errors import DatabaseUnavailable

    server, uri = private_pg
    if not server.status().running:
        server.start()
    pool = open_pool(uri, min_size=1, max_size=2, acquire_timeout=5.0, reconnect_max_delay=0.2)
    try:
        server.stop()
        with pytest.raises(DatabaseUnavailable):       # the first request waits the full bound
            with pool.connection():
                pass
        assert _wait_for(pool.known_down, timeout=10)
        t0 = time.monotonic()
        with pytest.raises(DatabaseUnavailable) as exc:
            with pool.connection():
                pass
        assert exc.value.cause == "pool_timeout"
        assert time.monotonic() - t0 < 4.0             # the short wait, not the 5 s bound
        server.start()
        assert _wait_for(lambda: not pool.known_down(), timeout=20)
        with pool.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone()["one"] == 1
    finally:
        if not server.status().running:
            server.start()
        pool.close()


@pytest.mark.parametrize("poll", ["poll", "select"])
def test_a_pooled_connection_whose_session_was_ended_is_never_handed_out(dsn, poll, monkeypatch):
    """The check at checkout reads the socket, not the server: a live idle connection has nothing waiting; one
    whose session the server ended has (its goodbye, the socket's end) and is discarded for a live one. Where
    the platform has no poll() (Windows), select() reads the same."""
    import select

    from router.db import open_pool
    from router.db.pool import _quiet

    if poll == "select":
        monkeypatch.delattr(select, "poll")

    pool = open_pool(dsn, min_size=1, max_size=1)
    try:
        with pool.connection() as conn:
            first = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
        with pool.connection() as conn:
            assert _quiet(conn)      # idle and alive: nothing to read
            assert conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"] == first
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (first,))
            assert _wait_for(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                                   (first,)).fetchone()[0] == 0, timeout=5)
        for _ in range(3):
            with pool.connection() as conn:
                pid = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
                assert pid != first
    finally:
        pool.close()
