"""Who may see and act on a ticket: the checks every command and query applies before it reads or writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handoff.errors import Conflict, Forbidden
from handoff.models import OPEN_STATUSES, Agent


def check_visible(agent: Agent, ticket: dict[str, Any]) -> None:
    if not agent.may_see(ticket["team"]):
        raise Forbidden(f"ticket {ticket['id']} belongs to team {ticket['team']!r}, which you are not in")


def check_open(ticket: dict[str, Any]) -> None:
    if ticket["status"] not in OPEN_STATUSES:
        if ticket.get("kind") == "approval" and ticket["status"] == "cancelled":
            raise Conflict(f"approval ticket {ticket['id']} was withdrawn (cancelled): there is nothing to "
                           "decide and nothing was run", status_now="cancelled")
        raise Conflict(f"ticket {ticket['id']} is {ticket['status']}", status_now=ticket["status"])


def check_holder(agent: Agent, ticket: dict[str, Any], *, supervisors_too: bool = False) -> None:
    """The caller holds the claim (or, where allowed, is a supervisor/admin acting on any open ticket)."""
    check_visible(agent, ticket)
    check_open(ticket)
    if ticket["claimed_by"] == agent.id:
        return
    if supervisors_too and agent.sees_all_teams:
        return
    if ticket["status"] == "queued":
        raise Conflict(f"ticket {ticket['id']} is queued; claim it first", status_now="queued")
    raise Conflict(f"ticket {ticket['id']} is held by another agent", status_now="claimed",
                   claimed_by=ticket["claimed_by"])


def team_scope(agent: Agent, teams: Sequence[str] | None) -> list[str] | None:
    """The teams a query may cover: the requested ones (each must be visible), or all visible (None: every team)."""
    if teams:
        hidden = [t for t in teams if not agent.may_see(t)]
        if hidden:
            raise Forbidden(f"you are not in team(s) {', '.join(hidden)}")
        return list(teams)
    return None if agent.sees_all_teams else list(agent.teams)
