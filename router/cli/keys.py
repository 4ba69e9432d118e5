"""``switchboard keys``: integration keys of the direct API (``POST /v1/messages``, feedback).

A key's plaintext is printed once, when it is issued; only its SHA-256 is stored.
"""

from __future__ import annotations

from contextlib import contextmanager

import typer

from router.cli._common import JsonOpt, database, emit, fail, settings

app = typer.Typer(help="Issue, list and revoke integration keys of the direct message API.", no_args_is_help=True)


@contextmanager
def _conn():
    import psycopg
    from psycopg.rows import dict_row

    dsn = database(settings())
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        yield conn


def _line(k: dict) -> str:
    state = f"revoked {k['revoked_at']}" if k["revoked_at"] else "active"
    return f"{k['name']:<24} {k['prefix']}...  channels={','.join(k['channels'])}  {state}"


@app.command("issue")
def issue(
    name: str = typer.Argument(..., help="What the key is for (lower-case letters, digits, '.', '_', '-')."),
    channel: list[str] = typer.Option(..., "--channel", "-c", help="A channel the key may post (repeatable)."),
    as_json: bool = JsonOpt,
) -> None:
    """Issue a key and print it once. Channels with a signed webhook (wechat, whatsapp, telegram, sms,
    chatwoot) are accepted through the direct API only for a key that lists them here."""
    from router.app.keys import SIGNED_CHANNELS, KeyRefused, issue_key

    try:
        with _conn() as conn:
            key, row = issue_key(conn, name, channel)
    except KeyRefused as exc:
        fail(str(exc), as_json)
    signed = [c for c in row["channels"] if c in SIGNED_CHANNELS]
    note = (f"\nnote: this key may post {', '.join(signed)} without that channel's webhook signature"
            if signed else "")
    emit({**row, "key": key}, as_json,
         f"{key}\n(shown once; send it as 'Authorization: Bearer <key>')  {_line(row)}{note}")


@app.command("list")
def list_(
    all_: bool = typer.Option(False, "--all", help="Include revoked keys."),
    as_json: bool = JsonOpt,
) -> None:
    """List keys (name, prefix, channels; never the key)."""
    from router.app.keys import list_keys

    with _conn() as conn:
        rows = list_keys(conn, include_revoked=all_)
    emit({"keys": rows}, as_json, "\n".join(_line(k) for k in rows) or "no integration keys")


@app.command("revoke")
def revoke(
    name: str = typer.Argument(..., help="The key's name or id."),
    as_json: bool = JsonOpt,
) -> None:
    """Revoke a key: the next request that presents it gets 401."""
    from router.app.keys import revoke_key

    with _conn() as conn:
        row = revoke_key(conn, name)
    if row is None:
        fail(f"no integration key {name!r}", as_json)
    emit(row, as_json, f"revoked: {_line(row)}")
