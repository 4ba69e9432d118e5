"""The HTTP foundation through FastAPI's TestClient on a real Postgres."""

from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest

PROBLEM = "application/problem+json"


def _msg(**over):
    body = {"channel": "web", "conversation_id": "c-1", "customer_id": "u-1", "message_id": "m-1",
            "text": "where is my order?"}
    body.update(over)
    return body


def test_healthz_and_request_id(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert len(r.headers["x-request-id"]) == 32
    r = client.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"


def test_readyz_ok(client):
    r = client.get("/readyz")
    assert r.status_code == 200, r.text
    checks = r.json()["checks"]
    assert checks["database"]["ok"] and checks["migrations"]["detail"] == "current"
    assert checks["encoder"]["ok"]


def _sessions_opened(dsn: str) -> int:
    """Connections ever established to this database (the server's own count, whoever opened them)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]


def test_readyz_polled_every_few_milliseconds_opens_no_connection(client, services):
    """Each poll once opened a fresh connection; now the verdict borrows a pooled one at most once a second."""
    client.get("/readyz")
    before = _sessions_opened(services.dsn)
    polls, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < 2.5:
        assert client.get("/readyz").status_code == 200
        polls += 1
    opened = _sessions_opened(services.dsn) - before
    assert polls >= 20 and opened <= 3, (polls, opened)   # the counting connections themselves, at most


def test_readyz_503_when_database_is_gone(client, services, pg_server):
    _, uri = pg_server
    dbname = psycopg.conninfo.conninfo_to_dict(services.dsn)["dbname"]
    admin = uri.replace("/switchboard?", "/postgres?")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{dbname}" WITH (FORCE)')
    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.headers["content-type"].startswith(PROBLEM)
    body = r.json()
    assert body["checks"]["database"]["ok"] is False
    assert "database" in body["detail"]


def test_openapi_and_metrics(client):
    spec = client.get("/openapi.json").json()
    assert "/v1/messages" in spec["paths"]
    client.post("/v1/messages", json=_msg())
    text = client.get("/metrics").text
    assert 'switchboard_messages_total{channel="web"} 1.0' in text


def test_message_is_stored_and_retry_is_idempotent(client, services):
    r1 = client.post("/v1/messages", json=_msg())
    assert r1.status_code == 200, r1.text
    body = r1.json()
    assert {"conversation_id", "turn_id", "state", "decision", "reply", "ticket_id"} <= body.keys()
    r2 = client.post("/v1/messages", json=_msg())
    assert r2.status_code == 200
    assert r2.json() == body
    assert r2.headers.get("idempotent-replayed") == "true"
    with services.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM messages").fetchone()["n"] == 1
        assert conn.execute("SELECT count(*) AS n FROM turns").fetchone()["n"] == 1
    # a new message id is a new message in the same conversation
    r3 = client.post("/v1/messages", json=_msg(message_id="m-2", text="thanks"))
    assert r3.json()["conversation_id"] == body["conversation_id"]
    assert r3.json()["turn_id"] != body["turn_id"]


def test_concurrent_duplicate_deliveries_store_one_message(client, services):
    results = []

    def send():
        results.append(client.post("/v1/messages", json=_msg(message_id="dup-1")))

    threads = [threading.Thread(target=send) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.status_code == 200 for r in results)
    assert len({json.dumps(r.json(), sort_keys=True) for r in results}) == 1
    with services.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM messages").fetchone()["n"] == 1


@pytest.mark.parametrize(
    "body",
    [
        {"channel": "web"},
        _msg(text=""),
        _msg(channel="Bad Channel!"),
        _msg(sent_at="yesterday"),
        _msg(unknown_field=1),
    ],
)
def test_malformed_is_422_problem(client, body, services):
    r = client.post("/v1/messages", json=body)
    assert r.status_code == 422
    assert r.headers["content-type"].startswith(PROBLEM)
    p = r.json()
    assert p["status"] == 422 and p["title"] and p["errors"]
    with services.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM messages").fetchone()["n"] == 0


def test_not_json_is_422(client):
    r = client.post("/v1/messages", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM)


def test_body_over_limit_is_413(client, services):
    limit = services.settings.max_body_bytes
    r = client.post("/v1/messages", json=_msg(text="x" * (limit + 10)))
    assert r.status_code == 413
    assert r.headers["content-type"].startswith(PROBLEM)
    assert r.json()["status"] == 413 and "x-request-id" in r.headers

    def gen():  # chunked upload with no Content-Length
        yield b'{"text": "'
        for _ in range(limit // 1000 + 2):
            yield b"y" * 1000
        yield b'"}'

    r = client.post("/v1/messages", content=gen(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    with services.pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM messages").fetchone()["n"] == 0


def test_text_over_limit_is_413(client, services):
    n = services.settings.max_text_chars + 1
    r = client.post("/v1/messages", json=_msg(text="字" * n))
    assert r.status_code == 413 and r.headers["content-type"].startswith(PROBLEM)


def test_unknown_route_is_404_problem(client):
    r = client.get("/v1/nope")
    assert r.status_code == 404 and r.headers["content-type"].startswith(PROBLEM)


def test_hostile_text_is_cleaned_not_a_500(client, services):
    """NUL characters and lone surrogates (valid JSON, not storable in Postgres) are removed."""
    raw = b'{"channel":"web","conversation_id":"c-9","customer_id":"u-9","message_id":"m-nul",' \
          b'"text":"hello\\u0000 world \\ud800"}'
    r = client.post("/v1/messages", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    with services.pool.connection() as conn:
        text = conn.execute("SELECT text FROM messages WHERE external_id = 'm-nul'").fetchone()["text"]
    assert "\x00" not in text and text.startswith("hello world")
    r = client.post("/v1/messages", content=raw.replace(b"hello\\u0000 world \\ud800", b"\\u0000").replace(b"m-nul", b"m-nul2"),
                    headers={"content-type": "application/json"})
    assert r.status_code == 422
