"""Shared set-up for the routing tests: the real gateway (classifier, knowledge base, handoff, router)
on a database of the test's own, with the knowledge base indexed once per run.

Indexing is the expensive part (every chunk through the multilingual encoder), so a small
bilingual slice of the bundled sample knowledge base is indexed once into a template database
(and one tantivy directory, only ever read afterwards); each test then gets a fresh copy of
that database with ``CREATE DATABASE ... TEMPLATE`` and nothing leaks between tests.
"""

from __future__ import annotations

import atexit
from contextlib import contextmanager
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import psycopg

from rag.service import SAMPLE_KB

# a bilingual slice of the sample knowledge base: each topic in English and Chinese
KB_TOPICS = ("refund-timelines", "invoice-electronic", "order-tracking", "password-reset", "return-process",
             "payment-methods", "shipping-times", "coupons")

_templates: dict[tuple, tuple[str, Path, Path]] = {}
_classifiers: dict[str, Any] = {}


def _with_db(uri: str, db: str) -> str:
    base, _, query = uri.partition("?")
    base = base.rsplit("/", 1)[0]
    return f"{base}/{db}" + (f"?{query}" if query else "")


def _settings(home: Path, dsn: str, encoder, kb_dir: Path, **overrides):
    from router.app.settings import Settings

    return Settings(home=home, database_url=dsn, embedding_model=str(encoder.path), knowledge_dir=kb_dir,
                    load_sample_kb=False, log_json=False, dispatcher_enabled=False, **overrides)


def classifier_for(encoder, home: Path) -> Any:
    """The bundled intents on ``encoder``, built as wire_classifier builds it, once per encoder (fitting is slow)."""
    from router.classify import IntentClassifier
    from router.classify.intents import BUNDLED_INTENTS, load_intents

    key = str(encoder.path)
    if key not in _classifiers:
        _classifiers[key] = IntentClassifier.from_config(load_intents(BUNDLED_INTENTS), encoder,
                                                         cache_dir=home / "cache" / "heads")
    return _classifiers[key]


def kb_template(pg_uri: str, template_db: str, encoder, topics: tuple[str, ...] | None = KB_TOPICS
                ) -> tuple[str, Path, Path]:
    """(template database name, shared home, knowledge folder) with the KB slice indexed (``topics``;
    None: the whole bundled pack, as ``make run`` serves it).

    The home holds the tantivy index of that generation; tests only read it.
    """
    from router.app.composition import make_knowledge_base
    from router.db import open_pool

    key = (pg_uri, str(encoder.path), topics)
    if key in _templates:
        return _templates[key]
    home = Path(tempfile.mkdtemp(prefix="sbkb-"))
    atexit.register(shutil.rmtree, home, True)
    kb_dir = home / "kb"
    kb_dir.mkdir()
    if topics is None:
        for path in SAMPLE_KB.glob("*.md"):
            shutil.copy(path, kb_dir)
    else:
        for topic in topics:
            for lang in ("en", "zh"):
                shutil.copy(SAMPLE_KB / f"{topic}-{lang}.md", kb_dir)
    if (SAMPLE_KB / "glossary.yaml").exists():
        shutil.copy(SAMPLE_KB / "glossary.yaml", kb_dir)
    if topics is None and (SAMPLE_KB / "calibration.yaml").exists():
        shutil.copy(SAMPLE_KB / "calibration.yaml", kb_dir)      # the whole pack's own fit (a slice is another pack)
    name = f"kbt_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_with_db(pg_uri, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    dsn = _with_db(pg_uri, name)
    pool = open_pool(dsn, min_size=1, max_size=2)
    try:
        kb = make_knowledge_base(_settings(home, dsn, encoder, kb_dir), pool, encoder)
        kb.rebuild(kb_dir)
        # the answer lines' vectors go into the template's embedding cache: every copy's warm-up (wire_rag warms
        # in the background) reads them instead of encoding the whole pack again
        kb.warm()
    finally:
        pool.close()
    _templates[key] = (name, home, kb_dir)
    return _templates[key]


