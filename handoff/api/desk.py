"""The desk around a ticket: internal notes, tags, the waiting status, macros, and colleagues to assign to."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from handoff.api.deps import CallerDep, IdemKey, ProblemRoute, doc, replayed
from handoff.desk import MAX_TAGS, VARIABLES
from handoff.schemas import ActionOut, Ticket
from text.content import HAS_CONTENT, NOT_SPACE

TAG_PATTERN = r"^[\w][\w.-]{0,31}$"
NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"
LANG_PATTERN = r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$"
# text with braces only around a known variable, and something besides white space
MACRO_BODY = rf"^([^{{}}\x00]|\{{({'|'.join(VARIABLES)})\}})*{NOT_SPACE}([^{{}}\x00]|\{{({'|'.join(VARIABLES)})\}})*$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class NoteIn(_In):
    text: str = Field(min_length=1, max_length=4000, pattern=HAS_CONTENT)


class TagsIn(_In):
    add: list[Annotated[str, Field(pattern=TAG_PATTERN)]] = Field(default_factory=list, max_length=MAX_TAGS)
    remove: list[Annotated[str, Field(pattern=TAG_PATTERN)]] = Field(default_factory=list, max_length=MAX_TAGS)


class HoldIn(_In):
    hold: Literal["pending", "on_hold"] | None = Field(description="null: not waiting any more")


class MacroIn(_In):
    title: str = Field(min_length=1, max_length=120, pattern=HAS_CONTENT)
    body: str = Field(min_length=1, max_length=4000, description=(
        f"Variables: {', '.join('{' + v + '}' for v in VARIABLES)}; braces only around one of them."))
    team: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
                             description="Only this team's agents see it (default: every team).")

    @field_validator("body")
    @classmethod
    def _known_variables(cls, body: str) -> str:
        """Say which variable is unknown or which brace is stray (a pattern's message would not)."""
        if re.fullmatch(MACRO_BODY, body):
            return body
        if not re.search(NOT_SPACE, body) or "\x00" in body:
            raise ValueError("the text is empty or holds a NUL character")
        unknown = sorted({v for v in re.findall(r"\{([^{}]*)\}", body) if v not in VARIABLES})
        if unknown:
            raise ValueError(f"unknown variable(s) {', '.join('{' + v + '}' for v in unknown)}; "
                             f"one of {', '.join('{' + v + '}' for v in VARIABLES)}")
        raise ValueError("a brace { or } that does not enclose a variable; write {variable} with one of "
                         f"{', '.join(VARIABLES)}")


class MacroOut(BaseModel):
    name: str
    language: str
    title: str
    body: str
    team: str | None = None
    created_by: str
    updated_at: Any


class MacroList(BaseModel):
    items: list[MacroOut]
    variables: list[str] = list(VARIABLES)


class RenderedOut(BaseModel):
    name: str
    language: str
    text: str = Field(description="The reply with the ticket's values filled in; edit it before sending.")
    missing: list[str] = Field(description="Variables the ticket has no value for (left out of the text).")


class PendingActionOut(BaseModel):
    instance_id: str
    workflow: str
    step: str
    tool: str | None
    arguments: dict[str, Any] = Field(description="Agent view: personal values masked (see `masked`).")
    summary: str | None = None
    editable: list[str] = Field(description="Arguments an agent may change (each taken from a slot of the flow).")
    masked: list[str] = Field(default_factory=list, description="Arguments shown masked; send a new value to "
                              "change one, leave it out to keep the customer's.")
    lang: str | None = None


class PendingOut(BaseModel):
    pending: PendingActionOut | None


class CompleteIn(_In):
    instance_id: UUID = Field(description="The `instance_id` of the pending action being confirmed.")
    arguments: dict[str, Annotated[str, Field(max_length=500, pattern=HAS_CONTENT)]] = Field(
        default_factory=dict, max_length=20, description="Only the arguments you change.")


class CompleteOut(BaseModel):
    ticket: Ticket
    event_id: int
    action: str
    result: dict[str, Any] | None = Field(description="outcome, the flow's status and step, each tool call's "
                                          "real status, and the reply sent to the customer.")
    replayed: bool = False


class Colleague(BaseModel):
    name: str
    display_name: str | None = None
    role: str
    teams: list[str]


class ColleagueList(BaseModel):
    items: list[Colleague]


MacroName = Annotated[str, Path(pattern=NAME_PATTERN)]
MacroLang = Annotated[str, Path(pattern=LANG_PATTERN)]

router = APIRouter(prefix="/v1/handoff", tags=["handoff"], route_class=ProblemRoute, responses=doc(401, 422))


@router.post("/tickets/{ticket_id}/notes", response_model=ActionOut, summary="Add an internal note",
             description="For colleagues only: recorded as a `note` event, never sent to the customer. Any agent "
                         "who sees the ticket.", responses=doc(403, 404))
async def add_note(ticket_id: UUID, body: NoteIn, call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.add_note(agent, ticket_id, body.text))


@router.post("/tickets/{ticket_id}/tags", response_model=Ticket, summary="Add and remove tags",
             description="Tags are lower-cased; a `tagged` event records each change. 409 past 20 tags.",
             responses=doc(403, 404, 409))
async def set_tags(ticket_id: UUID, body: TagsIn, call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.set_tags(agent, ticket_id, add=body.add, remove=body.remove))


@router.post("/tickets/{ticket_id}/hold", response_model=Ticket, summary="Pending / on hold",
             description="`pending`: waiting for the customer (cleared when they write); `on_hold`: waiting on "
                         "someone else; null: neither. The holder, or a supervisor.", responses=doc(403, 404, 409))
async def set_hold(ticket_id: UUID, body: HoldIn, call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.set_hold(agent, ticket_id, body.hold))


@router.get("/macros", response_model=MacroList, summary="Canned replies (macros) for your teams")
async def list_macros(call: CallerDep,
                      language: Annotated[str | None, Query(pattern=LANG_PATTERN)] = None) -> dict[str, Any]:
    return {"items": await call.run(lambda agent: call.svc.list_macros(agent, language=language))}


@router.put("/macros/{name}/{language}", response_model=MacroOut, summary="Create or replace a macro",
            description="Supervisors and admins.", responses=doc(403))
async def put_macro(name: MacroName, language: MacroLang, body: MacroIn, call: CallerDep) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.put_macro(agent, name, language, title=body.title,
                                                           body=body.body, team=body.team))


