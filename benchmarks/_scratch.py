"""Scratch databases for the benchmarks that need their own: created, migrated, dropped afterwards.

A module of its own (leading underscore: benchmarks/run_all.py does not run it) so the benchmarks share one copy.
"""

from __future__ import annotations

import uuid

import psycopg


def _with_db(uri: str, db: str) -> str:
    base, _, query = uri.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{db}" + (f"?{query}" if query else "")


def fresh_database(admin_uri: str, embeddings: bytes | None = None) -> str:
    """A new migrated database; ``embeddings`` (:func:`saved_embeddings` of an earlier one) seeds its embedding
    cache, so a server started on it indexes the bundled knowledge base without encoding it again."""
    from router.db import migrate

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_with_db(admin_uri, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = _with_db(admin_uri, name)
    migrate(dsn)
    if embeddings:
        with psycopg.connect(dsn) as conn, conn.cursor() as cur:
            with cur.copy("COPY kb_embeddings FROM STDIN (FORMAT binary)") as copy:
                copy.write(embeddings)
    return dsn


def saved_embeddings(dsn: str) -> bytes:
    """The embedding cache of a scratch database (binary COPY) before it is dropped: a benchmark's next server
    then starts in seconds instead of re-encoding every article (minutes on 2 cores), and its figures are the
    same (the vectors are the same encoder's)."""
    out = bytearray()
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy("COPY kb_embeddings TO STDOUT (FORMAT binary)") as copy:
            for block in copy:
                out += block
    return bytes(out)


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
