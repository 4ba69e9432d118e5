"""``switchboard report``: resolution, transfer and satisfaction figures."""

from __future__ import annotations

import typer


def report(
    since: str = typer.Option("7d", help="Window, e.g. 24h, 7d, 30d."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    out: str = typer.Option(None, help="Directory for PNG charts."),
) -> None:
    """Auto-resolution rate, transfers, escalations by rule, CSAT, with charts."""
    raise typer.Exit(2)
