"""The API's own description (``/openapi.json``, ``/docs``) and who may read it and ``/metrics``.

By default both need a Bearer credential of either kind the gateway issues: an integration key or an agent
token (``authenticated``); ``public`` serves them to anyone (a Prometheus inside the cluster, a developer's
loopback), ``off`` not at all (404). Swagger UI's script and stylesheet are served from this server (the
``swagger-ui-bundle`` package), never from a CDN; ReDoc, which has no such package, is not served.
"""

from __future__ import annotations

import hashlib
import time

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from router.app.api.auth import unauthorized
from router.app.keys import authenticate_key
from router.problems import Problem

ASSETS = "/docs/assets"


def _valid(conn, token: str) -> bool:
    from handoff.agents import authenticate

    return authenticate_key(conn, token) is not None or authenticate(conn, token) is not None


#: a credential found valid is trusted for this long without the database, so a scrape during a database
#: outage still answers (a revoked key keeps reading metrics and docs at most this long)
TRUSTED_SECONDS = 300.0
_trusted: dict[str, float] = {}


async def require_reader(request: Request) -> None:
    """Any valid integration key or agent token (``Authorization: Bearer ...``); 401 otherwise."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 200:
        raise unauthorized("This endpoint needs an integration key or an agent token: Authorization: Bearer ...")
    digest = hashlib.sha256(token.encode()).hexdigest()
    now = time.monotonic()
    if _trusted.get(digest, 0.0) > now:
        return
    pool = request.app.state.services.pool
    if not await run_in_threadpool(pool.run, lambda conn: _valid(conn, token)):
        raise unauthorized("The key or token is unknown, revoked or expired.")
    if len(_trusted) > 1000:
        _trusted.clear()
    _trusted[digest] = now + TRUSTED_SECONDS


def access(setting: str):
    """The dependency that enforces an access setting (``authenticated`` | ``public`` | ``off``)."""
    async def check(request: Request) -> None:
        mode = getattr(request.app.state.settings, setting)
        if mode == "off":
            raise Problem(404, "Not served on this gateway.", title="Not Found")
        if mode == "authenticated":
            await require_reader(request)
    return check


def install_docs(app: FastAPI, mode: str) -> None:
    """``/openapi.json`` and ``/docs`` per ``mode`` (the app is built with FastAPI's own docs routes off)."""
    if mode == "off":
        return
    guard = [Depends(access("api_docs"))]

    @app.get("/openapi.json", include_in_schema=False, dependencies=guard)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=guard)
    async def swagger_ui():
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - API",
                                   swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS}/favicon-32x32.png")

    import swagger_ui_bundle

    # Swagger UI's own files (nothing of this gateway): public, so the page loads once its request was allowed
    app.mount(ASSETS, StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="swagger-ui-assets")
