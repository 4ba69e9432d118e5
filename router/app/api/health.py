"""Liveness, readiness and metrics."""

from __future__ import annotations

import psycopg
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from router.app.api.deps import ServicesDep
from router.db import pending_migrations

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process is alive")
def healthz() -> dict:
    return {"status": "ok"}


def _check_database(services) -> tuple[bool, str]:
    try:
        with psycopg.connect(services.dsn, connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        return False, f"unreachable: {type(exc).__name__}"
    return True, "ok"


def _check_migrations(services) -> tuple[bool, str]:
    try:
        pending = pending_migrations(services.dsn)
    except Exception as exc:  # noqa: BLE001
        return False, f"cannot read migrations: {type(exc).__name__}: {exc}"
    if pending:
        return False, "pending: " + ", ".join(f"{m.version:04d}_{m.name}" for m in pending)
    return True, "current"


@router.get("/readyz", summary="Database reachable, schema current, models loaded, indexes open",
            responses={503: {"description": "Not ready; the failing checks are listed"}})
def readyz(services: ServicesDep) -> JSONResponse:
    checks: dict[str, dict] = {}
    ok, detail = _check_database(services)
    checks["database"] = {"ok": ok, "detail": detail}
    if ok:
        ok, detail = _check_migrations(services)
    else:
        ok, detail = False, "skipped: database unreachable"
    checks["migrations"] = {"ok": ok, "detail": detail}
    enc = services.encoder
    checks["encoder"] = {"ok": enc is not None, "detail": getattr(enc, "name", None) or "not loaded"}
    for name, fn in services.readiness.items():
        try:
            ok, detail = fn()
        except Exception as exc:  # noqa: BLE001
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        checks[name] = {"ok": ok, "detail": detail}
    ready = all(c["ok"] for c in checks.values())
    body = {"status": "ready" if ready else "not ready", "checks": checks}
    if not ready:
        body.update({"type": "about:blank", "title": "Service Unavailable", "status": 503,
                     "detail": "Failing checks: " + ", ".join(k for k, c in checks.items() if not c["ok"])})
        return JSONResponse(body, status_code=503, media_type="application/problem+json")
    return JSONResponse(body)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(services: ServicesDep) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    services.metrics.refresh_from_database(services.pool)
    return Response(services.metrics.render(), media_type=CONTENT_TYPE_LATEST)
