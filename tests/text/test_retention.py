"""Retention and erasure on a live gateway and the real database: `switchboard retention run` blanks old
texts and keeps the rows the reports count; `switchboard customers forget ID` erases one customer in
every table and says what it touched; the audit trail stays append-only for everything else."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "router"))

from keys_testkit import authorize  # noqa: E402

from ops_testkit import agent_token, msg, wire_gateway  # noqa: E402

PHONE = "13812345678"


@pytest.fixture
def gateway(services, tmp_path, dsn, monkeypatch):
    wire_gateway(services, tmp_path)
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    from router.app.factory import create_app

    with TestClient(create_app(services=services)) as client:
        authorize(client, services.pool)
        yield client, services


def _cli(*args):
    from router.cli import app as cli

    r = CliRunner().invoke(cli, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _talk(client, customer: str, conv: str) -> dict:
    for i, text in enumerate([f"my phone is {PHONE}, i want a refund", "转人工"]):
        r = client.post("/v1/messages", json=msg(conv, f"{conv}-m{i}", text, customer=customer))
        assert r.status_code == 200, r.text
    return r.json()


def test_retention_blanks_old_texts_and_keeps_the_counts(gateway):
    client, services = gateway
    old = _talk(client, "cust-old", "conv-old")
    _talk(client, "cust-new", "conv-new")
    with services.pool.connection() as conn:
        conn.execute("UPDATE messages SET received_at = now() - interval '200 days' WHERE conversation_id = %s",
                     (old["conversation_id"],))
        conn.execute("UPDATE outbox SET created_at = now() - interval '200 days', status = 'delivered' "
                     "WHERE conversation_id = %s", (old["conversation_id"],))
        before = conn.execute("SELECT count(*) AS n FROM messages").fetchone()["n"]
    out = _cli("retention", "run", "--days", "180")
    assert out["days"] == 180 and out["touched"]["messages.text"] >= 2 and out["touched"]["outbox.payload"] >= 1
    with services.pool.connection() as conn:
        rows = conn.execute("SELECT conversation_id, text, metadata FROM messages").fetchall()
        turns = conn.execute("SELECT count(*) AS n FROM turns").fetchone()["n"]
        payloads = conn.execute("SELECT payload FROM outbox WHERE conversation_id = %s",
                                (old["conversation_id"],)).fetchall()
    assert len(rows) == before and turns == 4            # the rows stay: reports still count them
    old_texts = [r["text"] for r in rows if str(r["conversation_id"]) == old["conversation_id"]]
    new_texts = [r["text"] for r in rows if str(r["conversation_id"]) != old["conversation_id"]]
    assert old_texts and all(t == "" for t in old_texts)
    assert any(PHONE in t for t in new_texts)             # inside the period: untouched
    assert all(p["payload"]["text"] == "" and p["payload"]["erased"] for p in payloads)
    assert _cli("retention", "run")["touched"]["messages.text"] == 0    # a second run has nothing left to do


def test_forget_erases_one_customer_everywhere_and_reports_it(gateway):
    client, services = gateway
    turn = _talk(client, "cust-forget", "conv-forget")
    _talk(client, "cust-keep", "conv-keep")
    agent = agent_token(services, "ann", "agent")
    auth = {"Authorization": f"Bearer {agent}"}
    ticket_id = turn["ticket_id"]
    assert client.post(f"/v1/handoff/tickets/{ticket_id}/claim", headers=auth).status_code == 200
    assert client.post(f"/v1/handoff/tickets/{ticket_id}/messages", headers=auth,
                       json={"text": "we will call you"}).status_code in (200, 201)

    out = _cli("customers", "forget", "cust-forget")
    assert out["conversations"] == 1 and out["alias"].startswith("forgotten:")
    touched = out["touched"]
    assert touched["messages"] >= 3 and touched["turns"] == 2 and touched["conversations"] == 1
    assert touched["tickets"] == 1 and touched["ticket_events"] >= 2 and touched["outbox"] >= 1

    cid = turn["conversation_id"]
    with services.pool.connection() as conn:
        blob = json.dumps([
            conn.execute("SELECT * FROM conversations WHERE id = %s", (cid,)).fetchall(),
            conn.execute("SELECT text, metadata FROM messages WHERE conversation_id = %s", (cid,)).fetchall(),
            conn.execute("SELECT response, trace FROM turns WHERE conversation_id = %s", (cid,)).fetchall(),
            conn.execute("SELECT payload, last_error FROM outbox WHERE conversation_id = %s", (cid,)).fetchall(),
            conn.execute("SELECT * FROM tickets WHERE id = %s", (ticket_id,)).fetchall(),
            conn.execute("SELECT payload FROM ticket_events WHERE ticket_id = %s", (ticket_id,)).fetchall(),
            conn.execute("SELECT * FROM customer_flags").fetchall(),
        ], default=str, ensure_ascii=False)
        kept = conn.execute("SELECT count(*) AS n FROM messages m JOIN conversations c ON c.id = m.conversation_id "
                            "WHERE c.customer_id = 'cust-keep' AND m.text <> ''").fetchone()["n"]
        # the audit trail stays append-only outside an erasure
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE ticket_events SET payload = '{}'::jsonb WHERE ticket_id = %s", (ticket_id,))
    for gone in ("cust-forget", "conv-forget", PHONE, "138****5678", "we will call you", "i want a refund"):
        assert gone not in blob, gone
    assert kept >= 2                                       # the other customer is untouched
    assert _cli("customers", "forget", "nobody")["conversations"] == 0
