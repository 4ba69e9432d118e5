"""RFC 9457 problem details for every error the API returns (never an HTML page, never a bare 500)."""

from __future__ import annotations

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from failures.problem import PROBLEM_JSON, problem_response
from router.db.errors import DatabaseUnavailable, classify
from router.telemetry.logs import request_id_var

log = logging.getLogger(__name__)
__all__ = ["PROBLEM_JSON", "Problem", "problem_response", "install_problem_handlers"]


class Problem(Exception):
    """Raise anywhere in a request to answer with a problem document."""

    def __init__(self, status: int, detail: str, *, title: str | None = None, type_: str = "about:blank", **extra):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or HTTPStatus(status).phrase
        self.type = type_
        self.extra = extra


def _rid() -> str | None:
    """The request id the middleware set for this request (None outside one)."""
    return request_id_var.get()


def install_problem_handlers(app: FastAPI, *, retry_after: int) -> None:
    """Answer errors as problem documents; a lost database is a 503 with ``Retry-After: retry_after`` seconds."""
    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem):
        return problem_response(exc.status, exc.detail, title=exc.title, type_=exc.type,
                                instance=request.url.path, request_id=_rid(), **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")}
            for e in exc.errors()
        ]
        return problem_response(422, "The request body or parameters are malformed.", instance=request.url.path,
                                request_id=_rid(), errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            # FastAPI's answer to a body it cannot decode (e.g. invalid UTF-8): malformed input, 422 like
            # every other malformed body
            return problem_response(422, "The request body is not valid UTF-8 JSON.", instance=request.url.path,
                                    request_id=_rid())
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        return problem_response(exc.status_code, detail, instance=request.url.path, request_id=_rid(),
                                headers=getattr(exc, "headers", None))

    @app.exception_handler(DatabaseUnavailable)
    async def _database(request: Request, exc: DatabaseUnavailable):
        return database_unavailable_response(request.url.path, exc, str(retry_after))

    # Anything else unforeseen is answered by UnhandledErrorMiddleware (router/middleware.py): it runs
    # inside the request-id middleware, so the 500 keeps its X-Request-ID and is logged once.


def database_unavailable_response(path: str, exc: DatabaseUnavailable, retry_after: str) -> JSONResponse:
    """503 with Retry-After: the client (or channel) retries the same message id later; nothing was stored."""
    log.warning("database unavailable on %s (%s)", path, exc.cause, extra={"request_id": request_id_var.get()})
    return problem_response(503, "The database is unavailable; retry later with the same message id.",
                            title="Service Unavailable", instance=path, request_id=_rid(),
                            headers={"Retry-After": retry_after})


NUL_DETAIL = "Text may not contain the NUL character (U+0000)."


def holds_nul(exc: BaseException) -> bool:
    """Postgres text cannot hold U+0000, and psycopg refuses such a value before sending it: whichever field
    carried it, the request was malformed (the OpenAPI says so for every request string). In a JSON value it
    reaches the server as an escape the server refuses."""
    import psycopg

    if isinstance(exc, psycopg.errors.UntranslatableCharacter):     # inside JSON: "\u0000 cannot be converted"
        return "\\u0000" in str(exc)
    return isinstance(exc, psycopg.DataError) and "NUL (0x00)" in str(exc)


def unexpected_response(path: str, exc: BaseException, retry_after: str) -> JSONResponse:
    """The answer to an exception no route handled: 503 if it is a lost database, else a logged 500."""
    mapped = classify(exc)
    if mapped is not None:
        return database_unavailable_response(path, mapped, retry_after)
    if holds_nul(exc):
        return problem_response(422, NUL_DETAIL, instance=path, request_id=_rid())
    log.error("unhandled error on %s", path, exc_info=exc, extra={"request_id": request_id_var.get()})
    return problem_response(500, "An unexpected error occurred; it has been logged with this request id.",
                            instance=path, request_id=_rid())
