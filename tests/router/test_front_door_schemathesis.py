"""schemathesis against the app's own /openapi.json (every operation but the endless SSE streams), with
a valid integration key, an admin agent token and real ticket and conversation ids: no server error,
and no operation that rejects (400/422) all of the data its own schema calls valid."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
import schemathesis
from keys_testkit import issue_integration_key
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from ops_testkit import agent_token, wire_gateway
from schemathesis import GenerationMode

from router.app.factory import create_app
from router.app.keys import CHANNELS

pytestmark = pytest.mark.slow
EXAMPLES = 12          # per operation and mode: ~1 min on 2 cores


def test_schemathesis_finds_no_server_error_and_no_validation_mismatch(services, tmp_path):
    wire_gateway(services, tmp_path)
    app = create_app(services=services)
    with TestClient(app) as client:              # runs the lifespan: the app's services are in place
        key = issue_integration_key(services.pool, list(CHANNELS))
        admin = agent_token(services, "fuzz-admin", "admin")
        first = client.post("/v1/messages", headers={"Authorization": f"Bearer {key}"}, json={
            "channel": "web", "conversation_id": "fuzz-c", "customer_id": "fuzz-u", "message_id": "fuzz-m",
            "text": "转人工"}).json()
        assert first["ticket_id"], first
        known = {"ticket_id": first["ticket_id"], "conversation_id": first["conversation_id"]}

        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        errors: list[str] = []
        positive: dict[str, Counter] = defaultdict(Counter)

        def headers_for(path: str) -> dict[str, str]:
            if path == "/v1/messages" or path.endswith("/feedback"):
                return {"Authorization": f"Bearer {key}"}
            return {"Authorization": f"Bearer {admin}"}

        def fuzz(op, mode, path_parameters):
            @given(case=op.as_strategy(generation_mode=mode, path_parameters=path_parameters or None))
            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            def run(case):
                response = case.call(headers=headers_for(op.path))
                if response.status_code >= 500:
                    errors.append(f"{op.method.upper()} {op.path} -> {response.status_code}: {response.text[:300]}")
                if mode is GenerationMode.POSITIVE:
                    positive[op.label][response.status_code] += 1

            try:
                run()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, op.label   # nothing in it can be made invalid

        for result in schema.get_all_operations():
            op = result.ok()
            if op.path.endswith("/events"):
                continue          # server-sent event streams never end; covered by the handoff tests
            fixed = {k: v for k, v in known.items() if "{" + k + "}" in op.path}
            variants = [({}, GenerationMode.POSITIVE), ({}, GenerationMode.NEGATIVE)]
            if fixed:
                variants.append((fixed, GenerationMode.POSITIVE))

            for path_parameters, mode in variants:
                fuzz(op, mode, path_parameters)

    assert errors == [], "\n".join(errors[:20])
    # schemathesis' "schema validation mismatch": every valid-by-schema case refused, and 400/422 among them
    mismatched = {}
    for label, codes in positive.items():
        total = sum(codes.values())
        if all(400 <= c < 500 for c in codes):
            other_4xx = sum(n for c, n in codes.items() if c not in (401, 403, 404, 409, 429))
            if total and other_4xx / total >= 0.1:
                mismatched[label] = dict(codes)
    assert mismatched == {}, mismatched
    assert len(positive) >= 20
