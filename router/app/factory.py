"""The FastAPI app factory: the HTTP face of the composition root."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool

from router.app.api import health, messages
from router.app.api.docs import install_docs
from router.app.api.openapi import install_links
from router.app.middleware import (
    BodySizeLimitMiddleware,
    RequestIdMiddleware,
    RequestMetricsMiddleware,
    UnhandledErrorMiddleware,
)
from router.telemetry.logs import configure_logging
from router.turn.pipeline import Pipeline
from router.problems import install_problem_handlers
from router.app.composition import build_services
from router.app.services import Services
from router.app.settings import Settings, get_settings

log = logging.getLogger(__name__)


def _finish_wiring(services: Services) -> None:
    if services.pipeline is None:
        from router.app.composition import conversation_owner
        from router.turn.admission import Admission
        from router.turn.escalation import load_policy
        from router.turn.passes import pass_slots

        quota = load_policy(services.settings.policy_file).harness.quota
        services.pipeline = Pipeline(services.pool, services.metrics, owner=conversation_owner(services.settings),
                                     admission=Admission(services.pool, quota, services.metrics),
                                     pass_slots=pass_slots(services.settings.db_pool_max))


def announce_dev_key(services: Services) -> None:
    """``make run``'s local integration key: created and printed once; beyond loopback only when explicitly allowed
    (router/app/exposure.py)."""
    from router.app.exposure import refusal
    from router.app.keys import ensure_dev_key

    why = refusal(services.settings)
    if why is not None:
        raise RuntimeError(f"SWITCHBOARD_DEV_KEY is for development on loopback: {why}; issue keys with "
                           "`switchboard keys issue`")
    with services.pool.connection() as conn:
        key, path, created = ensure_dev_key(conn, services.settings.home)
    if created:
        print(f"\n  development integration key (web, app): {key}\n  saved in {path}; send it as "
              f"'Authorization: Bearer <key>'\n", flush=True)
    else:
        log.info("development integration key in %s", path)


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> FastAPI:
    """Build the app. Given ``services`` (tests, embedding), it uses them and does not close them;
    otherwise it builds them at start-up and closes them at shutdown."""
    settings = settings or (services.settings if services else get_settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        from router.app.exposure import check

        check(settings)      # warns about what is open; refuses it beyond loopback unless allowed
        owned = services is None
        svc = services or await run_in_threadpool(build_services, settings)
        _finish_wiring(svc)
        app.state.services = svc
        if settings.dev_key:
            await run_in_threadpool(announce_dev_key, svc)
        log.info("switchboard ready", extra={"fields": {"host": settings.host, "port": settings.port}})
        try:
            yield
        finally:
            if owned:
                await run_in_threadpool(svc.close)

    app = FastAPI(
        title="switchboard",
        version="0.1.0",
        summary="Three-tier routing gateway for customer service.",
        lifespan=lifespan,
        docs_url=None, redoc_url=None, openapi_url=None,   # router/app/api/docs.py: behind authentication
    )
    app.state.settings = settings
    install_problem_handlers(app, retry_after=settings.db_retry_after)

    app.add_middleware(UnhandledErrorMiddleware, retry_after=settings.db_retry_after)
    app.add_middleware(RequestMetricsMiddleware)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes,
                       read_timeout=settings.read_timeout_seconds)
    app.add_middleware(RequestIdMiddleware)  # outermost: every response, even a 413, carries the id

    install_links(app)
    install_docs(app, settings.api_docs)
    app.include_router(health.router)
    app.include_router(messages.router)
    _include_capabilities(app)
    return app


def handoff_of(request: Request):
    """The app's handoff service (None when the queue is not wired)."""
    return getattr(request.app.state.services, "handoff", None)


def _include_capabilities(app: FastAPI) -> None:
    """Routes contributed by the other capabilities (handoff, channels, conversations, console)."""
    import handoff.api

    from router.app.api import channels, conversations
    from router.app.api.console import router as console_router

    handoff.api.mount(app, handoff_of)
    for extra in (channels.router, conversations.router, console_router):
        app.include_router(extra)


def main_app() -> FastAPI:
    """Entry for ``uvicorn router.app.factory:main_app --factory``."""
    settings = get_settings()
    configure_logging(settings.log_level, settings.log_json)
    return create_app(settings)
