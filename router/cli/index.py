"""``switchboard index``: blue/green rebuilds of the knowledge indexes."""

from __future__ import annotations

import typer

app = typer.Typer(help="Rebuild, sync and roll back the knowledge indexes.", no_args_is_help=True)
