"""``switchboard index``: blue/green rebuilds of the knowledge indexes."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer

from router.cli._common import JsonOpt, emit, fail, settings

app = typer.Typer(help="Rebuild, sync and roll back the knowledge indexes.", no_args_is_help=True)

SourceOpt = typer.Option(None, "--source", help="Knowledge folder or file (default: SWITCHBOARD_KNOWLEDGE_DIR, "
                         "else the bundled sample).")


@contextmanager
def knowledge_base(*, source: Path | None = None, progress: bool = True, with_encoder: bool = True):
    """Services + a KnowledgeBase for one command; closes (and stops a database it started) afterwards."""
    from router.app.composition import build_services, make_knowledge_base, wire_encoder

    s = settings()
    services = build_services(s, load_models=False)
    try:
        if with_encoder:
            wire_encoder(services)
        yield make_knowledge_base(s, services.pool, services.encoder, knowledge_dir=source, progress=progress)
    finally:
        services.close()


def _source(source: Path | None) -> Path:
    from rag.service import SAMPLE_KB

    s = settings()
    path = source or s.knowledge_dir or SAMPLE_KB
    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no such knowledge folder or file")
    return Path(path)


def _errors():
    from rag.generations import GenerationError, RebuildInProgress
    from rag.ingest import IngestError

    return (GenerationError, RebuildInProgress, IngestError, FileNotFoundError)


@app.command()
def rebuild(source: Path = SourceOpt, as_json: bool = JsonOpt) -> None:
    """Build a new generation (pgvector + lexical) while the current one serves, verify it, switch to it."""
    try:
        src = _source(source)
        with knowledge_base(source=src, progress=not as_json) as kb:
            summary = kb.rebuild(src)
    except _errors() as exc:
        fail(str(exc), as_json)
    emit(summary, as_json,
         f"generation {summary['generation']} is active (previous: {summary.get('previous') or 'none'})\n"
         f"  {summary['docs']} docs, {summary['chunks']} chunks in {summary['seconds']} s "
         f"({summary['chunks_per_s']} chunks/s); {summary['encoded']} embedded, {summary['reused']} reused "
         f"from the cache\n  stages (s): {summary['timings']}")


@app.command()
def sync(source: Path = SourceOpt, as_json: bool = JsonOpt) -> None:
    """Apply added, changed and deleted documents (by content hash) to the active generation."""
    try:
        src = _source(source)
        with knowledge_base(source=src, progress=not as_json) as kb:
            summary = kb.sync(src)
    except _errors() as exc:
        fail(str(exc), as_json)
    if summary.get("mode") == "rebuild":
        text = f"no active generation: built {summary['generation']} ({summary['chunks']} chunks)"
    else:
        text = (f"generation {summary['generation']}: {summary['added_docs']} added, {summary['updated_docs']} "
                f"updated, {summary['deleted_docs']} deleted, {summary['unchanged_docs']} unchanged docs; "
                f"{summary['encoded']} chunks embedded, {summary['reused']} reused; {summary['seconds']} s")
    emit(summary, as_json, text)


@app.command()
def rollback(as_json: bool = JsonOpt) -> None:
    """Serve the previous generation again (run it twice to undo)."""
    try:
        with knowledge_base(progress=False, with_encoder=False) as kb:
            summary = kb.rollback()
    except _errors() as exc:
        fail(str(exc), as_json)
    emit(summary, as_json, f"generation {summary['active']} is active again (previous: {summary['previous']})")


@app.command()
def status(as_json: bool = JsonOpt) -> None:
    """The active and previous generations, their sizes, and whether the indexes are ready."""
    with knowledge_base(progress=False, with_encoder=False) as kb:
        info = kb.generations.status()
        ok, detail = kb.ready()
    info.update(ready=ok, detail=detail)
    lines = [f"active: {info['active'] or 'none'}   previous: {info['previous'] or 'none'}   ready: {ok} ({detail})"]
    for g in info["generations"]:
        lines.append(f"  {g['id']}  {g['status']:<8} {g['purpose']:<5} {g['docs']:>6} docs {g['chunks']:>7} chunks  "
                     f"{g['created_at']:%Y-%m-%d %H:%M:%S}")
    emit(info, as_json, "\n".join(lines))
