"""Integration keys for the tests that call the direct API (``Authorization: Bearer <key>``)."""

from __future__ import annotations

import uuid

import psycopg
from psycopg.rows import dict_row

from router.app.keys import issue_key


def issue_integration_key(pool_or_dsn, channels=("web", "app"), name: str | None = None) -> str:
    """A real integration key for ``channels``, stored in the test's database."""
    name = name or f"test-{uuid.uuid4().hex[:8]}"
    if isinstance(pool_or_dsn, str):
        with psycopg.connect(pool_or_dsn, row_factory=dict_row) as conn:
            return issue_key(conn, name, list(channels))[0]
    with pool_or_dsn.connection() as conn:
        return issue_key(conn, name, list(channels))[0]


def authorize(test_client, pool_or_dsn, channels=("web", "app")) -> str:
    """Make ``test_client`` send a fresh integration key with every request; returns the key."""
    key = issue_integration_key(pool_or_dsn, channels)
    test_client.headers["Authorization"] = f"Bearer {key}"
    return key
