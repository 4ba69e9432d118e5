"""Scratch databases for the benchmarks that need their own: created, migrated, dropped afterwards.

A module of its own (leading underscore: benchmarks/run_all.py does not run it) so the benchmarks share one copy.
"""

from __future__ import annotations

import uuid

import psycopg


def _with_db(uri: str, db: str) -> str:
    base, _, query = uri.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{db}" + (f"?{query}" if query else "")


def fresh_database(admin_uri: str) -> str:
    from router.db import migrate

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_with_db(admin_uri, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = _with_db(admin_uri, name)
    migrate(dsn)
    return dsn


def drop_database(admin_uri: str, dsn: str) -> None:
    name = dsn.partition("?")[0].rsplit("/", 1)[1]
    with psycopg.connect(_with_db(admin_uri, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def stop_server(proc) -> None:
    """End a gateway the benchmark started (SIGTERM, then SIGKILL after 30 s): its database can then be dropped."""
    import subprocess

    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
