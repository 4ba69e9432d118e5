"""``/console``: the agent console's page and assets, and the one read the queue API does not have.

The page is plain HTML, one vanilla JS module and one stylesheet shipped in the package (no
build step, nothing fetched from a CDN). Every console response carries a strict
Content-Security-Policy: scripts, styles and connections only from this origin, no inline
script or style, no framing.

The console talks to ``/v1/handoff`` with the agent's Bearer token. Its live queue reads the
handoff event stream with ``fetch()`` (an ``EventSource`` cannot send an Authorization
header) and reconnects with ``Last-Event-ID``. The conversation's messages after the ticket
opened and their delivery rows live in the gateway's tables (messages, outbox), which the
queue does not own, so ``GET /console/api/tickets/{id}/conversation`` reads them here, for
agents who may see the ticket, in the agent view (personal data masked; a customer's masked values carry
the references a recorded reveal asks for).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Request, Response

from handoff.api import CallerDep, ProblemRoute
from handoff.errors import NotFound
from automation.tools.base import Caller
from handoff.reveal import refs
from handoff.tickets import AGENT_VIEW_KEEP
from router.ops.trace import load_trace
from router.ops.understanding import understood
from router.outbox.store import deliveries_since
from text import personal
from text.personal import partial_obj

log = logging.getLogger(__name__)

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
ASSETS = {   # the only files served: name -> media type
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
_STATIC = Path(__file__).resolve().parents[1] / "console" / "static"   # router/app/console/static


def _asset(name: str) -> bytes:
    return (_STATIC / name).read_bytes()


def _headers(cache: str) -> dict[str, str]:
    return {**SECURITY_HEADERS, "Cache-Control": cache}


router = APIRouter(tags=["console"], route_class=ProblemRoute)


@router.get("/console", include_in_schema=False)
async def console_page() -> Response:
    # no-store: a new release's page (and its asset version) is picked up at once
    return Response(_asset("index.html"), media_type="text/html; charset=utf-8", headers=_headers("no-store"))


@router.get("/console/static/{name}", include_in_schema=False)
async def console_asset(name: str) -> Response:
    media = ASSETS.get(name)
    if media is None:
        raise NotFound(f"no console asset {name!r}")
    return Response(_asset(name), media_type=media, headers=_headers("no-cache"))


@router.get("/console/api/tickets/{ticket_id}/conversation",
            summary="The ticket's conversation as it goes on: messages and their delivery (outbox)",
            description="Messages of the ticket's conversation since the ticket opened (customer, bot and "
                        "agent; for an approval ticket since its workflow began, so the request shows), and the outbox rows that carry the outgoing ones to the customer's channel, "
                        "with their delivery status. For agents who may see the ticket.",
            responses={401: {"description": "Missing or invalid token"}, 403: {"description": "Not your team"},
                       404: {"description": "No such ticket"}})
async def ticket_conversation(ticket_id: UUID, request: Request,
                              call: CallerDep,
                              limit: Annotated[int, Query(ge=1, le=500)] = 200) -> dict[str, Any]:
    def read(agent):
        ticket = call.svc.get_ticket(agent, ticket_id)
        return conversation_log(request.app.state.services.pool, ticket, limit=limit)

    return await call.run(read)


@router.get("/console/api/tickets/{ticket_id}/understanding",
            summary="What the bot understood, one sentence per turn (en and zh)",
            description="For the ticket's conversation, each turn's request and where it stood after it "
                        "(\"asked to change the address of order 100271; waiting for confirmation\"), built "
                        "from the turn's stored decision and trace, the audited tool calls and the workflow's "
                        "slots; an action is said to be done only when its tool call returned ok. Actions run "
                        "outside a turn (an approval, an agent confirming) are items of their own. For agents "
                        "who may see the ticket.",
            responses={401: {"description": "Missing or invalid token"}, 403: {"description": "Not your team"},
                       404: {"description": "No such ticket"}})
async def ticket_understanding(ticket_id: UUID, request: Request, call: CallerDep,
                               limit: Annotated[int, Query(ge=1, le=100)] = 30) -> dict[str, Any]:
    def read(agent):
        ticket = call.svc.get_ticket(agent, ticket_id)
        return {"ticket_id": ticket["id"],
                "items": understanding(request.app.state.services.pool, ticket, limit=limit)}

    return await call.run(read)


@router.get("/console/api/tickets/{ticket_id}/customer",
            summary="The customer as the shop knows them: profile, recent orders, earlier tickets and outcomes",
            description="The ticket's own session memory when its context package has one; otherwise (an "
                        "approval ticket, opened by a workflow) the same memory loaded now through the tool "
                        "gateway, as the workflows load it (cached per conversation). Agent view: personal data "
                        "masked. `memory` is null when no workflow side is wired or the customer is unknown. "
                        "`status`: `pending` while the ticket's memory is still loading (it is loaded when an "
                        "agent first reads or claims the ticket, so the customer's turn never waits for it and "
                        "no ticket nobody opens costs the shop anything), `loaded`, `partial` (some "
                        "of the shop's reads failed), `unavailable` (the shop gave none), null (none to load).",
            responses={401: {"description": "Missing or invalid token"}, 403: {"description": "Not your team"},
                       404: {"description": "No such ticket"}})
async def ticket_customer(ticket_id: UUID, request: Request, call: CallerDep) -> dict[str, Any]:
    def read(agent):
        ticket = call.svc.get_ticket(agent, ticket_id)
        return {"ticket_id": ticket["id"], **customer_memory(request.app.state.services, ticket)}

    return await call.run(read)


def customer_memory(services, ticket: dict[str, Any]) -> dict[str, Any]:
    """(memory, source, status): the package's, else loaded now; a failure to load is no memory (logged), not
    an error. A package whose memory is still loading (``memory_status`` ``pending``: it comes a moment after
    an agent first reads the ticket) says so, and one the shop could not give says ``unavailable``, rather than
    none."""
    context = ticket.get("context") or {}
    memory, status = context.get("memory"), context.get("memory_status")
    if memory:
        return {"memory": memory, "source": "ticket", "status": status or "loaded"}
    if status in ("pending", "unavailable"):
        return {"memory": None, "source": "ticket", "status": status}
    engine = getattr(services, "flows", None)
    if engine is None or not ticket.get("customer_id"):
        return {"memory": None, "source": None, "status": None}
    caller = Caller(channel=ticket["channel"], customer_id=str(ticket["customer_id"]),
                    conversation_id=str(ticket["conversation_id"]))
    lang = ticket.get("language") if ticket.get("language") in ("zh", "en") else "en"
    try:
        with services.pool.connection() as conn:
            memory = engine.memory(conn, caller, lang)
    except Exception:  # noqa: BLE001 - the shop's view is a courtesy to the agent; the ticket works without it
        log.exception("the customer's session memory could not be loaded for ticket %s", ticket["id"])
        return {"memory": None, "source": None, "status": "unavailable"}
    return {"memory": partial_obj(memory, allow=[], keep=AGENT_VIEW_KEEP) if memory else None, "source": "shop",
            "status": "loaded" if memory else None}


def understanding(pool, ticket: dict[str, Any], *, limit: int = 30) -> list[dict[str, Any]]:
    """The sentences of the ticket's conversation (none for a ticket opened outside the gateway)."""
    try:
        conversation = str(UUID(str(ticket["conversation_id"])))
    except ValueError:
        return []
    with pool.connection() as conn:
        replay = load_trace(conn, conversation)
    return understood(replay, limit=limit) if replay else []


