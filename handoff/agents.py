"""Agents and their API tokens.

A token is ``sbt_`` + 43 random url-safe characters (256 bits); only its sha256 is stored,
which is enough for a secret of that entropy (a slow hash guards guessable passwords, not
random keys). Every administrative change is written to ``handoff_admin_events`` with its
actor. Functions take a connection and run in the caller's transaction.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from psycopg.rows import DictRow

from handoff.errors import Conflict, Invalid, NotFound
from handoff.models import APPROVAL_LEVELS, DEFAULT_APPROVAL, ROLES, Agent, one
from handoff.ports import ConversationPort

TOKEN_PREFIX = "sbt_"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_TEAM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _admin_event(conn: psycopg.Connection[DictRow], actor: str, action: str, agent_id: Any, payload: dict[str, Any]) -> None:
    conn.execute(
        "INSERT INTO handoff_admin_events (actor, action, agent_id, payload) VALUES (%s, %s, %s, %s)",
        (actor, action, agent_id, json.dumps(payload, ensure_ascii=False, default=str)),
    )


def _clean_list(values: Iterable[str] | None, pattern: re.Pattern[str], what: str) -> list[str]:
    out: list[str] = []
    for v in values or ():
        v = v.strip()
        if not pattern.match(v):
            raise Invalid(f"invalid {what} {v!r}: letters, digits, '.', '_' or '-', at most 64")
        if v not in out:
            out.append(v)
    return out


def add_agent(conn: psycopg.Connection[DictRow], name: str, *, role: str = "agent",
              teams: Iterable[str] | None = ("general",), skills: Iterable[str] | None = (),
              approval_level: str | None = None, display_name: str | None = None,
              can_reveal: bool = False, actor: str = "system") -> dict[str, Any]:
    name = (name or "").strip().lower()
    if not _NAME.match(name):
        raise Invalid(f"invalid agent name {name!r}: lower-case letters, digits, '.', '_' or '-', at most 64")
    if role not in ROLES:
        raise Invalid(f"unknown role {role!r}; one of {', '.join(ROLES)}")
    level = approval_level or DEFAULT_APPROVAL[role]
    if level not in APPROVAL_LEVELS:
        raise Invalid(f"unknown approval level {level!r}; one of {', '.join(APPROVAL_LEVELS)}")
    teams_ = _clean_list(teams, _TEAM, "team")
    if not teams_:
        raise Invalid("an agent needs at least one team")
    skills_ = _clean_list(skills, _TEAM, "skill")
    row = conn.execute(
        """
        INSERT INTO handoff_agents (name, display_name, role, teams, skills, approval_level, can_reveal)
        VALUES (%s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (name) DO NOTHING
        RETURNING *
        """,
        (name, display_name, role, teams_, skills_, level, bool(can_reveal)),
    ).fetchone()
    if row is None:
        raise Conflict(f"agent {name!r} already exists")
    _admin_event(conn, actor, "agent_added", row["id"],
                 {"name": name, "role": role, "teams": teams_, "skills": skills_, "approval_level": level,
                  "can_reveal": bool(can_reveal)})
    return _agent_out(row)


def set_can_reveal(conn: psycopg.Connection[DictRow], name_or_id: str, allowed: bool, *, actor: str = "system") -> dict[str, Any]:
    """Grant or withdraw an agent's permission to reveal masked personal values (recorded)."""
    agent = get_agent(conn, name_or_id)
    row = one(conn.execute("UPDATE handoff_agents SET can_reveal = %s WHERE id = %s RETURNING *",
                           (bool(allowed), agent["id"])).fetchone())
    _admin_event(conn, actor, "reveal_granted" if allowed else "reveal_withdrawn", agent["id"],
                 {"name": agent["name"]})
    return _agent_out(row)


def _agent_out(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    out["id"] = str(out["id"])
    return out


def get_agent(conn: psycopg.Connection[DictRow], name_or_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT * FROM handoff_agents WHERE name = %s OR id::text = %s", (name_or_id.lower(), name_or_id)
    ).fetchone()
    if row is None:
        raise NotFound(f"no agent {name_or_id!r}")
    return _agent_out(row)


def list_agents(conn: psycopg.Connection[DictRow], *, include_disabled: bool = False) -> list[dict[str, Any]]:
    rows = conn.execute(
        """
        SELECT a.*, (SELECT count(*) FROM handoff_tokens t
                     WHERE t.agent_id = a.id AND t.revoked_at IS NULL
                       AND (t.expires_at IS NULL OR t.expires_at > now())) AS active_tokens,
                    (SELECT count(*) FROM tickets k WHERE k.claimed_by = a.id AND k.status = 'claimed') AS holding
        FROM handoff_agents a
        WHERE %s OR a.active
        ORDER BY a.name
        """,
        (include_disabled,),
    ).fetchall()
    return [_agent_out(r) for r in rows]


def disable_agent(conn: psycopg.Connection[DictRow], name_or_id: str, *, actor: str = "system",
                  port: ConversationPort | None = None) -> dict[str, Any]:
    """Disable an agent: their tokens stop working and the tickets they hold go back to the queue.

    ``port`` (a ConversationPort) hears ``on_ticket_requeued`` for each of them, in this
    transaction, so a customer whose agent left is waiting in the queue again, not "connected".
    """
    agent = get_agent(conn, name_or_id)
    row = one(conn.execute(
        "UPDATE handoff_agents SET active = false, disabled_at = coalesce(disabled_at, now()) "
        "WHERE id = %s RETURNING *",
        (agent["id"],),
    ).fetchone())
    from handoff.tickets import requeue_held_by

    requeued = requeue_held_by(conn, agent["id"], actor=actor, action="agent_disabled")
    for ticket in requeued:
        if port is not None:
            port.on_ticket_requeued(conn, ticket)
    _admin_event(conn, actor, "agent_disabled", agent["id"], {"name": agent["name"], "requeued": len(requeued)})
    out = _agent_out(row)
    out["requeued"] = [str(t["id"]) for t in requeued]
    return out


def issue_token(conn: psycopg.Connection[DictRow], agent_name_or_id: str, *, label: str | None = None,
                expires_in: timedelta | None = None, actor: str = "system") -> tuple[str, dict[str, Any]]:
    """Create a token for an active agent. Returns (plaintext, row); the plaintext is never stored.

    ``expires_in`` None means the token never expires; a zero or negative length is refused rather than
    read as "never" (a falsy zero once issued a token that never expired)."""
    if expires_in is not None and expires_in <= timedelta(0):
        raise Invalid(f"a token's lifetime must be positive (got {expires_in}); leave it out for a token "
                      "that does not expire")
    agent = get_agent(conn, agent_name_or_id)
    if not agent["active"]:
        raise Conflict(f"agent {agent['name']!r} is disabled")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires_at = datetime.now(timezone.utc) + expires_in if expires_in is not None else None
    row = one(conn.execute(
        """
        INSERT INTO handoff_tokens (agent_id, token_hash, prefix, label, expires_at)
        VALUES (%s, %s, %s, %s, %s)
        RETURNING id, agent_id, prefix, label, created_at, expires_at
        """,
        (agent["id"], hash_token(token), token[:12], label, expires_at),
    ).fetchone())
    _admin_event(conn, actor, "token_issued", agent["id"],
                 {"token_id": str(row["id"]), "prefix": row["prefix"], "label": label, "expires_at": expires_at})
    out = dict(row)
    out["id"], out["agent_id"], out["agent"] = str(out["id"]), str(out["agent_id"]), agent["name"]
    return token, out


def revoke_token(conn: psycopg.Connection[DictRow], token_ref: str, *, actor: str = "system") -> dict[str, Any]:
    """Revoke by token id, by its prefix (as listed) or by the token itself."""
    ref = token_ref.strip()
    rows = conn.execute(
        """
        SELECT t.id, t.prefix, t.revoked_at, a.name AS agent, a.id AS agent_id FROM handoff_tokens t
        JOIN handoff_agents a ON a.id = t.agent_id
        WHERE t.id::text = %s OR t.prefix = %s OR t.token_hash = %s
        """,
        (ref, ref, hash_token(ref)),
    ).fetchall()
    if not rows:
        raise NotFound(f"no token {ref!r}")
    if len(rows) > 1:
        raise Conflict(f"{ref!r} matches {len(rows)} tokens; use the token id")
    tok = rows[0]
    conn.execute("UPDATE handoff_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = %s", (tok["id"],))
    _admin_event(conn, actor, "token_revoked", tok["agent_id"], {"token_id": str(tok["id"]), "prefix": tok["prefix"]})
    return {"id": str(tok["id"]), "prefix": tok["prefix"], "agent": tok["agent"],
            "already_revoked": tok["revoked_at"] is not None}


def list_tokens(conn: psycopg.Connection[DictRow], agent_name_or_id: str | None = None) -> list[dict[str, Any]]:
    rows = conn.execute(
        """
        SELECT t.id, t.prefix, t.label, t.created_at, t.expires_at, t.revoked_at, t.last_used_at, a.name AS agent
        FROM handoff_tokens t JOIN handoff_agents a ON a.id = t.agent_id
        WHERE %(ref)s::text IS NULL OR a.name = %(ref)s OR a.id::text = %(ref)s
        ORDER BY t.created_at
        """,
        {"ref": agent_name_or_id},
    ).fetchall()
    return [{**r, "id": str(r["id"])} for r in rows]


_AUTH_SQL = """
WITH hit AS (
    SELECT a.*, t.id AS token_id, t.last_used_at
    FROM handoff_tokens t JOIN handoff_agents a ON a.id = t.agent_id
    WHERE t.token_hash = %s AND t.revoked_at IS NULL
      AND (t.expires_at IS NULL OR t.expires_at > now()) AND a.active
), touched AS (
    -- last use is kept to the minute: one write per token per minute, not per request
    UPDATE handoff_tokens SET last_used_at = now()
    WHERE id = (SELECT token_id FROM hit)
      AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
)
SELECT * FROM hit
"""


def authenticate(conn: psycopg.Connection[DictRow], token: str | None) -> Agent | None:
    """The active agent a valid, unrevoked, unexpired token belongs to; None otherwise."""
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    row = conn.execute(_AUTH_SQL, (hash_token(token),)).fetchone()
    return Agent.from_row(row) if row else None


def team_exists(conn: psycopg.Connection[DictRow], team: str) -> bool:
    """A team exists while an active agent works in it: teams are not a table of their own but the teams
    agents are added with (``switchboard agents add --team``)."""
    return bool(one(conn.execute("SELECT EXISTS (SELECT 1 FROM handoff_agents WHERE active AND %s = ANY(teams)) "
                                 "AS hit", (team,)).fetchone())["hit"])


def known_teams(conn: psycopg.Connection[DictRow]) -> list[str]:
    """Every team an active agent works in, sorted."""
    rows = conn.execute("SELECT DISTINCT unnest(teams) AS team FROM handoff_agents WHERE active ORDER BY 1").fetchall()
    return [r["team"] for r in rows]


def active_agent(conn: psycopg.Connection[DictRow], name_or_id: str) -> Agent | None:
    """The active agent with this name or id (None when there is none or it is disabled)."""
    row = conn.execute(
        "SELECT * FROM handoff_agents WHERE name = %s OR id::text = %s", (name_or_id.lower(), name_or_id)
    ).fetchone()
    return Agent.from_row(row) if row is not None and row["active"] else None
