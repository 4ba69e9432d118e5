"""`switchboard agents ...` and `switchboard tokens ...` against this test's database."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from router.cli import app


@pytest.fixture
def cli(dsn, tmp_path, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path))
    runner = CliRunner()

    def run(*args: str, ok: bool = True):
        result = runner.invoke(app, list(args))
        if ok:
            assert result.exit_code == 0, result.output
        return result

    return run


def _json(result) -> dict:
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_adding_an_agent_outside_the_default_team_says_where_tickets_open(cli):
    added = _json(cli("agents", "add", "ana", "--team", "billing", "--json"))
    assert "'general'" in added["note"]              # tickets open there by default: claim-next would be 204
    plain = cli("agents", "add", "gil")
    assert "teams=general" in plain.stdout and "note:" not in plain.stdout
    assert "note: tickets open in team 'general'" in cli("agents", "add", "hal", "--team", "care").stdout
    assert "note" not in _json(cli("agents", "add", "sue", "--role", "supervisor", "--team", "care", "--json"))


def test_agents_and_tokens_lifecycle(cli, hs, pool, open_ticket):
    added = _json(cli("agents", "add", "ana", "--team", "billing", "--team", "care", "--skill", "zh", "--json"))
    assert added["role"] == "agent" and added["teams"] == ["billing", "care"] and added["approval_level"] == "auto"
    sup = _json(cli("agents", "add", "sue", "--role", "supervisor", "--token", "--json"))
    assert sup["approval_level"] == "supervisor" and sup["token"].startswith("sbt_")
    assert hs.authenticate(sup["token"]).name == "sue"

    dup = cli("agents", "add", "ana", "--json", ok=False)
    assert dup.exit_code == 1 and "already exists" in _json(dup)["error"]
    bad = cli("agents", "add", "eve", "--role", "root", "--json", ok=False)
    assert bad.exit_code == 1 and "unknown role" in _json(bad)["error"]

    issued = _json(cli("tokens", "issue", "ana", "--label", "desk-3", "--expires-days", "30", "--json"))
    token = issued["token"]
    agent = hs.authenticate(token)
    assert agent.name == "ana" and agent.teams == ("billing", "care") and agent.skills == ("zh",)
    listed = _json(cli("tokens", "list", "ana", "--json"))["tokens"]
    assert [t["label"] for t in listed] == ["desk-3"] and token not in json.dumps(listed)
    with pool.connection() as conn:
        stored = conn.execute("SELECT token_hash FROM handoff_tokens").fetchall()
    assert all(token != r["token_hash"] and len(r["token_hash"]) == 64 for r in stored)   # only a hash is kept

    t = open_ticket(team="billing")
    hs.claim(agent, t["id"])
    rows = _json(cli("agents", "list", "--json"))["agents"]
    ana = next(a for a in rows if a["name"] == "ana")
    assert ana["holding"] == 1 and ana["active_tokens"] == 1

    revoked = _json(cli("tokens", "revoke", issued["id"], "--json"))
    assert revoked["agent"] == "ana" and revoked["already_revoked"] is False
    assert hs.authenticate(token) is None
    assert cli("tokens", "revoke", "sbt_nope", "--json", ok=False).exit_code == 1

    disabled = _json(cli("agents", "disable", "ana", "--json"))
    assert disabled["active"] is False and disabled["requeued"] == [t["id"]]
    assert [a["name"] for a in _json(cli("agents", "list", "--json"))["agents"]] == ["sue"]
    assert {a["name"] for a in _json(cli("agents", "list", "--all", "--json"))["agents"]} == {"ana", "sue"}
    with pool.connection() as conn:
        audit = conn.execute("SELECT actor, action FROM handoff_admin_events ORDER BY id").fetchall()
    assert [a["action"] for a in audit] == ["agent_added", "agent_added", "token_issued", "token_issued",
                                            "token_revoked", "agent_disabled"]
    assert all(a["actor"].startswith("cli") for a in audit)


def test_text_output_and_help(cli):
    assert "Add an agent" in cli("agents", "--help").stdout
    out = cli("agents", "add", "bob", "--team", "general").stdout
    assert out.startswith("added bob")
    issued = cli("tokens", "issue", "bob").stdout
    assert "shown once" in issued and "sbt_" in issued


def test_the_reveal_permission_is_granted_withdrawn_and_recorded(cli, pool, hs):
    added = _json(cli("agents", "add", "ria", "--can-reveal", "--json"))
    assert added["can_reveal"] is True
    assert _json(cli("agents", "add", "rob", "--json"))["can_reveal"] is False
    assert " reveal " in cli("agents", "list").stdout.splitlines()[0] + " "
    assert _json(cli("agents", "reveal", "rob", "--allow", "--json"))["can_reveal"] is True
    assert "rob: reveal denied" in cli("agents", "reveal", "rob", "--deny").stdout
    assert cli("agents", "reveal", "nobody", "--allow", ok=False).exit_code == 1
    assert cli("agents", "reveal", "rob", ok=False).exit_code == 2          # --allow or --deny is required
    with pool.connection() as conn:
        actions = [r["action"] for r in conn.execute(
            "SELECT e.action FROM handoff_admin_events e JOIN handoff_agents a ON a.id = e.agent_id "
            "WHERE a.name = 'rob' ORDER BY e.id").fetchall()]
        rows = {r["name"]: r["can_reveal"] for r in conn.execute("SELECT name, can_reveal FROM handoff_agents")}
    assert actions == ["agent_added", "reveal_granted", "reveal_withdrawn"]
    assert rows == {"ria": True, "rob": False}
    from handoff import agents

    with pool.connection() as conn:
        token, _ = agents.issue_token(conn, "ria")
    assert hs.authenticate(token).may_reveal is True
