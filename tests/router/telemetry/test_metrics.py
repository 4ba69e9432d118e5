"""/metrics after messages routed through the real app: every series the operators rely on moves."""

from __future__ import annotations

from datetime import timedelta

import pytest
from keys_testkit import authorize
from fastapi.testclient import TestClient
from ops_testkit import agent_token, msg, wire_gateway
from prometheus_client.parser import text_string_to_metric_families


def scrape(client) -> dict[tuple[str, tuple], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples, name: str, **labels) -> float:
    """Sum over the series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


@pytest.fixture
def gateway(services, tmp_path):
    wire_gateway(services, tmp_path)
    from router.app.factory import create_app

    with TestClient(create_app(services=services)) as client:
        authorize(client, services.pool, channels=("web", "telegram"))
        yield client, services


def test_series_move_with_routed_messages(gateway):
    client, services = gateway
    before = scrape(client)
    sent = [
        msg("m-c1", "1", "where is my order"),                      # rules -> L1
        msg("m-c2", "2", "你好，我想转人工"),                          # asks for a person -> L3
        msg("m-c3", "3", "blorp quux zzzz", customer="cust-3"),    # nobody knows -> embeddings
        msg("m-c4", "4", "where is my order", channel="telegram", customer="cust-4"),
    ]
    replies = [client.post("/v1/messages", json=m) for m in sent]
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
    client.post("/v1/messages", json=sent[0])          # a retried delivery counts as a duplicate, not a message
    after = scrape(client)

    def moved(name, **labels):
        return total(after, name, **labels) - total(before, name, **labels)

    assert moved("switchboard_messages_total", channel="web") == 3
    assert moved("switchboard_messages_total", channel="telegram") == 1
    assert moved("switchboard_duplicate_messages_total", channel="web") == 1
    # decisions by tier, intent and what decided
    assert moved("switchboard_decisions_total") == 4
    assert moved("switchboard_decisions_total", intent="order_query", decided_by="rules") == 2
    assert moved("switchboard_decisions_total", tier="L3") >= 1
    for r in replies:
        d = r.json()["decision"]
        assert total(after, "switchboard_decisions_total", tier=d["tier"] or "none", intent=d["intent"] or "none",
                     decided_by=d["channel"] or "none") >= 1
    # latency per stage
    for stage in ("harness", "rules", "embedding", "retrieval", "answer", "total"):
        assert moved("switchboard_stage_seconds_count", stage=stage) >= 1, stage
        assert moved("switchboard_stage_seconds_sum", stage=stage) > 0, stage
    assert moved("switchboard_stage_seconds_count", stage="total") == 4
    # escalations by rule, L1 resolution
    assert moved("switchboard_escalations_total", rule="human_request") == 1
    l1_answered = sum(1 for r in replies if r.json()["state"] == "l1_resolved")
    assert l1_answered >= 1, "where is my order: answered from the knowledge base"
    assert moved("switchboard_l1_auto_resolved_total") == l1_answered
    # tickets and queue depth (read from Postgres at scrape time)
    opened = sum(1 for r in replies if r.json()["ticket_id"])
    assert opened >= 1 and moved("switchboard_tickets_total", event="opened") == opened
    with services.pool.connection() as conn:
        queued = {(r["kind"], r["priority"]): r["n"] for r in conn.execute(
            "SELECT kind, priority, count(*) AS n FROM tickets WHERE status = 'queued' GROUP BY 1, 2")}
    for (kind, priority), n in queued.items():
        assert value(after, "switchboard_queue_depth", kind=kind, priority=priority) == n
    # the knowledge rebuild done at wiring: its duration and size
    assert value(after, "switchboard_rebuild_chunks") > 0 and value(after, "switchboard_rebuild_seconds") > 0

    # an agent claims and resolves the L3 ticket; another ticket misses its SLA
    token = agent_token(services, "ann", "agent")
    auth = {"Authorization": f"Bearer {token}"}
    l3 = next(r.json() for r in replies if r.json()["decision"]["tier"] == "L3")
    assert client.post(f"/v1/handoff/tickets/{l3['ticket_id']}/claim", headers=auth).status_code == 200
    mid = scrape(client)
    assert total(mid, "switchboard_queue_depth") == sum(queued.values()) - 1
    r = client.post(f"/v1/handoff/tickets/{l3['ticket_id']}/resolve", headers=auth, json={"outcome": "solved"})
    assert r.status_code == 200, r.text
    with services.pool.connection() as conn:
        conn.execute("UPDATE tickets SET sla_due_at = now() - %s WHERE status = 'queued'", (timedelta(minutes=1),))
    services.handoff.run_sweeps()
    end = scrape(client)
    assert total(end, "switchboard_tickets_total", event="claimed") - total(before, "switchboard_tickets_total",
                                                                             event="claimed") == 1
    assert total(end, "switchboard_tickets_total", event="resolved") - total(before, "switchboard_tickets_total",
                                                                              event="resolved") == 1
    assert total(end, "switchboard_sla_breaches_total") - total(before, "switchboard_sla_breaches_total") == \
        sum(queued.values()) - 1
    # HTTP requests by route template, not by raw path
    assert total(end, "switchboard_http_requests_total", route="/v1/messages", status="200") >= 5


def test_scrape_survives_a_database_outage(gateway, pg_server):
    import psycopg

    client, services = gateway
    assert client.get("/metrics").status_code == 200
    _, uri = pg_server
    dbname = psycopg.conninfo.conninfo_to_dict(services.dsn)["dbname"]
    with psycopg.connect(uri.replace("/switchboard?", "/postgres?"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{dbname}" WITH (FORCE)')
    r = client.get("/metrics")
    assert r.status_code == 200 and "switchboard_messages_total" in r.text
