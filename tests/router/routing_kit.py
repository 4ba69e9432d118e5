"""Shared set-up for the routing tests: the real gateway (classifier, knowledge base, handoff, router)
on a database of the test's own, with the knowledge base indexed once per run.

Indexing is the expensive part (every chunk through the multilingual encoder), so a small
bilingual slice of the bundled sample knowledge base is indexed once into a template database
(and one tantivy directory, only ever read afterwards); each test then gets a fresh copy of
that database with ``CREATE DATABASE ... TEMPLATE`` and nothing leaks between tests.
"""

from __future__ import annotations

import atexit
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

_templates: dict[tuple[str, str], tuple[str, Path, Path]] = {}
_classifiers: dict[str, Any] = {}


def _with_db(uri: str, db: str) -> str:
    base, _, query = uri.partition("?")
    base = base.rsplit("/", 1)[0]
    return f"{base}/{db}" + (f"?{query}" if query else "")


def classifier_for(encoder) -> Any:
    """The bundled intents with both channels on ``encoder`` (built once per encoder)."""
    from router.classify import IntentClassifier
    from router.intents import BUNDLED_INTENTS, load_intents

    key = str(encoder.path)
    if key not in _classifiers:
        _classifiers[key] = IntentClassifier.from_config(load_intents(BUNDLED_INTENTS), encoder)
    return _classifiers[key]


def kb_template(pg_uri: str, template_db: str, encoder) -> tuple[str, Path, Path]:
    """(template database name, tantivy root, knowledge folder) with the KB slice indexed."""
    from rag.lexical.tantivy import TantivyIndex
    from rag.service import knowledge_base_from
    from router.db import open_pool

    key = (pg_uri, str(encoder.path))
    if key in _templates:
        return _templates[key]
    root = Path(tempfile.mkdtemp(prefix="sbkb-"))
    atexit.register(shutil.rmtree, root, True)
    kb_dir = root / "kb"
    kb_dir.mkdir()
    for topic in KB_TOPICS:
        for lang in ("en", "zh"):
            shutil.copy(SAMPLE_KB / f"{topic}-{lang}.md", kb_dir)
    if (SAMPLE_KB / "glossary.yaml").exists():
        shutil.copy(SAMPLE_KB / "glossary.yaml", kb_dir)
    name = f"kbt_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_with_db(pg_uri, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    pool = open_pool(_with_db(pg_uri, name), min_size=1, max_size=2)
    try:
        kb = knowledge_base_from(pool, encoder, TantivyIndex(root / "index"), knowledge_dir=kb_dir)
        kb.rebuild(kb_dir)
    finally:
        pool.close()
    _templates[key] = (name, root / "index", kb_dir)
    return _templates[key]


def routing_services(dsn: str, home: Path, encoder, index_root: Path, kb_dir: Path, **settings_overrides):
    """Services wired like production (classifier, KB, handoff with the state port, router) on ``dsn``."""
    from rag.lexical.tantivy import TantivyIndex
    from rag.service import knowledge_base_from
    from router.composition import wire_handoff, wire_router
    from router.services import build_services
    from router.settings import Settings

    settings = Settings(home=home, database_url=dsn, embedding_model=str(encoder.path), load_sample_kb=False,
                        log_json=False, **settings_overrides)
    svc = build_services(settings, load_models=False)
    svc.encoder = encoder
    svc.classifier = classifier_for(encoder)
    svc.rag = knowledge_base_from(svc.pool, encoder, TantivyIndex(index_root), knowledge_dir=kb_dir)
    wire_handoff(svc)
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
