"""Quotas per integration key and overall, and the cap on concurrent turns: 429 with Retry-After and nothing
stored for a refused message. Real HTTP app, real Postgres, real integration keys."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import yaml
from fastapi.testclient import TestClient

from keys_testkit import issue_integration_key
from router.app.factory import create_app
from router.turn.escalation import SAMPLE_POLICY

PROBLEM = "application/problem+json"


def _app(services, tmp_path, **quota):
    policy = yaml.safe_load(SAMPLE_POLICY.read_text(encoding="utf-8"))
    policy["harness"]["quota"].update(quota)
    path = tmp_path / f"policy-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(policy, allow_unicode=True), encoding="utf-8")
    services.settings = services.settings.model_copy(update={"policy_file": path})
    services.pipeline = None         # the factory wires the pipeline and its admission from the policy
    return TestClient(create_app(services=services))


def send(client, key: str, *, customer: str, conversation: str | None = None, message_id: str | None = None):
    body = {"channel": "web", "conversation_id": conversation or f"conv-{customer}", "customer_id": customer,
            "message_id": message_id or f"m-{uuid.uuid4().hex[:8]}", "text": "hello"}
    return client.post("/v1/messages", json=body, headers={"Authorization": f"Bearer {key}"})


def stored(pool) -> tuple[int, int, int]:
    with pool.connection() as conn:
        row = conn.execute("SELECT (SELECT count(*) FROM conversations) AS c, (SELECT count(*) FROM messages) AS m, "
                           "(SELECT count(*) FROM turns) AS t").fetchone()
    return row["c"], row["m"], row["t"]


def refused(r, max_wait: int) -> int:
    assert r.status_code == 429, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    wait = int(r.headers["retry-after"])
    assert 1 <= wait <= max_wait and r.json()["retry_after"] == wait
    assert "Nothing was stored" in r.json()["detail"]
    return wait


def test_a_key_over_its_quota_is_429_with_nothing_stored_and_other_keys_go_on(services, tmp_path):
    with _app(services, tmp_path, per_key={"max_messages": 3, "window_seconds": 60}) as client:
        a, b = issue_integration_key(services.pool, ["web"]), issue_integration_key(services.pool, ["web"])
        first = send(client, a, customer="a0", message_id="a-0")
        assert first.status_code == 200
        for i in (1, 2):                                   # across customers: the quota is the key's
            assert send(client, a, customer=f"a{i}").status_code == 200
        before = stored(services.pool)
        refused(send(client, a, customer="a9"), 60)
        refused(send(client, a, customer="a0"), 60)         # an existing conversation too
        assert stored(services.pool) == before              # nothing of either: no conversation, message or turn
        assert send(client, b, customer="b0").status_code == 200        # another key is unaffected
        replay = send(client, a, customer="a0", message_id="a-0")        # a retry of a stored message is not counted
        assert replay.status_code == 200 and replay.headers["idempotent-replayed"] == "true"
        assert replay.json()["turn_id"] == first.json()["turn_id"]


def test_the_overall_quota_covers_every_key_and_channel(services, tmp_path, settings):
    with _app(services, tmp_path, total={"max_messages": 2, "window_seconds": 30}) as client:
        a, b = issue_integration_key(services.pool, ["web"]), issue_integration_key(services.pool, ["web"])
        assert send(client, a, customer="x").status_code == 200
        assert send(client, b, customer="y").status_code == 200
        before = stored(services.pool)
        refused(send(client, b, customer="z"), 30)
        assert stored(services.pool) == before
        with services.pool.connection() as conn:             # the next window
            conn.execute("UPDATE admission_counters SET window_start = window_start - interval '30 seconds'")
        assert send(client, b, customer="z").status_code == 200


def test_a_customer_over_the_concurrency_cap_is_429_and_others_are_served(services, tmp_path):
    cap = {"per_customer": 1, "per_key": 10, "per_channel": 10, "wait_seconds": 0.3}
    with _app(services, tmp_path, concurrent_turns=cap) as client:
        key = issue_integration_key(services.pool, ["web"])
        assert send(client, key, customer="slow", conversation="held").status_code == 200
        results: dict[str, object] = {}
        with services.pool.connection() as conn, conn.transaction():
            # a turn of "slow" waits for its conversation's lock, as behind a slow turn
            conn.execute("SELECT 1 FROM conversations WHERE external_id = 'held' FOR UPDATE")
            t = threading.Thread(target=lambda: results.setdefault(
                "first", send(client, key, customer="slow", conversation="held")))
            t.start()
            time.sleep(0.5)
            before = stored(services.pool)
            r = send(client, key, customer="slow", conversation="other")
            assert refused(r, 1) == 1
            assert stored(services.pool) == before
            assert send(client, key, customer="someone-else").status_code == 200
        t.join(10)
        assert results["first"].status_code == 200
        assert send(client, key, customer="slow", conversation="other").status_code == 200   # the slot is free again


@pytest.mark.parametrize("bad", [{"per_key": {"max_messages": 0}}, {"concurrent_turns": {"per_customer": 0}},
                                 {"total": {"max_messages": 5, "what": 1}}])
def test_a_bad_quota_in_the_policy_is_refused_at_load(tmp_path, bad):
    from router.turn.escalation import load_policy

    policy = yaml.safe_load(SAMPLE_POLICY.read_text(encoding="utf-8"))
    policy["harness"]["quota"].update(bad)
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy, allow_unicode=True), encoding="utf-8")
    with pytest.raises(Exception):
        load_policy(path)
