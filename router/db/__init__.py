"""Postgres plumbing: the embedded server, the connection pool and the migrator."""

from router.db.embedded import EmbeddedPostgres
from router.db.errors import DatabaseUnavailable
from router.db.migrate import Migration, discover_migrations, migrate, pending_migrations
from router.db.pool import Pool, open_pool

__all__ = ["DatabaseUnavailable", "EmbeddedPostgres", "Pool", "Migration", "discover_migrations", "migrate", "open_pool", "pending_migrations"]