def conversation_log(pool, ticket: dict[str, Any], *, limit: int = 200) -> dict[str, Any]:
    """Messages since the ticket opened and the outbox rows of the conversation in that time, oldest first."""
    try:
        conversation = UUID(str(ticket["conversation_id"]))
    except ValueError:   # a ticket opened outside the gateway: no conversation of ours
        return {"ticket_id": ticket["id"], "conversation_id": ticket["conversation_id"], "messages": [],
                "outbox": []}
    with pool.connection() as conn:
        since = _request_started(conn, ticket) or ticket["created_at"]
        messages = conn.execute(
            """
            SELECT id, direction, sender, text, received_at AS at FROM (
                SELECT * FROM messages WHERE conversation_id = %(c)s AND received_at >= %(since)s
                ORDER BY id DESC LIMIT %(n)s) m
            ORDER BY id
            """,
            {"c": conversation, "since": since, "n": limit},
        ).fetchall()
        outbox = deliveries_since(conn, conversation, ticket["created_at"], limit=limit)
    return {"ticket_id": ticket["id"], "conversation_id": ticket["conversation_id"],
            "messages": [_agent_view(m) for m in messages],
            "outbox": [{**o, "text": personal.partial(o["text"])} for o in outbox]}


def _request_started(conn, ticket: dict[str, Any]):
    """When the workflow an approval ticket waits on began: the approver reads the customer's request from
    there (the ticket opens only at the customer's final "yes"); None for other tickets."""
    if ticket.get("kind") != "approval":
        return None
    try:
        instance = UUID(str((ticket.get("draft") or {}).get("instance_id")))
    except ValueError:
        return None
    row = conn.execute("SELECT created_at FROM flow_instances WHERE id = %s AND conversation_id = %s",
                       (instance, str(ticket["conversation_id"]))).fetchone()
    return row["created_at"] if row and row["created_at"] < ticket["created_at"] else None


def _agent_view(message: dict[str, Any]) -> dict[str, Any]:
    """A message as agents see it: personal data in partial form (138****0000); a customer's message lists
    the references of its masked values (``personal``), which its ticket event carries too, for a reveal."""
    out = {**message, "text": personal.partial(message["text"])}
    if message["sender"] == "customer":
        out["personal"] = refs(message["text"], message["id"])
    return out
