"""``switchboard rag``: retrieval evaluation and reranker training."""

from __future__ import annotations

import typer

app = typer.Typer(help="Evaluate retrieval and train the reranker.", no_args_is_help=True)
