"""The whole corpus (tests/text/corpus.jsonl) through a live gateway, checked where the text lands rather than
on the function: the stored trace of each turn, the trace replay, the handoff context package and ticket events
(agent view) of the conversations that reached a person. Recall on personal data >= 99 %, no business value
masked in the trace's inbound text."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "router"))

from keys_testkit import authorize  # noqa: E402

from ops_testkit import agent_token, msg, wire_gateway  # noqa: E402

CORPUS = [json.loads(line) for line in (Path(__file__).parent / "corpus.jsonl").read_text("utf-8").splitlines()]
PER_CONVERSATION = 8     # a few messages per conversation: some escalate, and later ones land on the ticket


@pytest.fixture
def gateway(services, tmp_path):
    wire_gateway(services, tmp_path)
    from router.app.factory import create_app

    with TestClient(create_app(services=services)) as client:
        authorize(client, services.pool)
        yield client, services


def _leaks(blob, values) -> list[str]:
    text = json.dumps(blob, ensure_ascii=False, default=str)
    return [v for v in values if v in text]


def test_the_corpus_at_every_sink_of_a_live_gateway(gateway):
    client, services = gateway
    conversations: dict[str, list[dict]] = {}
    for i, row in enumerate(CORPUS):
        conv = f"corpus-{i // PER_CONVERSATION}"
        r = client.post("/v1/messages", json=msg(conv, f"m-{i}", row["text"], customer=f"cust-{conv}"))
        assert r.status_code == 200, (row["text"], r.text)
        conversations.setdefault(r.json()["conversation_id"], []).append(row)

    personal_total = business_total = 0
    missed, destroyed = [], []
    sup = agent_token(services, "sup", "supervisor")
    auth = {"Authorization": f"Bearer {sup}"}
    tickets = 0
    with services.pool.connection() as conn:
        for cid, rows in conversations.items():
            traces = [t["trace"] for t in conn.execute(
                "SELECT t.trace FROM turns t JOIN messages m ON m.id = t.message_id "
                "WHERE t.conversation_id = %s ORDER BY m.id", (cid,)).fetchall()]
            assert len(traces) == len(rows), cid
            replay = client.get(f"/v1/conversations/{cid}/trace", headers=auth)
            assert replay.status_code == 200, replay.text
            replayed = replay.json()["turns"]
            for row, trace, turn in zip(rows, traces, replayed, strict=True):
                values = [v for _, v in row["personal"]]
                personal_total += len(values)
                leaked = set(_leaks(trace, values)) | set(_leaks(turn, values))
                missed += [(row["text"], v) for v in leaked]
                inbound = turn["inbound"]["text"]
                for value in row["business"]:
                    business_total += 1
                    if value not in inbound:
                        destroyed.append((row["text"], value, inbound))
            all_values = [v for row in rows for _, v in row["personal"]]
            for t in conn.execute("SELECT id FROM tickets WHERE conversation_id = %s", (cid,)).fetchall():
                tickets += 1
                ticket = client.get(f"/v1/handoff/tickets/{t['id']}", headers=auth).json()
                events = client.get(f"/v1/handoff/tickets/{t['id']}/events", headers=auth).json()
                missed += [("ticket " + str(t["id"]), v) for v in _leaks([ticket, events], all_values)]
    print(f"corpus at the sinks: {len(CORPUS)} messages, {personal_total} personal values, {len(missed)} in clear; "
          f"{business_total} business values, {len(destroyed)} masked; {tickets} tickets")
    assert personal_total >= 250 and business_total >= 150
    assert tickets >= 1
    assert len(missed) / personal_total <= 0.01, missed
    assert destroyed == [], destroyed
