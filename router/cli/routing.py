"""``switchboard router``: fit and evaluate the intent classifier."""

from __future__ import annotations

import typer

app = typer.Typer(help="Fit and evaluate the intent classifier.", no_args_is_help=True)
