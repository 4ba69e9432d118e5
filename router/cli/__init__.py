"""The ``switchboard`` command line. Each command group lives in its own module."""

from __future__ import annotations

import typer

from router.cli import (agents, conversations, db, index, keys, models, outbox, privacy, rag, report, routing, serve,
                        shop, trace, workflows)


def _flags_without_a_type() -> None:
    """--help shows no value type for a flag: it takes none. Typer's rich help printed ``<bool>`` after every
    flag (its plain help already leaves flags out); options that take a value keep their type."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "_switchboard", False):
        return

    def display_type_rich(self, ctx):
        if getattr(self, "is_flag", False) and not getattr(self, "count", False):
            return None
        return shown(self, ctx)

    display_type_rich._switchboard = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich


_flags_without_a_type()

app = typer.Typer(
    name="switchboard",
    help="Three-tier routing gateway for customer service.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(db.app, name="db")
app.add_typer(models.app, name="models")
app.add_typer(routing.app, name="router")
app.add_typer(rag.app, name="rag")
app.add_typer(index.app, name="index")
app.add_typer(agents.agents_app, name="agents")
app.add_typer(agents.tokens_app, name="tokens")
app.add_typer(outbox.app, name="outbox")
app.add_typer(privacy.retention_app, name="retention")
app.add_typer(privacy.customers_app, name="customers")
app.add_typer(keys.app, name="keys")
app.add_typer(conversations.app, name="eval")
app.add_typer(shop.app, name="shop")
app.add_typer(workflows.app, name="workflows")
app.command("serve")(serve.serve)
app.command("report")(report.report)
app.command("trace")(trace.trace)


def main() -> None:
    """Run the CLI; bad input ends in one line on stderr and exit 2, never a traceback.

    ``--debug`` (anywhere on the command line) or ``SWITCHBOARD_DEBUG=1`` shows the traceback instead.
    """
    import os
    import sys

    from router.cli._common import describe_error, expected_errors

    debug = os.environ.get("SWITCHBOARD_DEBUG", "").lower() in ("1", "true", "yes")
    if "--debug" in sys.argv[1:]:
        sys.argv.remove("--debug")
        debug = True
    try:
        app()
    except expected_errors() as exc:
        if debug:
            raise
        message = describe_error(exc)
        if "--json" in sys.argv[1:]:
            import json

            sys.stdout.write(json.dumps({"error": message}, ensure_ascii=False) + "\n")
        typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
        raise SystemExit(2) from None
