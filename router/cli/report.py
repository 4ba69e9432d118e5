"""``switchboard report``: resolution, transfer and satisfaction figures, with charts."""

from __future__ import annotations

import typer

from router.cli._common import emit, fail


def report(
    since: str = typer.Option("7d", help="Window start: a duration before now (24h, 7d, 2w) or an ISO date."),
    until: str = typer.Option(None, help="Window end as an ISO date/time (default: now)."),
    recontact: str = typer.Option("72h", help="First-contact resolution: a customer back within this is a re-contact."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    out: str = typer.Option(None, "--out", help="Directory for the PNG charts and report.json."),
    check: bool = typer.Option(False, "--check", help="Exit 3 when a check fails (an L1 answer without a citation)."),
) -> None:
    """Auto-resolution rate, transfers, escalations by rule, first-contact resolution, handling time, CSAT."""
    from datetime import datetime, timedelta, timezone
    from pathlib import Path

    import psycopg
    from psycopg.rows import dict_row

    from router.cli._common import database, settings
    from router.ops.report import build_report, parse_since, render_text, write_charts
    from router.channels.registry import CHANNELS

    now = datetime.now(timezone.utc)
    try:
        end = parse_since(until, now=now) if until else now
        start = parse_since(since, now=end)
        window = end - parse_since(recontact, now=end)
    except ValueError as exc:
        fail(str(exc), as_json, code=2)
    if window <= timedelta(0):
        fail("--recontact must be positive", as_json, code=2)
    try:
        dsn = database(settings())
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            data = build_report(conn, start, end, recontact_window=window, channels=CHANNELS)
        if out:
            data["charts"] = [str(p) for p in write_charts(data, Path(out))]
    except (ValueError, psycopg.Error, OSError) as exc:
        fail(f"{type(exc).__name__}: {exc}", as_json)
    emit(data, as_json, render_text(data))
    if check and not all(data["checks"].values()):
        raise typer.Exit(3)
