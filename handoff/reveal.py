"""Revealing one masked personal value of a ticket, for a reason, on the record.

The context package and the ticket events are stored in the agent view (138****0000, card ending
5678). Each masked value of a message carries a reference, ``personal[].ref`` = ``m<message id>:<start>-<end>``
(the value's place in the original text), so an agent asks for exactly one value. Only the
conversation side still holds the original, so the reveal reads it through the port
(:meth:`~handoff.ports.ConversationPort.reveal_value`), after handoff checked the reference is one
this ticket shows. Who revealed which value and why (never the value) is written to the ticket's
events (``pii_revealed``) and the admin audit log (``handoff_admin_events``) in the same transaction
as the read: no record, no value.
"""

import json
import logging
from contextlib import AbstractContextManager
from typing import Any, Protocol

import psycopg
from psycopg.rows import DictRow

from handoff import tickets as T
from handoff.errors import Conflict, Forbidden, Invalid, NotFound, Unavailable
from handoff.models import Agent
from handoff.ports import ConversationPort, DeliveryUnavailable, OriginalGone
from handoff.refs import REF, refs as refs   # `refs` re-exported: the references live in handoff.refs
from text import personal

audit = logging.getLogger("switchboard.audit")

REASON_MIN, REASON_MAX = 6, 500


def parse_ref(ref: str) -> tuple[int, int, int]:
    """(message id, start, end); 422 when it is not shaped like a reference (an empty span is simply unknown)."""
    m = REF.match(ref or "")
    if not m:
        raise Invalid("ref must be a reference from the ticket's personal[] lists (m<message>:<start>-<end>)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


_SHOWN_SQL = """
SELECT coalesce(
    jsonb_path_query_first(t.context, '$.transcript[*].personal[*] ? (@.ref == $r)', p.v),
    (SELECT jsonb_path_query_first(e.payload, '$.personal[*] ? (@.ref == $r)', p.v) FROM ticket_events e
      WHERE e.ticket_id = t.id AND e.payload ? 'personal'
        AND jsonb_path_exists(e.payload, '$.personal[*] ? (@.ref == $r)', p.v) LIMIT 1)) AS hit
FROM tickets t, (SELECT jsonb_build_object('r', %s::text) AS v) p WHERE t.id = %s
"""


class Revealer(Protocol):
    """What a reveal uses of the service (:class:`handoff.service.HandoffService`): a transaction and the port."""

    port: ConversationPort

    def _action(self) -> AbstractContextManager[tuple[psycopg.Connection[DictRow], list[str]]]: ...


def reveal(svc: Revealer, agent: Agent, ticket_id: Any, *, ref: str, reason: str) -> dict[str, Any]:
    """One value in clear, recorded first. 403 without the permission or outside the agent's teams (an agent
    must hold the ticket; supervisors and admins need not), 404 for a reference the ticket does not show or
    whose original is gone, 422 for a malformed reference or a reason shorter than ``REASON_MIN``."""
    if not agent.may_reveal:
        raise Forbidden("revealing personal data needs the reveal permission (supervisors, admins, or "
                        "`switchboard agents reveal NAME --allow`)")
    message_id, start, end = parse_ref(ref)
    reason = (reason or "").strip()
    if not REASON_MIN <= len(reason) <= REASON_MAX:
        raise Invalid(f"a reveal needs a reason of {REASON_MIN} to {REASON_MAX} characters")
    with svc._action() as (conn, notes):
        ticket = T.fetch_ticket(conn, ticket_id)
        if not agent.may_see(ticket["team"]):
            raise Forbidden(f"ticket {ticket['id']} belongs to team {ticket['team']!r}, which you are not in")
        if not agent.sees_all_teams and ticket["claimed_by"] != agent.id:
            raise Conflict(f"ticket {ticket['id']} is not held by you; claim it first",
                           status_now=ticket["status"])
        row = conn.execute(_SHOWN_SQL, (ref, T.parse_id(ticket_id))).fetchone()
        hit = row["hit"] if row is not None else None   # no row: the ticket went between the two reads
        if not hit:
            raise NotFound(f"ticket {ticket['id']} shows no masked value {ref}")
        try:
            value = svc.port.reveal_value(conn, ticket, message_id=message_id, start=start, end=end)
        except OriginalGone as exc:
            raise NotFound(f"the original of {ref} is gone: {exc}") from None
        except DeliveryUnavailable as exc:
            raise Unavailable(str(exc)) from None
        payload = {"ref": ref, "label": hit.get("label"), "reason": reason}
        event = T.record_event(conn, ticket, agent, "pii_revealed", payload, notes=notes)
        _admin_record(conn, agent, {**personal.mask_obj(payload, keep=("ref",)), "ticket_id": str(ticket["id"]),
                                    "event_id": event["id"]})
    audit.info("pii_revealed ticket=%s agent=%s ref=%s label=%s reason=%s", ticket["id"], agent.name, ref,
               hit.get("label"), personal.mask(reason))
    return {"ticket_id": str(ticket["id"]), "ref": ref, "label": hit.get("label"), "value": value,
            "event_id": event["id"]}


def _admin_record(conn: psycopg.Connection[DictRow], agent: Agent, payload: dict[str, Any]) -> None:
    conn.execute("INSERT INTO handoff_admin_events (actor, action, agent_id, payload) VALUES (%s, 'pii_revealed', %s, %s)",
                 (agent.actor, agent.id, json.dumps(payload, ensure_ascii=False, default=str)))
