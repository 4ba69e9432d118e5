"""``switchboard retention run`` and ``switchboard customers forget ID``: the retention period and erasure
requests (PIPL / GDPR), over every table of the router and of handoff (:mod:`router.ops.privacy`)."""

from __future__ import annotations

import typer

from router.cli._common import JsonOpt, database, emit, fail, settings

retention_app = typer.Typer(help="Erase message texts and metadata older than the retention period.",
                            no_args_is_help=True)
customers_app = typer.Typer(help="Requests about one customer's data.", no_args_is_help=True)


def _connect():
    import psycopg
    from psycopg.rows import dict_row

    s = settings()
    return s, psycopg.connect(database(s), row_factory=dict_row)


@retention_app.command("run")
def retention_run(
    days: int = typer.Option(None, "--days", min=1, help="Retention period in days (default: "
                                                         "SWITCHBOARD_RETENTION_DAYS, 180)."),
    as_json: bool = JsonOpt,
) -> None:
    """Blank texts and metadata older than the period; rows, decisions and counts stay for the reports."""
    from router.ops import privacy

    try:
        s, conn = _connect()
        days = days or s.retention_days
        with conn, conn.transaction():
            touched = privacy.expire(conn, days)
    except Exception as exc:  # noqa: BLE001
        fail(f"{type(exc).__name__}: {exc}", as_json)
    out = {"days": days, "touched": touched, "total": sum(touched.values())}
    emit(out, as_json, f"retention {days} days: {out['total']} rows erased ("
         + ", ".join(f"{k} {v}" for k, v in touched.items()) + ")")


@customers_app.command("forget")
def forget(customer_id: str = typer.Argument(..., help="The customer id as the channels report it."),
           as_json: bool = JsonOpt) -> None:
    """Erase or anonymise one customer across every table, and say what was touched."""
    from router.ops import privacy

    if not customer_id.strip() or len(customer_id) > 200:
        fail("customer id must be 1-200 characters", as_json, code=2)
    try:
        _, conn = _connect()
        with conn, conn.transaction():
            out = privacy.forget(conn, customer_id)
    except Exception as exc:  # noqa: BLE001
        fail(f"{type(exc).__name__}: {exc}", as_json)
    if out["conversations"] == 0 and not any(out["touched"].values()):
        emit(out, as_json, f"no data held for customer {customer_id!r}")
        return
    emit(out, as_json, f"customer {customer_id!r} forgotten as {out['alias']}: {out['conversations']} conversations; "
         + ", ".join(f"{k} {v}" for k, v in out["touched"].items()))
