"""The ``switchboard`` command line. Each command group lives in its own module."""

from __future__ import annotations

import typer

from router.cli import agents, conversations, db, index, models, outbox, rag, report, routing, serve

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
app.add_typer(conversations.app, name="eval")
app.command("serve")(serve.serve)
app.command("report")(report.report)


def main() -> None:
    app()
