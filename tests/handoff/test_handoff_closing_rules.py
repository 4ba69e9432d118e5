"""What may close or move a ticket, through the real gateway app on this test's database: an approval ticket
closes only by approve/reject at its level or by cancel; transfers go only to teams someone works in; a token's
lifetime must be positive (API of the store and the CLI)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from typer.testing import CliRunner

from handoff.errors import Invalid
from handoff_testkit import bearer, conversation_state, events_of, port_calls

PROBLEM = "application/problem+json"


def _problem(r, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    return r.json()


def _ticket(pool, ticket_id) -> dict:
    with pool.connection() as conn:
        return conn.execute("SELECT * FROM tickets WHERE id = %s", (ticket_id,)).fetchone()


def _approval(open_ticket, conversation, amount=300):
    """An approval ticket as the workflow side opens one (a refund waiting for a supervisor)."""
    conv = conversation(state="idle")
    draft = {"text": None, "instance_id": "00000000-0000-0000-0000-000000000001",
             "action": {"tool": "request_refund", "arguments": {"order_id": "100234", "amount": amount}},
             "proposed_action": f"request_refund {amount} CNY (order 100234)"}
    t = open_ticket(conversation_id=conv, kind="approval", draft=draft, amount=amount, currency="CNY",
                    reason=f"refund: {amount} CNY needs supervisor approval")
    assert t["kind"] == "approval" and t["approval_level"] == "supervisor"
    return t, conv


def test_an_agent_below_the_level_cannot_close_an_approval_by_resolving_it(api, pool, make_agent, open_ticket,
                                                                            conversation):
    _, ana = make_agent("ana")                                       # approval level auto (<= 50)
    t, conv = _approval(open_ticket, conversation)
    base = f"/v1/handoff/tickets/{t['id']}"
    assert api.post(f"{base}/claim", headers=bearer(ana)).status_code == 200
    assert _problem(api.post(f"{base}/approve", headers=bearer(ana)), 403)["required_level"] == "supervisor"
    assert _problem(api.post(f"{base}/reject", json={"reason": "no"}, headers=bearer(ana)), 403)

    body = _problem(api.post(f"{base}/resolve", json={"outcome": "solved"}, headers=bearer(ana)), 409)
    assert body["allowed"] == ["approve", "reject", "cancel"] and body["required_level"] == "supervisor"
    assert "approve or reject" in body["detail"].lower() and "cancel" in body["detail"]
    _problem(api.post(f"{base}/return-to-bot", json={}, headers=bearer(ana)), 409)

    now = _ticket(pool, t["id"])
    assert now["status"] == "claimed" and now["outcome"] is None and now["closed_at"] is None
    assert [e["action"] for e in events_of(pool, t["id"])] == ["opened", "claimed"]
    assert "on_ticket_resolved" not in port_calls(pool, t["id"])
    assert conversation_state(pool, conv) != "feedback_pending"


def test_no_level_makes_resolving_an_approval_right(api, pool, make_agent, open_ticket, conversation):
    """A director and an admin acting on any open ticket get the same 409: only a decision closes it."""
    _, dora = make_agent("dora", role="admin")                        # admins default to director
    _, sue = make_agent("sue", role="supervisor")
    t, _ = _approval(open_ticket, conversation)
    base = f"/v1/handoff/tickets/{t['id']}"
    _problem(api.post(f"{base}/resolve", json={"outcome": "refunded"}, headers=bearer(dora)), 409)   # queued
    assert api.post(f"{base}/claim", headers=bearer(sue)).status_code == 200
    for token in (sue, dora):                                        # the holder, and an admin over them
        _problem(api.post(f"{base}/resolve", json={"outcome": "solved"}, headers=bearer(token)), 409)
        _problem(api.post(f"{base}/return-to-bot", headers=bearer(token)), 409)
    assert _ticket(pool, t["id"])["status"] == "claimed"


def test_an_approval_may_still_move_and_be_cancelled(api, pool, make_agent, open_ticket, conversation):
    """Release and transfer keep it open (the way to someone who may approve); cancel closes it."""
    ana_agent, ana = make_agent("ana")
    sue_agent, sue = make_agent("sue", role="supervisor")
    make_agent("bo", teams=("billing",))
    t, _ = _approval(open_ticket, conversation)
    base = f"/v1/handoff/tickets/{t['id']}"
    api.post(f"{base}/claim", headers=bearer(ana))
    assert api.post(f"{base}/release", headers=bearer(ana)).json()["status"] == "queued"
    api.post(f"{base}/claim", headers=bearer(ana))
    moved = api.post(f"{base}/transfer", json={"agent": "sue"}, headers=bearer(ana)).json()
    assert moved["claimed_by"] == sue_agent.id and moved["kind"] == "approval"
    assert api.post(f"{base}/transfer", json={"team": "billing"}, headers=bearer(sue)).json()["team"] == "billing"
    _problem(api.post(f"{base}/cancel", json={"reason": "dup"}, headers=bearer(ana)), 403)   # agents do not cancel
    done = api.post(f"{base}/cancel", json={"reason": "duplicate request"}, headers=bearer(sue))
    assert done.status_code == 200 and (done.json()["status"], done.json()["outcome"]) == ("cancelled", "cancelled")
    assert port_calls(pool, t["id"])[-1] == "on_ticket_cancelled"


def test_a_transfer_to_a_team_nobody_works_in_is_404_and_changes_nothing(api, pool, make_agent, open_ticket):
    _, ana = make_agent("ana")
    _, sue = make_agent("sue", role="supervisor")
    make_agent("bo", teams=("billing",))
    make_agent("cy", teams=("care",))
    t = open_ticket()
    base = f"/v1/handoff/tickets/{t['id']}"
    assert api.post(f"{base}/claim", headers=bearer(ana)).status_code == 200

    body = _problem(api.post(f"{base}/transfer", json={"team": "biling"}, headers=bearer(ana)), 404)
    assert "'biling'" in body["detail"] and body["team"] == "biling"
    assert body["teams"] == ["billing", "care", "general"]
    _problem(api.post(f"{base}/transfer", json={"team": "nowhere", "agent": "sue"}, headers=bearer(sue)), 404)
    nobody = _problem(api.post(f"{base}/transfer", json={"agent": "nobody"}, headers=bearer(ana)), 404)
    assert nobody["agent"] == "nobody"
    _problem(api.post(f"{base}/transfer", json={"note": "where to?"}, headers=bearer(ana)), 422)   # names neither
    now = _ticket(pool, t["id"])
    assert (now["team"], now["status"], now["requeues"]) == ("general", "claimed", 0)
    assert [e["action"] for e in events_of(pool, t["id"])] == ["opened", "claimed"]

    with pool.connection() as conn:            # a team whose only member left no longer exists
        from handoff import agents

        agents.disable_agent(conn, "cy", actor="test")
    _problem(api.post(f"{base}/transfer", json={"team": "care"}, headers=bearer(ana)), 404)
    moved = api.post(f"{base}/transfer", json={"team": "billing"}, headers=bearer(ana))
    assert moved.status_code == 200 and moved.json()["team"] == "billing"
    back = api.post(f"{base}/transfer", json={"team": "general", "agent": "sue"}, headers=bearer(sue))
    assert back.status_code == 200 and back.json()["team"] == "general"


def test_the_default_team_always_takes_transfers(pool, hs, make_agent, open_ticket):
    """Tickets open in the default team even when nobody is in it yet; sending one back there is allowed."""
    sue, _ = make_agent("sue", role="supervisor", teams=("billing",))
    t = open_ticket(team="billing")
    hs.claim(sue, t["id"])
    assert hs.transfer(sue, t["id"], team="general")["team"] == "general"


def test_a_token_lifetime_must_be_positive_in_the_store(pool, make_agent):
    from handoff import agents

    make_agent("ana")
    with pool.connection() as conn:
        for bad in (timedelta(0), timedelta(days=-1), timedelta(microseconds=-1)):
            with pytest.raises(Invalid, match="positive"):
                agents.issue_token(conn, "ana", expires_in=bad, actor="test")
        _, row = agents.issue_token(conn, "ana", expires_in=timedelta(hours=1), actor="test")
    assert timedelta(minutes=59) < row["expires_at"] - datetime.now(timezone.utc) <= timedelta(hours=1)


def test_tokens_issue_refuses_zero_and_negative_days(dsn, tmp_path, monkeypatch, pool, hs, make_agent):
    from router.cli import app

    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path))
    make_agent("ana")
    with pool.connection() as conn:
        before = conn.execute("SELECT count(*) AS n FROM handoff_tokens").fetchone()["n"]
    runner = CliRunner()
    for days in ("0", "-1", "-0.5", "0.0"):
        r = runner.invoke(app, ["tokens", "issue", "ana", "--expires-days", days])
        assert r.exit_code == 2, (days, r.output)
        assert "above 0" in r.output and "sbt_" not in r.output
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) AS n FROM handoff_tokens").fetchone()["n"] == before   # none issued
    ok = runner.invoke(app, ["tokens", "issue", "ana", "--expires-days", "0.5", "--json"])
    assert ok.exit_code == 0, ok.output
    issued = json.loads(ok.stdout.strip().splitlines()[-1])
    left = datetime.fromisoformat(issued["expires_at"]) - datetime.now(timezone.utc)
    assert timedelta(hours=11, minutes=59) < left <= timedelta(hours=12)
    assert hs.authenticate(issued["token"]).name == "ana"
