"""OpenAPI links, so a stateful client (schemathesis) follows a claimed ticket into its actions and a
message answer into its feedback, as a person would; and the channel names the webhook paths accept."""

from __future__ import annotations

import re

from fastapi import FastAPI

from router.problems import PROBLEM_JSON

TICKET_PREFIX = "/v1/handoff/tickets/{ticket_id}"


def _links(spec: dict) -> None:
    paths = spec.get("paths", {})
    claim = paths.get("/v1/handoff/claim-next", {}).get("post")
    if claim is not None:
        links = {}
        for path, ops in paths.items():
            rest = path[len(TICKET_PREFIX):]
            # a link gives only the ticket id: paths with further parameters (a macro's name) are left out
            if not path.startswith(TICKET_PREFIX) or path.endswith("/events") or "{" in rest:
                continue
            for method, op in ops.items():
                name = (rest.strip("/") or "get") + ("" if method in ("get", "post") else method)
                links[re.sub(r"[^A-Za-z0-9._]", "_", name)] = {
                    "operationId": op["operationId"],
                    "parameters": {"ticket_id": "$response.body#/id"},
                    "description": f"{method.upper()} {path} on the claimed ticket",
                }
        claim.setdefault("responses", {}).setdefault("200", {"description": "The claimed ticket"})["links"] = links
    feedback = paths.get("/v1/conversations/{conversation_id}/feedback", {}).get("post")
    message = paths.get("/v1/messages", {}).get("post")
    if feedback is not None and message is not None:
        message["responses"]["200"]["links"] = {"feedback": {
            "operationId": feedback["operationId"],
            "parameters": {"conversation_id": "$response.body#/conversation_id",
                           "header.X-Conversation-Token": "$response.body#/feedback_token"},
            "description": "Rate the conversation with the answer's feedback_token.",
        }}


def _channels(spec: dict) -> None:
    """The ``{channel}`` of the webhook paths is one of the registry's channels (any other is 404), and only
    the channels with a verification handshake answer its GET (the others 405): the schema says so."""
    from router.channels.registry import ADAPTERS, handshake_channels

    for path, ops in spec.get("paths", {}).items():
        if "{channel}" not in path:
            continue
        for method, op in ops.items():
            names = list(handshake_channels() if method == "get" else ADAPTERS)
            for param in op.get("parameters", []):
                if param.get("in") == "path" and param.get("name") == "channel":
                    param["schema"] = {**param.get("schema", {}), "type": "string", "enum": names}


def _constraints(spec: dict) -> None:
    """Rules the models check in code, stated in the schema (a transfer names a team, an agent, or both)."""
    transfer = spec.get("components", {}).get("schemas", {}).get("TransferIn")
    if transfer is not None:
        transfer["anyOf"] = [{"required": [name], "properties": {name: {"type": "string"}}}
                             for name in ("team", "agent")]


def _absent_not_null(spec: dict) -> None:
    """A query or header parameter is left out, never sent as null: FastAPI writes ``str | None`` as
    ``anyOf [string, null]``, and a client following the schema would send the text "null" (a 422)."""
    for ops in spec.get("paths", {}).values():
        for op in ops.values():
            for param in op.get("parameters", []):
                schema = param.get("schema", {})
                branches = [b for b in schema.get("anyOf", ()) if b != {"type": "null"}]
                if len(branches) == 1 and len(schema["anyOf"]) == 2:
                    rest = {k: v for k, v in schema.items() if k != "anyOf"}
                    param["schema"] = {**branches[0], **rest}


def _problem_documents(spec: dict) -> None:
    """Every error answer is an RFC 9457 problem document (router.problems): FastAPI's default 422 says
    application/json with its own validation-error shape, and the handoff errors list both media types."""
    problem = ({"$ref": "#/components/schemas/ProblemOut"}
               if "ProblemOut" in spec.get("components", {}).get("schemas", {}) else {})
    for ops in spec.get("paths", {}).values():
        for op in ops.values():
            for code, response in op.get("responses", {}).items():
                content = response.get("content")
                if code[0] in "45" and content and set(content) <= {"application/json", PROBLEM_JSON}:
                    response["content"] = {PROBLEM_JSON: {"schema": problem}}


NO_NUL = r"^[^\x00]*$"


def _no_nul(spec: dict) -> None:
    """No request string may hold U+0000 (Postgres text cannot; router.problems.holds_nul answers 422): said on
    every request string that has no pattern of its own (the patterns in the code exclude it themselves)."""
    components = spec.get("components", {}).get("schemas", {})
    seen: set[str] = set()

    def walk(schema):
        if isinstance(schema, list):
            for item in schema:
                walk(item)
            return
        if not isinstance(schema, dict):
            return
        ref = schema.get("$ref", "")
        if ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[1]
            if name not in seen:
                seen.add(name)
                walk(components.get(name))
            return
        if schema.get("type") == "string" and not {"pattern", "enum", "const", "format"} & set(schema):
            schema["pattern"] = NO_NUL
        for key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
            walk(schema.get(key))
        walk(list((schema.get("properties") or {}).values()))

    for ops in spec.get("paths", {}).values():
        for op in ops.values():
            for param in op.get("parameters", []):
                walk(param.get("schema"))
            for media in (op.get("requestBody", {}).get("content") or {}).values():
                walk(media.get("schema"))


def install_links(app: FastAPI) -> None:
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            spec = build()
            _links(spec)
            _channels(spec)
            _constraints(spec)
            _absent_not_null(spec)
            _problem_documents(spec)
            _no_nul(spec)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi
