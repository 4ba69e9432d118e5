"""The agent's desk around a ticket: internal notes, tags, a waiting status, canned replies (macros), and the
colleagues a ticket can be assigned to.

Notes are ticket events (``note``): they stay in the audit trail and never reach the customer. Tags and the
waiting status (``pending``: waiting for the customer, cleared when they write; ``on_hold``: waiting on
someone else) are columns of the ticket (migration 0200), each change an event like every other. A macro is a
reply per language with ``{variables}`` filled from the ticket (:data:`VARIABLES`); the agent reads and edits
the result before sending it as an ordinary message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import psycopg
from psycopg.rows import DictRow

from handoff import tickets as T
from handoff.access import check_holder, check_open, check_visible
from handoff.errors import Conflict, Forbidden, Invalid, NotFound, Unavailable
from handoff.models import OPEN_STATUSES, Agent, one
from handoff.ports import ConversationPort, DeliveryUnavailable, FlowPort
from text.personal import partial

HOLDS = ("pending", "on_hold")
TAG = re.compile(r"^[\w][\w.-]{0,31}$")
MAX_TAGS = 20
VARIABLES = ("customer_name", "customer_id", "agent_name", "ticket", "order", "amount")
_VAR = re.compile(r"\{([a-z_]+)\}")


def _order_of(ticket: dict[str, Any]) -> str | None:
    ctx = ticket.get("context") or {}
    approval = ctx.get("approval") or {}
    if approval.get("order"):
        return str(approval["order"])
    orders = (ctx.get("customer") or {}).get("order_numbers") or []
    return str(orders[0]) if orders else None


def fill(body: str, values: dict[str, str | None]) -> tuple[str, list[str]]:
    """The macro with its variables filled; a value the ticket does not have leaves nothing behind (the
    sentence around it is tidied), and its name is listed as missing."""
    missing: list[str] = []

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in values:
            return m.group(0)           # not a variable of ours: the text stays as written
        if not values[name]:
            missing.append(name)
            return ""
        return str(values[name])

    text = _VAR.sub(one, body)
    text = re.sub(r"[ \t]+([,.!?，。！？])", r"\1", re.sub(r"[ \t]{2,}", " ", text))
    text = re.sub(r"^[,，]\s*|(?<=\n)[,，]\s*", "", text).strip()
    return text, missing


class Desk(Protocol):
    """What the desk uses of the service it is mixed into (:class:`handoff.service.HandoffService`: its
    connections, and the ticket commands' port, lock, audit event and Idempotency-Key check)."""

    port: ConversationPort

    def _action(self) -> AbstractContextManager[tuple[psycopg.Connection[DictRow], list[str]]]: ...

    def _read(self) -> AbstractContextManager[psycopg.Connection[DictRow]]: ...

    def _lock(self, conn: psycopg.Connection[DictRow], ticket_id: Any) -> dict[str, Any]: ...

    def _event(self, conn: psycopg.Connection[DictRow], notes: list[str], ticket: dict[str, Any], actor: Agent,
               action: str, payload: dict[str, Any] | None = None, *, idempotency_key: str | None = None,
               from_team: str | None = None) -> dict[str, Any]: ...

    def _check_key(self, key: str | None) -> str | None: ...


class DeskCommands:
    """Notes, tags, hold, macros and assignable colleagues (mixed into HandoffService; ``self`` is a
    :class:`Desk`)."""

    def add_note(self: Desk, agent: Agent, ticket_id: Any, text: str) -> dict[str, Any]:
        """An internal note on the ticket (any agent who sees it): an event, never sent to the customer."""
        text = (text or "").strip()
        if not text:
            raise Invalid("the note is empty")
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_visible(agent, ticket)
            ev = self._event(conn, notes, ticket, agent, "note", {"text": text})
        return {"ticket": ticket, "event_id": ev["id"], "action": "note", "replayed": False}

    def set_tags(self: Desk, agent: Agent, ticket_id: Any, *, add: Sequence[str] = (),
                 remove: Sequence[str] = ()) -> dict[str, Any]:
        """Add and remove tags (lower-cased, deduplicated); an event records the change."""
        bad = [t for t in [*add, *remove] if not TAG.match(t.strip())]
        if bad:
            raise Invalid(f"invalid tag(s) {', '.join(bad)}: letters, digits, . _ - and at most 32 characters")
        add = list(dict.fromkeys(t.strip().lower() for t in add))
        remove = [t.strip().lower() for t in remove]
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_visible(agent, ticket)
            tags = [t for t in ticket.get("tags") or [] if t not in remove]
            tags += [t for t in add if t not in tags]
            if len(tags) > MAX_TAGS:   # the ticket's state, not the request's shape: 409
                raise Conflict(f"a ticket has at most {MAX_TAGS} tags; it has {len(ticket.get('tags') or [])}",
                               status_now=ticket["status"])
            if tags == list(ticket.get("tags") or []):
                return ticket
            updated = T.update_ticket(conn, ticket["id"], tags=tags)
            self._event(conn, notes, updated, agent, "tagged", {"tags": tags, "added": add, "removed": remove})
        return updated

    def set_hold(self: Desk, agent: Agent, ticket_id: Any, hold: str | None) -> dict[str, Any]:
        """Mark the held ticket as waiting for the customer (``pending``), on someone else (``on_hold``), or
        neither (None). The holder, or a supervisor."""
        if hold is not None and hold not in HOLDS:
            raise Invalid(f"unknown status {hold}; one of {', '.join(HOLDS)} or null")
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_holder(agent, ticket, supervisors_too=True)
            if ticket.get("hold") == hold:
                return ticket
            updated = T.update_ticket(conn, ticket["id"], hold=hold)
            self._event(conn, notes, updated, agent, "hold", {"hold": hold, "previous": ticket.get("hold")})
        return updated

    # -- macros ---------------------------------------------------------------------------------

    def list_macros(self: Desk, agent: Agent, *, language: str | None = None) -> list[dict[str, Any]]:
        """Macros for the caller's teams (and every team's), optionally in one language."""
        with self._read() as conn:
            return conn.execute(
                """SELECT name, language, title, body, team, created_by, updated_at FROM handoff_macros
                   WHERE (team IS NULL OR %(all)s OR team = ANY(%(teams)s))
                     AND (%(lang)s::text IS NULL OR language = %(lang)s)
                   ORDER BY name, language""",
                {"all": agent.sees_all_teams, "teams": list(agent.teams), "lang": language}).fetchall()

    def put_macro(self: Desk, agent: Agent, name: str, language: str, *, title: str, body: str,
                  team: str | None = None) -> dict[str, Any]:
        """Create or replace a macro (supervisors and admins)."""
        if not agent.sees_all_teams:
            raise Forbidden("only supervisors and admins change macros")
        unknown = sorted({v for v in _VAR.findall(body) if v not in VARIABLES})
        if unknown:
            raise Invalid(f"unknown variable(s) {', '.join(unknown)}; one of {', '.join(VARIABLES)}")
        with self._read() as conn:
            return one(conn.execute(
                """INSERT INTO handoff_macros (name, language, title, body, team, created_by)
                   VALUES (%s, %s, %s, %s, %s, %s)
                   ON CONFLICT (name, language) DO UPDATE SET title = excluded.title, body = excluded.body,
                       team = excluded.team, created_by = excluded.created_by, updated_at = now()
                   RETURNING name, language, title, body, team, created_by, updated_at""",
                (name, language, title, body, team, agent.actor)).fetchone())

    def delete_macro(self: Desk, agent: Agent, name: str, language: str) -> None:
        if not agent.sees_all_teams:
            raise Forbidden("only supervisors and admins change macros")
        with self._read() as conn:
            if conn.execute("DELETE FROM handoff_macros WHERE name = %s AND language = %s",
                            (name, language)).rowcount == 0:
                raise NotFound(f"no macro {name!r} in {language!r}")

    def render_macro(self: Desk, agent: Agent, ticket_id: Any, name: str, language: str | None = None) -> dict[str, Any]:
        """A macro filled in for this ticket, in the given language or the customer's (English otherwise)."""
        with self._read() as conn:
            ticket = T.fetch_ticket(conn, ticket_id)
            check_visible(agent, ticket)
            check_open(ticket)
            rows = {r["language"]: r for r in conn.execute(
                "SELECT * FROM handoff_macros WHERE name = %s AND (team IS NULL OR %s OR team = ANY(%s))",
                (name, agent.sees_all_teams, list(agent.teams)))}
        lang = language or ticket.get("language") or "en"
        macro = rows.get(lang) or (None if language else rows.get("en"))
        if macro is None:
            raise NotFound(f"no macro {name!r} in {lang!r}", languages=sorted(rows))
        amount = f"{ticket['amount']:g} {ticket.get('currency') or ''}".strip() if ticket.get("amount") else None
        values = {"customer_name": ticket.get("customer_name"), "customer_id": ticket["customer_id"],
                  "agent_name": agent.display_name or agent.name, "ticket": str(ticket["id"])[:8],
                  "order": _order_of(ticket), "amount": amount}
        text, missing = fill(macro["body"], values)
        return {"name": name, "language": macro["language"], "text": text, "missing": missing}

    # -- finishing what a flow stopped at ---------------------------------------------------------

    def pending_action(self: Desk, agent: Agent, ticket_id: Any) -> dict[str, Any] | None:
        """The action a flow of the ticket's conversation waits on, in the agent view: personal values masked
        (``masked`` names those arguments; the agent reveals the customer's words in the transcript, recorded,
        and types what the shop needs). None when nothing waits."""
        with self._read() as conn:
            ticket = T.fetch_ticket(conn, ticket_id)
            check_visible(agent, ticket)
            port = self.port
            if not isinstance(port, FlowPort) or ticket["status"] not in OPEN_STATUSES:   # no workflow side
                return None
            found = port.pending_action(conn, ticket)
        if found is None:
            return None
        shown = {k: partial(v) if isinstance(v, str) else v for k, v in found["arguments"].items()}
        return {**found, "arguments": shown, "masked": sorted(k for k in shown if shown[k] != found["arguments"][k])}

    def complete_action(self: Desk, agent: Agent, ticket_id: Any, *, instance_id: str, arguments: dict[str, Any],
                        idempotency_key: str | None = None) -> dict[str, Any]:
        """The holder confirms the stopped action for the customer, with the values they changed (arguments
        left out keep the flow's values). The flow goes on in this transaction; its tool runs for the agent and
        the result is the tool's real one. One ``action_completed`` event; an Idempotency-Key repeats it."""
        key = self._check_key(idempotency_key)
        port = self.port
        if not isinstance(port, FlowPort):
            raise Unavailable("no workflow side is wired: the action cannot be completed here")
        with self._action() as (conn, notes):
            ticket = self._lock(conn, ticket_id)
            check_visible(agent, ticket)
            prior = T.event_by_key(conn, ticket["id"], key) if key else None
            if prior is not None:
                if prior["actor"] != agent.actor:
                    raise Conflict("this Idempotency-Key was used by another agent on this ticket")
                return {"ticket": ticket, "event_id": prior["id"], "action": prior["action"],
                        "result": prior["payload"].get("result"), "replayed": True}
            check_holder(agent, ticket)
            try:
                result = port.complete_pending(conn, ticket, instance_id=str(instance_id),
                                               arguments=dict(arguments or {}), actor=agent.actor)
            except ValueError as exc:
                raise Invalid(str(exc)) from None
            except DeliveryUnavailable as exc:
                raise Unavailable(f"the action cannot be completed: {exc}") from None
            if not result.get("done"):
                raise Conflict("nothing waits for a confirmation any more: the flow went on or ended",
                               status_now=ticket["status"])
            flow = result.get("workflow") or {}
            summary = {"outcome": result.get("outcome"), "status": flow.get("status"), "step": flow.get("step"),
                       "tools": result.get("tools") or [], "reply": result.get("reply")}
            ev = self._event(conn, notes, ticket, agent, "action_completed",
                             {"instance_id": str(instance_id), "changed": sorted(arguments or {}), "result": summary},
                             idempotency_key=key)
        return {"ticket": ticket, "event_id": ev["id"], "action": "action_completed", "result": summary,
                "replayed": False}

    def assignable_agents(self: Desk, agent: Agent) -> list[dict[str, Any]]:
        """Active colleagues who share a team with the caller (everyone, for supervisors and admins)."""
        with self._read() as conn:
            rows = conn.execute(
                """SELECT name, display_name, role, teams FROM handoff_agents
                   WHERE active AND (%s OR teams && %s::text[]) ORDER BY name""",
                (agent.sees_all_teams, list(agent.teams))).fetchall()
        return [dict(r) for r in rows]
