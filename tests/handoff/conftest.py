"""Fixtures for the queue: a real service on this test's own database, agents with tokens, and a
small real conversation port that records what the queue told it in a table of the test DB."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from handoff import agents as agent_store
from handoff.models import Agent
from handoff.service import HandoffService
from handoff_testkit import PORT_TABLE, TablePort, make_config


@pytest.fixture
def port(pool) -> TablePort:
    with pool.connection() as conn:
        conn.execute(PORT_TABLE)
    return TablePort()


@pytest.fixture
def hs(pool, port) -> HandoffService:
    return HandoffService(pool, port, make_config())


@pytest.fixture
def make_agent(pool) -> Callable[..., tuple[Agent, str]]:
    """Create an agent and a token for it: returns (Agent, plaintext token)."""

    def make(name: str, role: str = "agent", teams=("general",), skills=(), approval_level=None):
        with pool.connection() as conn:
            agent_store.add_agent(conn, name, role=role, teams=teams, skills=skills, approval_level=approval_level,
                                  actor="test")
            token, _ = agent_store.issue_token(conn, name, label="test", actor="test")
            agent = agent_store.authenticate(conn, token)
        assert agent is not None
        return agent, token

    return make


@pytest.fixture
def conversation(pool) -> Callable[..., str]:
    """Insert a conversation row (as the router would); returns its id."""

    def make(channel: str = "web", customer_id: str = "u1", state: str = "l3_queuing") -> str:
        with pool.connection() as conn:
            row = conn.execute(
                "INSERT INTO conversations (channel, external_id, customer_id, state) VALUES (%s, %s, %s, %s) "
                "RETURNING id",
                (channel, f"c-{uuid.uuid4().hex[:10]}", customer_id, state),
            ).fetchone()
        return str(row["id"])

    return make


@pytest.fixture
def open_ticket(pool, hs, conversation) -> Callable[..., dict[str, Any]]:
    """Open a ticket through the service in its own transaction (as the router does within a turn)."""

    def make(service: HandoffService | None = None, **kw) -> dict[str, Any]:
        svc = service or hs
        conv_id = kw.pop("conversation_id", None) or conversation()
        args = {"kind": "handoff", "channel": "web", "customer_id": "u1", "reason": "asks_for_human",
                "context": {"transcript": [{"sender": "customer", "text": "I want a human"}]}}
        args.update(kw)
        with pool.connection() as conn, conn.transaction():
            return svc.open_ticket(conn, conversation_id=conv_id, **args)

    return make


@pytest.fixture
def api(services, port):
    """The real gateway app (middleware, problem handlers) with the queue wired on this test's database."""
    from fastapi.testclient import TestClient

    from router.app.factory import create_app

    services.handoff = HandoffService(services.pool, port, make_config())
    with TestClient(create_app(services=services)) as client:
        yield client
