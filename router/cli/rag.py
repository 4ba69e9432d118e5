"""``switchboard rag``: retrieval evaluation and reranker training."""

from __future__ import annotations

import typer

from router.cli._common import JsonOpt, emit, fail, settings

app = typer.Typer(help="Evaluate retrieval and train the reranker.", no_args_is_help=True)


@app.command("train-reranker")
def train_reranker_cmd(
    beir: str = typer.Option(..., "--beir", help="BEIR directory: corpus.jsonl, queries.jsonl, qrels/test.tsv."),
    out: str = typer.Option(..., "--out", help="Model folder to write (loads with CrossEncoder(MODEL_DIR))."),
    epochs: int = typer.Option(1, "--epochs", min=1, help="Passes over the training queries."),
    seed: int = typer.Option(13, "--seed", help="Seed for the query split, negative sampling and weights."),
    train_split: float = typer.Option(0.5, "--train-split", help="Share of queries used for training + "
                                      "calibration; the rest is held out (ids saved in the model folder)."),
    calib_split: float = typer.Option(0.2, "--calib-split", help="Share of the training part kept aside to "
                                      "calibrate the blend with the first stage."),
    base_model: str = typer.Option("multilingual-e5-small", "--base-model",
                                   help="Encoder to start from: a prepared model name or a directory."),
    layers: int = typer.Option(0, "--layers", min=0, help="Keep only the first K encoder layers (0 = all)."),
    max_length: int = typer.Option(128, "--max-length", min=16, help="Token cap per (query, passage) pair."),
    group_size: int = typer.Option(8, "--group-size", min=2, help="1 answer + hard negatives per listwise group."),
    top_n: int = typer.Option(20, "--top-n", min=1, help="Candidates reranked at query time."),
    threads: int = typer.Option(1, "--threads", min=1, help="torch threads."),
    as_json: bool = JsonOpt,
) -> None:
    """Fine-tune a cross-encoder reranker on a BEIR set (hard negatives from a first-stage retriever)."""
    from rag.rerank_train import TrainingError, train_reranker

    s = settings()
    try:
        summary = train_reranker(
            beir, out, epochs=epochs, seed=seed, base_model=base_model, train_split=train_split,
            calib_split=calib_split, layers=layers or None, max_length=max_length, group_size=group_size,
            top_n=top_n, threads=threads, progress=not as_json, models_dir=s.models_dir,
        )
    except (TrainingError, FileNotFoundError) as exc:
        fail(str(exc), as_json)
    held = summary.get("heldout", {})
    text = (
        f"reranker written to {summary['out_dir']} ({summary['layers']} layers, {summary['max_length']} tokens)\n"
        f"  queries: {summary['n_train_queries']} train, {summary['n_calibration_queries']} calibration, "
        f"{summary['n_heldout_queries']} held out\n"
        f"  blend: {summary['blend']['method']} weight {summary['blend']['weight']}\n"
        f"  held-out nDCG@10: first stage {held.get('first_stage_ndcg@10')}, rerank only "
        f"{held.get('rerank_only_ndcg@10')}, blended {held.get('blend_ndcg@10')}\n"
        f"  {summary['train_seconds']} s training, {summary['seconds']} s total"
    )
    emit(summary, as_json, text)
