"""The whole gateway as `make run` serves it (the bundled intents on the e5 classifier, the knowledge base's test
topics, the workflows and the example shop over MCP) on a fresh database: ``svc`` and its HTTP client ``api``, for
the conversation tests of this folder. A test module that needs another wiring defines its own ``svc``."""

from __future__ import annotations

import pytest

from routing_kit import api_client, flow_services


@pytest.fixture
def svc(fresh_db, pg_server, template_dsn, e5_encoder):
    s = flow_services(fresh_db, pg_server, template_dsn, e5_encoder)
    yield s
    s.close()


@pytest.fixture
def api(svc):
    with api_client(svc) as c:
        yield c
