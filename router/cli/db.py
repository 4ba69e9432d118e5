"""``switchboard db``: the database the gateway uses (embedded by default)."""

from __future__ import annotations

import typer

from router.cli._common import JsonOpt, emit, fail, settings

app = typer.Typer(help="Start, stop, inspect and migrate the database.", no_args_is_help=True)


@app.command()
def start(as_json: bool = JsonOpt) -> None:
    """Start the embedded Postgres in $SWITCHBOARD_HOME/pg (no-op with SWITCHBOARD_DATABASE_URL)."""
    from router.db import EmbeddedPostgres

    s = settings()
    if s.database_dsn():
        emit({"embedded": False, "detail": "SWITCHBOARD_DATABASE_URL is set; nothing to start"}, as_json,
             "SWITCHBOARD_DATABASE_URL is set; nothing to start")
        return
    emb = EmbeddedPostgres(s.pg_dir)
    uri = emb.start()
    st = emb.status()
    emit({"embedded": True, "running": st.running, "pid": st.pid, "uri": uri, "data_dir": st.data_dir}, as_json,
         f"embedded Postgres running (pid {st.pid}) at {uri}")


@app.command()
def stop(as_json: bool = JsonOpt) -> None:
    """Stop the embedded Postgres."""
    from router.db import EmbeddedPostgres

    s = settings()
    stopped = EmbeddedPostgres(s.pg_dir).stop()
    emit({"stopped": stopped}, as_json, "stopped" if stopped else "was not running")


@app.command()
def status(as_json: bool = JsonOpt) -> None:
    """Show whether the database is reachable and which migrations are pending."""
    from router.db import EmbeddedPostgres, pending_migrations

    s = settings()
    if s.database_dsn():
        dsn = s.database_dsn()
        info = {"embedded": False}
    else:
        st = EmbeddedPostgres(s.pg_dir).status()
        info = {"embedded": True, **st.__dict__}
        dsn = st.uri
    if dsn:
        try:
            pend = pending_migrations(dsn)
            info.update({"reachable": True, "pending": [f"{m.version:04d}_{m.name}" for m in pend]})
        except Exception as exc:  # noqa: BLE001
            info.update({"reachable": False, "error": f"{type(exc).__name__}: {exc}"})
    else:
        info["reachable"] = False
    emit(info, as_json)
    if not info.get("reachable"):
        raise typer.Exit(1)


@app.command()
def migrate(as_json: bool = JsonOpt) -> None:
    """Apply pending migrations (safe to run from several processes at once)."""
    from router.db import migrate as run_migrate
    from router.app.services import resolve_dsn

    s = settings()
    try:
        dsn, _, _ = resolve_dsn(s)
        applied = run_migrate(dsn)
    except Exception as exc:  # noqa: BLE001
        fail(f"{type(exc).__name__}: {exc}", as_json)
    names = [f"{m.version:04d}_{m.name}" for m in applied]
    emit({"applied": names}, as_json, ("applied: " + ", ".join(names)) if names else "schema is current")
