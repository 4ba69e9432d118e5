"""Helpers shared by the CLI modules: settings, output as text or JSON, errors."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import typer

from router.app.settings import Settings, get_settings

JsonOpt = typer.Option(False, "--json", help="Print one JSON object instead of text.")


def settings() -> Settings:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    return get_settings()


def emit(data: Any, as_json: bool, text: str | None = None) -> None:
    if as_json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
    else:
        typer.echo(text if text is not None else json.dumps(data, ensure_ascii=False, indent=2, default=str))


def fail(message: str, as_json: bool = False, code: int = 1) -> None:
    if as_json:
        sys.stdout.write(json.dumps({"error": message}, ensure_ascii=False) + "\n")
    else:
        typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def database(settings_: Settings, *, migrate_first: bool = True) -> str:
    """The DSN to use from a CLI command (starts the embedded server if that is the configuration)."""
    from router.db import migrate
    from router.app.services import resolve_dsn

    dsn, _, _ = resolve_dsn(settings_)
    if migrate_first:
        migrate(dsn)
    return dsn
