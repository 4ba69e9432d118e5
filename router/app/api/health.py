"""Liveness, readiness and metrics.

``/readyz`` is polled by load balancers and orchestrators every second or so, also while the
database is down, so it must be cheap and never hang: its verdict is computed at most once per
``CACHE_SECONDS`` (concurrent polls get the last verdict), it borrows a pooled connection with a
short wait instead of opening one, and during an outage it answers 503 at once. Check details name
what failed, never an exception text or a path (those go to the log).
"""

from __future__ import annotations

import logging
import threading
import time

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse

from router.app.api.deps import ServicesDep
from router.app.api.docs import access
from router.db import discover_migrations
from router.db.migrate import pending_on

log = logging.getLogger(__name__)
router = APIRouter(tags=["health"])

CACHE_SECONDS = 1.0
PROBE_TIMEOUT = 0.25   # seconds to wait for a pooled connection; longer means the pool cannot serve anyway


@router.get("/healthz", summary="The process is alive")
def healthz() -> dict:
    return {"status": "ok"}


class Readiness:
    """The cached verdict of one process's readiness checks."""

    def __init__(self, services):
        self.services = services
        self.migrations = discover_migrations()
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._verdict: tuple[bool, dict[str, dict]] | None = None

    def verdict(self) -> tuple[bool, dict[str, dict]]:
        now = time.monotonic()
        if self._verdict is not None and now - self._at < CACHE_SECONDS:
            return self._verdict
        if not self._lock.acquire(blocking=self._verdict is None):
            return self._verdict   # another poll is computing it: the last verdict will do
        try:
            if self._verdict is None or time.monotonic() - self._at >= CACHE_SECONDS:
                self._verdict = self._compute()
                self._at = time.monotonic()
            return self._verdict
        finally:
            self._lock.release()

    def _compute(self) -> tuple[bool, dict[str, dict]]:
        svc = self.services
        checks: dict[str, dict] = {}
        db_ok, mig_ok, mig_detail = False, False, "skipped: database unreachable"
        try:
            with svc.pool.connection(timeout=PROBE_TIMEOUT) as conn:
                db_ok = True
                pending = pending_on(conn, self.migrations)
                mig_ok = not pending
                mig_detail = "current" if mig_ok else "pending: " + ", ".join(
                    f"{m.version:04d}_{m.name}" for m in pending)
        except Exception as exc:  # noqa: BLE001 - any failure means not ready; the reason goes to the log
            log.warning("readiness: database check failed: %s", exc)
            if db_ok:
                mig_detail = "cannot read the migration ledger"
        checks["database"] = {"ok": db_ok, "detail": "ok" if db_ok else "unreachable"}
        checks["migrations"] = {"ok": mig_ok, "detail": mig_detail}
        enc = svc.encoder
        checks["encoder"] = {"ok": enc is not None, "detail": getattr(enc, "name", None) or "not loaded"}
        for name, fn in svc.readiness.items():
            if not db_ok:   # most checks read the database: do not wait on it a second time
                checks[name] = {"ok": False, "detail": "skipped: database unreachable"}
                continue
            try:
                ok, detail = fn()
            except Exception as exc:  # noqa: BLE001
                log.warning("readiness: check %s failed: %s", name, exc, exc_info=True)
                ok, detail = False, "check failed"
            checks[name] = {"ok": ok, "detail": detail}
        return all(c["ok"] for c in checks.values()), checks


def tools_mode(services) -> str:
    """What this gateway's tools reach: ``off``, ``sandbox`` (declared by settings.tools_sandbox) or ``live``.
    Evaluation clients read it before they send anything (they never write to a real shop)."""
    if getattr(services, "tools", None) is None:
        return "off"
    return "sandbox" if services.settings.tools_sandbox else "live"


def _readiness(services) -> Readiness:
    found = getattr(services, "_readiness_cache", None)
    if found is None:
        found = Readiness(services)
        services._readiness_cache = found
    return found


@router.get("/readyz", summary="Database reachable, schema current, models loaded, indexes open",
            responses={503: {"description": "Not ready; the failing checks are listed"}})
def readyz(services: ServicesDep) -> JSONResponse:
    ready, checks = _readiness(services).verdict()
    body = {"status": "ready" if ready else "not ready", "checks": checks, "tools": tools_mode(services)}
    if not ready:
        body.update({"type": "about:blank", "title": "Service Unavailable", "status": 503,
                     "detail": "Failing checks: " + ", ".join(k for k, c in checks.items() if not c["ok"])})
        return JSONResponse(body, status_code=503, media_type="application/problem+json",
                            headers={"Retry-After": str(services.settings.db_retry_after)})
    return JSONResponse(body)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response,
            dependencies=[Depends(access("metrics_access"))],
            responses={401: {"description": "No valid integration key or agent token (SWITCHBOARD_METRICS_ACCESS="
                                            "authenticated, the default)"},
                       404: {"description": "Not served (SWITCHBOARD_METRICS_ACCESS=off)"}})
def metrics(services: ServicesDep) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST

    services.metrics.refresh_from_database(services.pool)
    return Response(services.metrics.render(), media_type=CONTENT_TYPE_LATEST)
