"""RFC 9457 problem details: the one shape of every error answer (``application/problem+json``)."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from starlette.responses import JSONResponse

PROBLEM_JSON = "application/problem+json"


def problem_body(status: int, detail: str, *, title: str | None = None, type_: str = "about:blank",
                 instance: str | None = None, request_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """The document: type, title (the status's phrase unless given), status, detail, then instance, the
    request id (so a report can be matched to the logs) and any extension members."""
    body: dict[str, Any] = {"type": type_, "title": title or HTTPStatus(status).phrase, "status": status,
                            "detail": detail}
    if instance:
        body["instance"] = instance
    if request_id:
        body["request_id"] = request_id
    body.update(extra)
    return body


def problem_response(status: int, detail: str, *, title: str | None = None, type_: str = "about:blank",
                     instance: str | None = None, request_id: str | None = None,
                     headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    """A problem document as a response with its media type (and e.g. ``WWW-Authenticate``, ``Retry-After``)."""
    body = problem_body(status, detail, title=title, type_=type_, instance=instance, request_id=request_id,
                        **extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)