def template_knowledge_base(pool, template: tuple[str, Path, Path], encoder) -> Any:
    """A KnowledgeBase as production wires it (make_knowledge_base: the folder's glossary and calibration,
    tantivy in the template's home) on ``pool``, a copy of the ``kb_template`` database, warmed from its
    stored vectors."""
    from router.app.composition import make_knowledge_base

    _, home, kb_dir = template
    kb = make_knowledge_base(_settings(home, pool.conninfo, encoder, kb_dir), pool, encoder)
    kb.warm()
    return kb


def routing_services(dsn: str, home: Path, encoder, kb_dir: Path, *, flows: bool = False, **settings_overrides):
    """Services wired like production (classifier, KB, handoff with the state port, router) on ``dsn``.

    Only the encoder and the classifier (fitted once per run) are handed in; the rest is the
    composition root's own wiring. The outbox dispatcher stays off: tests read the outbox rows.
    ``flows``: also the tool gateway and the workflow engine (the example shop over MCP stdio).
    """
    from router.app.composition import build_services, wire_flows, wire_handoff, wire_rag, wire_router

    svc = build_services(_settings(home, dsn, encoder, kb_dir, **settings_overrides), load_models=False)
    svc.encoder = encoder
    svc.classifier = classifier_for(encoder, home)
    wire_handoff(svc)
    if flows:
        wire_flows(svc)
    wire_rag(svc)
    wire_router(svc)
    return svc


def make_agent(pool, name: str, *, role: str = "agent", approval_level: str | None = None):
    """A real handoff agent with a token: returns (Agent, token)."""
    from handoff import agents as agent_store

    with pool.connection() as conn:
        agent_store.add_agent(conn, name, role=role, teams=("general",), approval_level=approval_level, actor="test")
        token, _ = agent_store.issue_token(conn, name, label="test", actor="test")
        agent = agent_store.authenticate(conn, token)
    return agent, token


def rows(pool, sql: str, *params) -> list[dict[str, Any]]:
    with pool.connection() as conn:
        return conn.execute(sql, params).fetchall()


def ticket_memory(svc, ticket_id, *, timeout: float = 60.0) -> dict[str, Any]:
    """The ticket's context package once its session memory is no longer ``pending``, read as an agent's screen
    reads it (``get_ticket``, again while it is pending: the first read starts the load); fails when it is
    still pending after ``timeout`` s."""
    import time
    import uuid

    agent, _ = make_agent(svc.pool, f"reader-{uuid.uuid4().hex[:8]}", role="supervisor")
    deadline = time.monotonic() + timeout
    while True:
        context = svc.handoff.get_ticket(agent, ticket_id)["context"]
        if context.get("memory_status") != "pending":
            return context
        assert time.monotonic() < deadline, f"the memory of ticket {ticket_id} is still pending"
        time.sleep(0.05)


def flow_services(fresh_db, pg_server, template_dsn, encoder, *, topics: tuple[str, ...] | None = KB_TOPICS,
                  **settings_overrides):
    """routing_services with the workflows and the example shop wired, on a fresh copy of the KB template
    (``topics``: the slice of the bundled pack; None: all of it)."""
    _, uri = pg_server
    template_name = psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"]
    name, home, kb_dir = kb_template(uri, template_name, encoder, topics)
    svc = routing_services(fresh_db(name), home, encoder, kb_dir, flows=True, **settings_overrides)
    assert svc.flows is not None, "the bundled tools and workflows must load"
    return svc


@contextmanager
def api_client(svc):
    """The gateway's app over ``svc`` in a TestClient that sends a valid integration key."""
    from fastapi.testclient import TestClient

    from keys_testkit import authorize
    from router.app.factory import create_app

    with TestClient(create_app(services=svc)) as client:
        authorize(client, svc.pool)
        yield client