@router.delete("/macros/{name}/{language}", status_code=204, summary="Delete a macro",
               description="Supervisors and admins.", responses=doc(403, 404))
async def delete_macro(name: MacroName, language: MacroLang, call: CallerDep) -> Response:
    await call.run(lambda agent: call.svc.delete_macro(agent, name, language))
    return Response(status_code=204)


@router.get("/tickets/{ticket_id}/macros/{name}", response_model=RenderedOut, summary="A macro filled in for a ticket",
            description="In `language`, else the customer's language, else English.", responses=doc(403, 404, 409))
async def render_macro(ticket_id: UUID, name: MacroName, call: CallerDep,
                       language: Annotated[str | None, Query(pattern=LANG_PATTERN)] = None) -> dict[str, Any]:
    return await call.run(lambda agent: call.svc.render_macro(agent, ticket_id, name, language))


@router.get("/agents", response_model=ColleagueList, summary="Colleagues a ticket can be assigned to",
            description="Active agents who share a team with you (supervisors and admins: everyone). Assign "
                        "with `POST /v1/handoff/tickets/{id}/transfer` and `agent`.")
async def colleagues(call: CallerDep) -> dict[str, Any]:
    return {"items": await call.run(lambda agent: call.svc.assignable_agents(agent))}


@router.get("/tickets/{ticket_id}/pending-action", response_model=PendingOut,
            summary="The action a flow stopped at, waiting for a confirmation",
            description="E.g. a change of address the bot escalated before the customer's yes. null when nothing "
                        "waits.", responses=doc(403, 404))
async def pending_action(ticket_id: UUID, call: CallerDep) -> dict[str, Any]:
    return {"pending": await call.run(lambda agent: call.svc.pending_action(agent, ticket_id))}


@router.post("/tickets/{ticket_id}/pending-action/confirm", response_model=CompleteOut,
             summary="Confirm the stopped action for the customer, with your corrections",
             description="The holder only. The flow goes on as after the customer's yes: its tool runs in this "
                         "request under your identity (audited), and the customer gets the flow's reply, true to "
                         "the tool's real result. 409 when nothing waits any more; send an `Idempotency-Key` to "
                         "retry safely.", responses=doc(403, 404, 409, 503))
async def confirm_pending(ticket_id: UUID, body: CompleteIn, call: CallerDep, response: Response,
                          idempotency_key: IdemKey = None) -> dict[str, Any]:
    return replayed(response, await call.run(lambda agent: call.svc.complete_action(
        agent, ticket_id, instance_id=str(body.instance_id), arguments=body.arguments,
        idempotency_key=idempotency_key)))
