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


def expected_errors() -> tuple[type[BaseException], ...]:
    """What bad input, bad files or a bad environment raise: reported in one line, not a traceback."""
    import yaml
    from pydantic import ValidationError

    from rag.generations import GenerationError, RebuildInProgress
    from rag.prepare import PrepareError
    from rag.service import RerankerMissing
    from router.db.migrate import MigrationError

    return (OSError, ValueError, LookupError, ArithmeticError, yaml.YAMLError, ValidationError, GenerationError,
            RebuildInProgress, PrepareError, RerankerMissing, MigrationError)


def describe_error(exc: BaseException) -> str:
    """One line for an expected error; settings errors name the environment variable and what it accepts."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError) and exc.title in ("Settings", "HandoffConfig"):
        prefix = "SWITCHBOARD_HANDOFF_" if exc.title == "HandoffConfig" else "SWITCHBOARD_"
        parts = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err.get("loc", ())) or "?"
            var = prefix + field.split(".")[0].upper()
            value = err.get("input")
            parts.append(f"{var}={value!r}: {err.get('msg', 'invalid')}")
        return "invalid setting " + "; ".join(parts)
    import yaml

    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{mark.name}:{mark.line + 1}: {exc.problem or exc.context or 'not valid YAML'}"
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or type(exc).__name__}"
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}" if exc.args else "missing field"
    text = str(exc).strip().splitlines()
    return " ".join(line.strip() for line in text)[:500] if text else type(exc).__name__


def database(settings_: Settings, *, migrate_first: bool = True) -> str:
    """The DSN to use from a CLI command (starts the embedded server if that is the configuration).

    An embedded server this call started is stopped when the command ends, as ``index status`` does:
    a one-off command leaves the machine as it found it (``switchboard db start`` keeps one running).
    """
    import click

    from router.db import migrate
    from router.app.services import resolve_dsn

    dsn, embedded, started = resolve_dsn(settings_)
    if started and embedded is not None:
        ctx = click.get_current_context(silent=True)
        if ctx is not None:
            ctx.find_root().call_on_close(embedded.stop)
        else:
            import atexit

            atexit.register(embedded.stop)
    if migrate_first:
        migrate(dsn)
    return dsn
