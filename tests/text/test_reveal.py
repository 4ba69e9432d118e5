"""Revealing one masked value of a ticket on a live gateway (the router's real conversation port): the agent
view is masked, a permitted agent gets exactly one value in clear for a reason, and the reveal is on the record
(ticket event + admin audit log + audit log line) without the value itself."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "router"))

from keys_testkit import authorize  # noqa: E402

from ops_testkit import agent_token, msg, wire_gateway  # noqa: E402

PHONE, CARD, ORDER = "138 1234 5678", "6222 0212 3456 7890 123", "20241130"
TEXT = f"order {ORDER} never arrived, call me on {PHONE}, refund to bank card {CARD}: i want a human"
PROBLEM = "application/problem+json"


@pytest.fixture
def gateway(services, tmp_path):
    wire_gateway(services, tmp_path)
    from router.app.factory import create_app

    with TestClient(create_app(services=services)) as client:
        authorize(client, services.pool)
        yield client, services


def _h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _problem(r, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    return r.json()


def _ticket(client) -> tuple[str, str]:
    r = client.post("/v1/messages", json=msg("conv-reveal", "m-1", TEXT))
    assert r.status_code == 200, r.text
    assert r.json()["ticket_id"], r.json()
    return r.json()["ticket_id"], r.json()["conversation_id"]


def _refs(ticket: dict) -> dict[str, dict]:
    out = {}
    for m in ticket["context"]["transcript"]:
        for p in m.get("personal") or ():
            out[p["label"]] = p
    return out


def test_a_permitted_agent_reveals_one_value_for_a_reason_on_the_record(gateway, caplog):
    client, services = gateway
    from handoff import agents

    ticket_id, cid = _ticket(client)
    ann = agent_token(services, "ann", "agent")
    ticket = client.get(f"/v1/handoff/tickets/{ticket_id}", headers=_h(ann)).json()
    package = json.dumps(ticket["context"], ensure_ascii=False)
    assert PHONE not in package and CARD not in package and "13812345678" not in package
    refs = _refs(ticket)
    assert set(refs) == {"phone", "card"}, refs              # the order number is no personal value
    assert refs["phone"]["shown"] == "138****5678" and refs["card"]["shown"] == "[card ending 0123]"
    url = f"/v1/handoff/tickets/{ticket_id}/reveal"
    body = {"ref": refs["phone"]["ref"], "reason": "customer asked for a call back"}

    # no permission: 403, and nothing recorded
    assert client.post(f"/v1/handoff/tickets/{ticket_id}/claim", headers=_h(ann)).status_code == 200
    _problem(client.post(url, json=body, headers=_h(ann)), 403)
    _problem(client.post(url, json=body), 401)
    # granted: the one value, exactly as typed
    with services.pool.connection() as conn:
        agents.set_can_reveal(conn, "ann", True, actor="test")
    with caplog.at_level(logging.INFO, logger="switchboard.audit"):
        r = client.post(url, json=body, headers=_h(ann))
        card = client.post(url, json={"ref": refs["card"]["ref"], "reason": "refund needs the card"},
                           headers=_h(ann))
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    out = r.json()
    assert out["value"] == PHONE and out["label"] == "phone" and out["ref"] == body["ref"]
    assert card.status_code == 200 and card.json()["value"] == CARD

    # on the record: the ticket's events and the admin audit log name who, which ref and why; never the value
    events = client.get(f"/v1/handoff/tickets/{ticket_id}/events", headers=_h(ann)).json()["items"]
    revealed = [e for e in events if e["action"] == "pii_revealed"]
    assert [e["payload"]["ref"] for e in revealed] == [refs["phone"]["ref"], refs["card"]["ref"]]
    assert revealed[0]["agent"] == "ann" and revealed[0]["payload"]["reason"] == body["reason"]
    assert revealed[0]["id"] == out["event_id"]
    with services.pool.connection() as conn:
        audit = conn.execute("SELECT actor, payload FROM handoff_admin_events WHERE action = 'pii_revealed' "
                             "ORDER BY id").fetchall()
        stored = [r["payload"] for r in conn.execute(
            "SELECT payload FROM ticket_events WHERE ticket_id = %s", (ticket_id,)).fetchall()]
    assert [a["payload"]["ref"] for a in audit] == [refs["phone"]["ref"], refs["card"]["ref"]]
    assert audit[0]["actor"] == "agent:ann" and audit[0]["payload"]["ticket_id"] == ticket_id
    lines = [r.getMessage() for r in caplog.records if r.name == "switchboard.audit"]
    assert len(lines) == 2 and refs["phone"]["ref"] in lines[0] and "agent=ann" in lines[0]
    for blob in (events, stored, [a["payload"] for a in audit], lines):
        text = json.dumps(blob, ensure_ascii=False)
        assert PHONE not in text and CARD not in text and "13812345678" not in text.replace(" ", "")

    # a supervisor may reveal without holding the ticket; an agent of another team may not see it at all
    sue = agent_token(services, "sue", "supervisor")
    assert client.post(url, json=body, headers=_h(sue)).json()["value"] == PHONE
    with services.pool.connection() as conn:
        agents.add_agent(conn, "bob", teams=("billing",), can_reveal=True)
        bob, _ = agents.issue_token(conn, "bob")
    _problem(client.post(url, json=body, headers=_h(bob)), 403)


def test_bad_and_unknown_references_and_erased_originals(gateway):
    client, services = gateway
    ticket_id, cid = _ticket(client)
    sue = agent_token(services, "sue", "supervisor")
    ref = _refs(client.get(f"/v1/handoff/tickets/{ticket_id}", headers=_h(sue)).json())["phone"]["ref"]
    url = f"/v1/handoff/tickets/{ticket_id}/reveal"
    mid, span = ref[1:].split(":")
    start, end = (int(x) for x in span.split("-"))
    # 422: malformed ref, reason missing or too short, unknown fields
    for bad in ({"ref": "phone", "reason": "call back please"}, {"ref": ref}, {"ref": ref, "reason": "ok"},
                {"ref": ref, "reason": "call back please", "value": 1}, {"ref": f"m{mid}:9-3x", "reason": "call back"}):
        _problem(client.post(url, json=bad, headers=_h(sue)), 422)
    _problem(client.post("/v1/handoff/tickets/not-a-uuid/reveal", json={"ref": ref, "reason": "call back"},
                         headers=_h(sue)), 422)
    # 404: a span the ticket does not show (the order number, a shifted span, another message), an unknown ticket
    order_at = TEXT.index(ORDER)
    for unknown in (f"m{mid}:{order_at}-{order_at + len(ORDER)}", f"m{mid}:{start}-{end + 1}",
                    f"m{int(mid) + 1}:{start}-{end}", f"m{mid}:{end}-{start}"):
        _problem(client.post(url, json={"ref": unknown, "reason": "call back please"}, headers=_h(sue)), 404)
    _problem(client.post("/v1/handoff/tickets/00000000-0000-0000-0000-000000000000/reveal",
                         json={"ref": ref, "reason": "call back please"}, headers=_h(sue)), 404)
    with services.pool.connection() as conn:
        n = conn.execute("SELECT count(*) AS n FROM ticket_events WHERE action = 'pii_revealed'").fetchone()["n"]
    assert n == 0
    # the message text was erased by retention: the ticket still shows the reference, the original is gone
    from router.ops import privacy

    with services.pool.connection() as conn:
        conn.execute("UPDATE messages SET received_at = now() - interval '400 days' WHERE id = %s", (int(mid),))
        privacy.expire(conn, 180)
    body = _problem(client.post(url, json={"ref": ref, "reason": "call back please"}, headers=_h(sue)), 404)
    assert "gone" in body["detail"]


def test_a_message_to_a_held_ticket_carries_references_too(gateway):
    client, services = gateway
    ticket_id, cid = _ticket(client)
    sue = agent_token(services, "sue", "supervisor")
    assert client.post(f"/v1/handoff/tickets/{ticket_id}/claim", headers=_h(sue)).status_code == 200
    r = client.post("/v1/messages", json=msg("conv-reveal", "m-2", "my other number is 139 8765 4321"))
    assert r.status_code == 200, r.text
    events = client.get(f"/v1/handoff/tickets/{ticket_id}/events", headers=_h(sue)).json()["items"]
    added = [e for e in events if e["action"] == "customer_message"]
    assert added, [e["action"] for e in events]
    p = added[-1]["payload"]
    assert "139 8765 4321" not in p["text"] and "139****4321" in p["text"]
    [ref] = p["personal"]
    assert ref["label"] == "phone" and ref["shown"] == "139****4321"
    r = client.post(f"/v1/handoff/tickets/{ticket_id}/reveal", json={"ref": ref["ref"], "reason": "second number"},
                    headers=_h(sue))
    assert r.status_code == 200 and r.json()["value"] == "139 8765 4321"
