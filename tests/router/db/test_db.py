"""The database foundation on a real embedded Postgres: migrations and the embedded server."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from router.db import EmbeddedPostgres, Migration, discover_migrations, migrate, pending_migrations
from router.db.migrate import MigrationError


def test_discovered_migrations_are_numbered_and_unique():
    migs = discover_migrations()
    assert migs, "no migrations found"
    versions = [m.version for m in migs]
    assert versions == sorted(set(versions))
    assert migs[0].version == 1 and migs[0].package == "router"


def test_migrate_is_idempotent(fresh_db):
    dsn = fresh_db()
    first = migrate(dsn)
    assert [m.version for m in first] == [m.version for m in discover_migrations()]
    assert migrate(dsn) == []
    assert pending_migrations(dsn) == []
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT version, checksum FROM schema_migrations ORDER BY version").fetchall()
        assert [r[0] for r in rows] == [m.version for m in discover_migrations()]
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname='public'")}
        assert {"conversations", "messages", "turns"} <= tables
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname='vector'").fetchone()


def test_edited_applied_migration_is_refused(fresh_db):
    dsn = fresh_db()
    m1 = Migration(9001, "demo", "tests", "CREATE TABLE demo (id int)")
    migrate(dsn, [m1])
    edited = Migration(9001, "demo", "tests", "CREATE TABLE demo (id bigint)")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        migrate(dsn, [edited])


def test_failed_migration_rolls_back_and_records_nothing(fresh_db):
    dsn = fresh_db()
    good = Migration(9001, "good", "tests", "CREATE TABLE good (id int)")
    bad = Migration(9002, "bad", "tests", "CREATE TABLE half (id int); SELECT no_such_function();")
    with pytest.raises(psycopg.Error):
        migrate(dsn, [good, bad])
    with psycopg.connect(dsn) as conn:
        assert [r[0] for r in conn.execute("SELECT version FROM schema_migrations")] == [9001]
        assert conn.execute("SELECT to_regclass('half')").fetchone()[0] is None


_RACER = textwrap.dedent(
    """
    import sys, time
    from router.db import Migration, migrate
    dsn, start_at = sys.argv[1], float(sys.argv[2])
    slow = [Migration(9001, "slow", "tests", "SELECT pg_sleep(0.5); CREATE TABLE raced (id int);"),
            Migration(9002, "after", "tests", "INSERT INTO raced VALUES (1);")]
    while time.time() < start_at:
        time.sleep(0.005)
    done = migrate(dsn, slow)
    print(",".join(str(m.version) for m in done))
    """
)


def test_two_concurrent_migrator_processes_do_not_collide(fresh_db, tmp_path):
    """Two real processes migrate the same empty database at the same instant."""
    import time

    dsn = fresh_db()
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    start_at = str(time.time() + 2.0)
    repo = str(Path(__file__).resolve().parents[3])
    procs = [
        subprocess.Popen([sys.executable, str(script), dsn, start_at], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=repo)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    applied = sorted(out.strip() for out, _ in outs)
    # exactly one process applied both; the other found nothing to do
    assert applied == ["", "9001,9002"]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM raced").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == 2


def test_embedded_server_start_stop_restart_keeps_data(tmp_path):
    server = EmbeddedPostgres(tmp_path / "pg")
    assert server.status().initialised is False
    uri = server.start()
    assert server.start() == uri  # idempotent while running
    st = server.status()
    assert st.running and st.pid
    with psycopg.connect(uri) as conn:
        conn.execute("CREATE TABLE keep (v text)")
        conn.execute("INSERT INTO keep VALUES ('still here')")
    assert server.stop() is True
    assert server.status().running is False
    assert server.stop() is False
    uri2 = server.start()
    with psycopg.connect(uri2) as conn:
        assert conn.execute("SELECT v FROM keep").fetchone()[0] == "still here"
    server.stop()
