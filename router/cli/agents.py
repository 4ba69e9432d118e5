"""``switchboard agents`` and ``switchboard tokens``: who may work the queue."""

from __future__ import annotations

import typer

agents_app = typer.Typer(help="Manage agents.", no_args_is_help=True)
tokens_app = typer.Typer(help="Issue and revoke API tokens.", no_args_is_help=True)
