"""``switchboard agents`` and ``switchboard tokens``: who may work the queue.

Every change is recorded in the append-only admin log with the operator as actor
(``cli:<os user>``). A token's plaintext is printed once, when it is issued.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import typer

from router.cli._common import JsonOpt, database, emit, fail, settings

agents_app = typer.Typer(help="Manage agents (who works the L2/L3 queue, in which teams, with which role).",
                         no_args_is_help=True)
tokens_app = typer.Typer(help="Issue and revoke agents' API tokens.", no_args_is_help=True)


def _actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # noqa: BLE001 - no user name (some containers)
        return "cli"


@contextmanager
def _conn():
    import psycopg
    from psycopg.rows import dict_row

    dsn = database(settings())
    with psycopg.connect(dsn, row_factory=dict_row) as conn, conn.transaction():
        yield conn


def _run(as_json: bool, fn: Callable[[Any], Any]) -> Any:
    """Run ``fn(conn)`` in one transaction; queue errors become a clean message and exit code 1."""
    from handoff.errors import HandoffError

    try:
        with _conn() as conn:
            return fn(conn)
    except HandoffError as exc:
        fail(exc.detail, as_json)


def _agent_line(a: dict[str, Any]) -> str:
    state = "active" if a.get("active", True) else "disabled"
    extra = f"  tokens={a['active_tokens']} holding={a['holding']}" if "active_tokens" in a else ""
    return (f"{a['name']:<20} {a['role']:<10} teams={','.join(a['teams'])} skills={','.join(a['skills']) or '-'} "
            f"approval={a['approval_level']}{' reveal' if a.get('can_reveal') else ''} {state}{extra}")


@agents_app.command("add")
def agents_add(
    name: str = typer.Argument(..., help="Login name: lower-case letters, digits, '.', '_' or '-'."),
    role: str = typer.Option("agent", help="agent | supervisor | admin"),
    team: list[str] = typer.Option(["general"], "--team", "-t", help="A team the agent works in (repeatable)."),
    skill: list[str] = typer.Option([], "--skill", "-s", help="A skill such as a language (repeatable)."),
    approval_level: str = typer.Option(None, help="auto | supervisor | manager | director "
                                                  "(default: agent=auto, supervisor=supervisor, admin=director)."),
    display_name: str = typer.Option(None, help="Shown on agent screens."),
    with_token: bool = typer.Option(False, "--token", help="Also issue a token and print it once."),
    can_reveal: bool = typer.Option(False, "--can-reveal", help="May reveal one masked personal value for a "
                                    "reason (recorded); supervisors and admins always may."),
    as_json: bool = JsonOpt,
) -> None:
    """Add an agent."""
    from handoff import agents

    def do(conn):
        row = agents.add_agent(conn, name, role=role, teams=team, skills=skill, approval_level=approval_level,
                               display_name=display_name, can_reveal=can_reveal, actor=_actor())
        if with_token:
            token, tok = agents.issue_token(conn, row["name"], label="initial", actor=_actor())
            row = {**row, "token": token, "token_id": tok["id"]}
        return row

    row = _run(as_json, do)
    text = f"added {_agent_line(row)}"
    if row.get("token"):
        text += f"\ntoken (shown once): {row['token']}"
    from handoff import HandoffConfig

    default_team = HandoffConfig().default_team
    if row["role"] == "agent" and default_team not in row["teams"]:
        # the newcomer's trap: tickets open in the default team, so claim-next would answer 204
        row["note"] = (f"tickets open in team {default_team!r} unless routed to another; this agent is not in it "
                       f"(add --team {default_team} to work them)")
        text += f"\nnote: {row['note']}"
    emit(row, as_json, text)


@agents_app.command("list")
def agents_list(
    all_: bool = typer.Option(False, "--all", help="Include disabled agents."),
    as_json: bool = JsonOpt,
) -> None:
    """List agents with their teams, role, approval level, live tokens and held tickets."""
    from handoff import agents

    rows = _run(as_json, lambda conn: agents.list_agents(conn, include_disabled=all_))
    emit({"agents": rows}, as_json, "\n".join(_agent_line(a) for a in rows) or "no agents")


@agents_app.command("reveal")
def agents_reveal(
    name: str = typer.Argument(..., help="Agent name or id."),
    allow: bool = typer.Option(..., "--allow/--deny", help="Grant or withdraw the permission."),
    as_json: bool = JsonOpt,
) -> None:
    """Grant or withdraw an agent's permission to reveal masked personal values (each reveal is recorded)."""
    from handoff import agents

    row = _run(as_json, lambda conn: agents.set_can_reveal(conn, name, allow, actor=_actor()))
    emit(row, as_json, f"{row['name']}: reveal {'allowed' if row['can_reveal'] else 'denied'}")


@agents_app.command("disable")
def agents_disable(
    name: str = typer.Argument(..., help="Agent name or id."),
    as_json: bool = JsonOpt,
) -> None:
    """Disable an agent: their tokens stop working and the tickets they hold go back to the queue."""
    from handoff import agents
    from router.turn.state import ConversationStatePort

    row = _run(as_json, lambda conn: agents.disable_agent(conn, name, actor=_actor(), port=ConversationStatePort()))
    emit(row, as_json, f"disabled {row['name']}; {len(row['requeued'])} ticket(s) back in the queue")


def _positive_days(value: float | None) -> float | None:
    """0 once meant "never expires" (a falsy number): refuse it and negatives as bad usage (exit 2)."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value:g} is not a lifetime: give a number of days above 0, or leave "
                                 "--expires-days out for a token that does not expire")
    return value


@tokens_app.command("issue")
def tokens_issue(
    agent: str = typer.Argument(..., help="Agent name or id."),
    label: str = typer.Option(None, help="What the token is for (e.g. 'desk-3')."),
    expires_days: float = typer.Option(None, max=36500.0, callback=_positive_days,
                                       help="Expire after this many days, more than 0 and at most 36500 "
                                            "(default: never)."),
    as_json: bool = JsonOpt,
) -> None:
    """Issue a token; the plaintext is printed once and only its sha256 is stored."""
    from handoff import agents

    expires = timedelta(days=expires_days) if expires_days is not None else None
    token, row = _run(as_json, lambda conn: agents.issue_token(conn, agent, label=label, expires_in=expires,
                                                                actor=_actor()))
    emit({**row, "token": token}, as_json,
         f"token for {row['agent']} (id {row['id']}, shown once):\n{token}")


@tokens_app.command("revoke")
def tokens_revoke(
    token: str = typer.Argument(..., help="Token id, its listed prefix, or the token itself."),
    as_json: bool = JsonOpt,
) -> None:
    """Revoke a token at once."""
    from handoff import agents

    row = _run(as_json, lambda conn: agents.revoke_token(conn, token, actor=_actor()))
    emit(row, as_json, f"revoked {row['prefix']}… of {row['agent']}"
         + (" (it was already revoked)" if row["already_revoked"] else ""))


@tokens_app.command("list")
def tokens_list(
    agent: str = typer.Argument(None, help="Only this agent's tokens."),
    as_json: bool = JsonOpt,
) -> None:
    """List tokens (prefix, label, expiry, revocation, last use); never the secrets."""
    from handoff import agents

    rows = _run(as_json, lambda conn: agents.list_tokens(conn, agent))
    lines = [f"{r['id']}  {r['prefix']}…  {r['agent']:<16} {r['label'] or '-':<12} "
             f"{'revoked' if r['revoked_at'] else 'active'}" for r in rows]
    emit({"tokens": rows}, as_json, "\n".join(lines) or "no tokens")
