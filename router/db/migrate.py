"""Numbered SQL migrations, applied in order, each in its own transaction.

Each package keeps its own schema next to its code (``router/migrations``,
``rag/migrations``, ``handoff/migrations``): files named ``NNNN_name.sql`` with numbers unique
across packages. A Postgres advisory lock serialises migrators, so two processes starting at
once (two pods, a Job and a pod) cannot collide; the loser waits and then finds nothing to do.
An applied migration whose file changed is an error, not a silent drift.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import psycopg

PACKAGES = ("router", "rag", "handoff", "automation")
LOCK_KEY = 0x5357_4244  # "SWBD": one advisory lock id for the whole schema
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    package: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def discover_migrations(packages: tuple[str, ...] = PACKAGES) -> list[Migration]:
    found: dict[int, Migration] = {}
    for package in packages:
        try:
            folder = resources.files(package) / "migrations"
        except ModuleNotFoundError:
            continue
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            m = _NAME.match(entry.name)
            if not m:
                continue
            mig = Migration(int(m.group(1)), m.group(2), package, entry.read_text(encoding="utf-8"))
            if mig.version in found:
                other = found[mig.version]
                raise MigrationError(
                    f"migration number {mig.version:04d} is used twice: {other.package}/{other.name} and {package}/{mig.name}"
                )
            found[mig.version] = mig
    return [found[v] for v in sorted(found)]


_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    package     text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


def _applied(conn: psycopg.Connection) -> dict[int, str]:
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()[0]
    if not exists:
        return {}
    return {v: c for v, c in conn.execute("SELECT version, checksum FROM schema_migrations").fetchall()}


def _check_drift(applied: dict[int, str], migrations: list[Migration]) -> None:
    for mig in migrations:
        if mig.version in applied and applied[mig.version] != mig.checksum:
            raise MigrationError(
                f"migration {mig.version:04d}_{mig.name} ({mig.package}) changed after it was applied; "
                "add a new migration instead of editing an applied one"
            )


def pending_migrations(dsn: str, migrations: list[Migration] | None = None) -> list[Migration]:
    migrations = discover_migrations() if migrations is None else migrations
    with psycopg.connect(dsn, autocommit=True) as conn:
        applied = _applied(conn)
    _check_drift(applied, migrations)
    return [m for m in migrations if m.version not in applied]


def pending_on(conn: psycopg.Connection, migrations: list[Migration]) -> list[Migration]:
    """Like :func:`pending_migrations` on a connection the caller already holds (e.g. a pooled one)."""
    from psycopg.rows import tuple_row

    cur = conn.cursor(row_factory=tuple_row)
    exists = cur.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()[0]
    applied = {v: c for v, c in cur.execute("SELECT version, checksum FROM schema_migrations").fetchall()} \
        if exists else {}
    _check_drift(applied, migrations)
    return [m for m in migrations if m.version not in applied]


def migrate(dsn: str, migrations: list[Migration] | None = None) -> list[Migration]:
    """Apply every pending migration; return the ones this call applied."""
    migrations = discover_migrations() if migrations is None else migrations
    done: list[Migration] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        try:
            conn.execute(_LEDGER)
            applied = _applied(conn)
            _check_drift(applied, migrations)
            for mig in migrations:
                if mig.version in applied:
                    continue
                with conn.transaction():
                    conn.execute(mig.sql)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name, package, checksum) VALUES (%s, %s, %s, %s)",
                        (mig.version, mig.name, mig.package, mig.checksum),
                    )
                done.append(mig)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    return done
