"""The connection pool: one per process, created by the composition root and passed in."""

from __future__ import annotations

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool


def _configure(conn: psycopg.Connection) -> None:
    # The vector type exists only after the first migration; a pool opened earlier
    # (e.g. by the migrator's caller) must still work.
    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        pass
    conn.commit()


def open_pool(dsn: str, *, min_size: int = 1, max_size: int = 10, name: str = "switchboard") -> ConnectionPool:
    """Open a pool of dict-row connections with pgvector types registered."""
    pool = ConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        kwargs={"row_factory": dict_row},
        configure=_configure,
        name=name,
        open=False,
    )
    pool.open(wait=True, timeout=30)
    return pool
