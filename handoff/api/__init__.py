"""The agent-facing HTTP API under ``/v1/handoff``: one module-level router per resource.

handoff does not import the gateway: the app calls :func:`mount` with ``get_service(request)`` that
returns the :class:`~handoff.service.HandoffService` it built, and the routes find it through the
``ServiceDep``/``CallerDep`` dependencies of :mod:`handoff.api.deps` (which also hold the one auth
dependency and the one problem mapper).

Authentication is a Bearer token (``switchboard tokens issue``). Agents see and claim only
their teams' tickets; supervisors and admins see every team.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from handoff.api import desk, events, queue, reveal, tickets
from handoff.api.deps import (
    STATE_KEY,
    AgentDep,
    Caller,
    CallerDep,
    ProblemRoute,
    ServiceDep,
    ServiceGetter,
    agent_dependency,
    handoff_problem,
    require_roles,
)

# Every resource's router, in the order the app includes them. A further handoff resource (its own
# module with its own APIRouter on ProblemRoute) joins this list.
ROUTERS: list[APIRouter] = [queue.router, tickets.router, events.router, reveal.router, desk.router]

__all__ = [
    "ROUTERS", "AgentDep", "Caller", "CallerDep", "ProblemRoute", "ServiceDep", "ServiceGetter",
    "agent_dependency", "handoff_problem", "mount", "require_roles",
]


def mount(app: FastAPI, get_service: ServiceGetter) -> None:
    """Serve the handoff API on ``app``; ``get_service(request)`` returns the app's HandoffService (or None: 503)."""
    setattr(app.state, STATE_KEY, get_service)
    for router in ROUTERS:
        app.include_router(router)
