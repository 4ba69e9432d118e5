"""A CEL expression that fails while a flow runs (an index past the end of a list, a missing key) ends the flow
truthfully through the HTTP API: 200, the customer told plainly, no success claimed, a person takes over."""

from __future__ import annotations

import itertools

import pytest

from routing_kit import api_client, flow_services, rows

pytestmark = pytest.mark.slow

_ids = itertools.count()
SAMPLES = "automation/workflows/samples/shop.yaml"


@pytest.fixture
def api(fresh_db, pg_server, template_dsn, e5_encoder, tmp_path):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / SAMPLES).read_text(encoding="utf-8")
    anchor = "      - id: found\n        check: info.found\n"
    assert anchor in text
    broken = text.replace(anchor, "      - {id: cut, set: {street: \"info.order.order_id.split(', ')[1]\"}}\n" + anchor, 1)
    path = tmp_path / "workflows.yaml"
    path.write_text(broken, encoding="utf-8")
    svc = flow_services(fresh_db, pg_server, template_dsn, e5_encoder, workflows_file=path)
    with api_client(svc) as client:
        yield client, svc
    svc.close()


def test_a_failing_expression_is_a_plain_handoff_not_a_500(api):
    client, svc = api
    r = client.post("/v1/messages", json={"channel": "web", "conversation_id": "conv-cel", "customer_id": "c1",
                                          "message_id": f"m-{next(_ids)}", "text": "where is my order 100234"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["flow"]["workflow"] == "order_status" and out["flow"]["status"] == "escalated"
    text = out["reply"]["text"]
    assert "went wrong" in text and "shipped" not in text and "SF1402837465299" not in text
    history = rows(svc.pool, "SELECT history FROM flow_instances")[0]["history"]
    assert any("index out of bounds" in (h.get("reason") or "") for h in history)
