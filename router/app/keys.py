"""Integration keys of the direct API and per-conversation feedback tokens.

A key is ``sbk_`` + 43 url-safe characters (256 random bits) and is shown once, when issued; only its
SHA-256 is stored. A slow password hash (bcrypt, argon2) exists to make guessing low-entropy secrets
expensive; a 256-bit random key cannot be guessed, so one fast hash per request is as safe and keeps
the check to one indexed lookup. Every request looks the key up again, so a revocation takes effect on
the next request.

A key names the channels it may post (``--channel web --channel app``). Channels that have a signed
adapter (WeChat, WhatsApp, Telegram, SMS, Chatwoot, the HMAC-signed web webhook) reach the direct API only
through a key that lists them explicitly: there is no wildcard.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from router.channels.registry import ADAPTERS, CHANNELS, DIRECT

KEY_PREFIX = "sbk_"
# CHANNELS, the registry's closed set of channel names: an unknown channel is refused (422) and never
# becomes a metric label
#: channels posted only through the direct API (a mobile app); the rest have a webhook
DIRECT_CHANNELS = DIRECT
SIGNED_CHANNELS = tuple(c for c in ADAPTERS if c != "web")   # web is signed only when its HMAC secret is set
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
DEV_KEY_NAME = "development"
DEV_KEY_FILE = "dev-integration-key"


class KeyRefused(ValueError):
    """A refused key operation (bad name, unknown channel, duplicate)."""


@dataclass(frozen=True)
class IntegrationKey:
    id: str
    name: str
    channels: tuple[str, ...]

    def may_post(self, channel: str) -> bool:
        return channel in self.channels


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _check(name: str, channels: list[str]) -> list[str]:
    if not _NAME.match(name or ""):
        raise KeyRefused("a key name is 1-64 lower-case letters, digits, '.', '_' or '-'")
    if not channels:
        raise KeyRefused("a key needs at least one --channel")
    unknown = [c for c in channels if c not in CHANNELS]
    if unknown:
        raise KeyRefused(f"unknown channel(s) {', '.join(unknown)}; known: {', '.join(CHANNELS)}")
    return sorted(set(channels))


def issue_key(conn: psycopg.Connection, name: str, channels: list[str], *, key: str | None = None) -> tuple[str, dict]:
    """Store a new key for ``channels``; returns (plaintext, row). The plaintext is never stored."""
    chans = _check(name, channels)
    key = key or KEY_PREFIX + secrets.token_urlsafe(32)
    try:
        with conn.transaction():
            row = conn.execute(
                "INSERT INTO integration_keys (name, key_hash, prefix, channels) VALUES (%s, %s, %s, %s) "
                "RETURNING id, name, prefix, channels, created_at, revoked_at",
                (name, hash_key(key), key[:10], chans),
            ).fetchone()
    except psycopg.errors.UniqueViolation:
        raise KeyRefused(f"a key named {name!r} exists; revoke it or choose another name") from None
    return key, _row(row)


def list_keys(conn: psycopg.Connection, *, include_revoked: bool = False) -> list[dict]:
    rows = conn.execute(
        "SELECT id, name, prefix, channels, created_at, revoked_at FROM integration_keys "
        + ("" if include_revoked else "WHERE revoked_at IS NULL ") + "ORDER BY created_at"
    ).fetchall()
    return [_row(r) for r in rows]


def revoke_key(conn: psycopg.Connection, name_or_id: str) -> dict | None:
    row = conn.execute(
        "UPDATE integration_keys SET revoked_at = COALESCE(revoked_at, now()) "
        "WHERE name = %s OR id::text = %s RETURNING id, name, prefix, channels, created_at, revoked_at",
        (name_or_id, name_or_id),
    ).fetchone()
    return _row(row) if row else None


def authenticate_key(conn: psycopg.Connection, key: str | None) -> IntegrationKey | None:
    """The active key for a presented plaintext, or None."""
    if not key or not key.startswith(KEY_PREFIX) or len(key) > 100:
        return None
    row = conn.execute(
        "SELECT id, name, channels FROM integration_keys WHERE key_hash = %s AND revoked_at IS NULL",
        (hash_key(key),),
    ).fetchone()
    if row is None:
        return None
    return IntegrationKey(str(row["id"]), row["name"], tuple(row["channels"]))


def _row(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(row["id"]), "name": row["name"], "prefix": row["prefix"], "channels": list(row["channels"]),
            "created_at": row["created_at"].isoformat(),
            "revoked_at": row["revoked_at"].isoformat() if row["revoked_at"] else None}


# -- per-conversation feedback tokens ---------------------------------------------------------------

def feedback_secret(conn: psycopg.Connection) -> bytes:
    row = conn.execute("SELECT value FROM router_secrets WHERE name = 'feedback_token'").fetchone()
    return row["value"].encode()


def feedback_token(secret_value: bytes, conversation_id: str) -> str:
    """A token that lets the client that got a reply rate that conversation, and nothing else."""
    mac = hmac.new(secret_value, f"feedback:{conversation_id}".encode(), hashlib.sha256).hexdigest()
    return "sbf_" + mac[:40]


def feedback_token_ok(secret_value: bytes, conversation_id: str, token: str | None) -> bool:
    if not token:
        return False
    return hmac.compare_digest(token.encode(), feedback_token(secret_value, conversation_id).encode())


# -- the local development key of `make run` --------------------------------------------------------

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def ensure_dev_key(conn: psycopg.Connection, home: Path) -> tuple[str, Path, bool]:
    """The development key in ``$SWITCHBOARD_HOME/dev-integration-key`` (channels web and app), created once.

    Returns (key, path, created). A key file whose key is not in this database (a fresh database) is
    registered again, so the printed key keeps working.
    """
    path = Path(home) / DEV_KEY_FILE
    if path.exists():
        key = path.read_text(encoding="utf-8").strip()
        if authenticate_key(conn, key) is not None:
            return key, path, False
        if key.startswith(KEY_PREFIX):
            conn.execute("DELETE FROM integration_keys WHERE name = %s", (DEV_KEY_NAME,))
            issue_key(conn, DEV_KEY_NAME, ["web", "app"], key=key)
            return key, path, False
        path.unlink()
    conn.execute("DELETE FROM integration_keys WHERE name = %s", (DEV_KEY_NAME,))
    key, _ = issue_key(conn, DEV_KEY_NAME, ["web", "app"])
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = path.open("x", encoding="utf-8")
    try:
        path.chmod(0o600)
        fd.write(key + "\n")
    finally:
        fd.close()
    return key, path, True
