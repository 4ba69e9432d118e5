"""The gateway lends its encoder to the workflows: an order is chosen by meaning across languages ("the pan
please" for 不粘锅 28cm), and an answer that names no order picks none.

Real parts: the HTTP app, the embedded Postgres, the bundled workflows with the tool gateway over MCP stdio to
the example shop, multilingual-e5-small."""

from __future__ import annotations

import itertools

import psycopg
import pytest
from fastapi.testclient import TestClient

from keys_testkit import authorize
from routing_kit import kb_template, routing_services

_ids = itertools.count()


@pytest.fixture
def api(fresh_db, pg_server, template_dsn, e5_encoder):
    from router.app.factory import create_app

    _, uri = pg_server
    template_name = psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"]
    name, home, kb_dir = kb_template(uri, template_name, e5_encoder)
    svc = routing_services(fresh_db(name), home, e5_encoder, kb_dir, flows=True)
    c = TestClient(create_app(services=svc))
    c.__enter__()
    authorize(c, svc.pool)
    try:
        yield c, svc
    finally:
        c.__exit__(None, None, None)
        svc.close()


def say(client, text: str, conversation: str) -> str:
    r = client.post("/v1/messages", json={"channel": "web", "conversation_id": conversation, "customer_id": "c5",
                                          "message_id": f"meaning-{next(_ids)}", "text": text})
    assert r.status_code == 200, r.text
    return r.json()["reply"]["text"]


@pytest.mark.slow
def test_the_gateway_picks_the_pan_order_by_meaning_and_nothing_for_a_sister(api):
    from automation.workflows.meaning import EncoderSimilarity

    client, svc = api
    assert isinstance(svc.flows.similarity, EncoderSimilarity) and svc.flows.similarity.encoder is svc.encoder
    listed = say(client, "I want a refund", "meaning-1")
    assert "100270" in listed and "100271" in listed, listed
    asked = say(client, "my sister bought it", "meaning-1")
    assert "Which order should be refunded?" in asked and "How much" not in asked, asked
    amount = say(client, "the pan please", "meaning-1")
    assert "How much should be refunded" in amount and "100270" in amount, amount
