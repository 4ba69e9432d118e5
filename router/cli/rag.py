"""``switchboard rag``: retrieval evaluation and reranker training."""

from __future__ import annotations

from pathlib import Path

import typer

from router.cli._common import JsonOpt, emit, fail, settings

app = typer.Typer(help="Evaluate retrieval and train the reranker.", no_args_is_help=True)


MODES = ("bm25", "dense", "hybrid", "rerank")


@app.command("eval")
def eval_cmd(
    beir: Path = typer.Option(..., "--beir", help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/test.tsv."),
    mode: str = typer.Option("hybrid", "--mode", help="bm25 | dense | hybrid | rerank, or 'all' for the "
                             "per-mode table (rerank included when a reranker is given), or 'answer': "
                             "answerability of L1 (a seeded half of the queries lose their documents)."),
    reranker: Path = typer.Option(None, "--reranker", help="Cross-encoder folder (default: SWITCHBOARD_RERANKER_MODEL)."),
    queries: str = typer.Option("auto", "--queries", help="auto (a reranker's held-out queries when it lists them, "
                                "else all) | all | heldout."),
    split: str = typer.Option("test", "--split", help="qrels/<split>.tsv"),
    keep: bool = typer.Option(False, "--keep", help="Keep the throw-away generation (for inspection)."),
    fusion: str = typer.Option(None, "--fusion", help="rrf | convex (default: SWITCHBOARD_RAG_FUSION)."),
    dense_weight: float = typer.Option(None, "--dense-weight", help="Fusion weight of dense search."),
    bm25_weight: float = typer.Option(None, "--bm25-weight", help="Fusion weight of BM25."),
    seed: int = typer.Option(13, "--seed", help="--mode answer: seed of the unanswerable half."),
    sample: int = typer.Option(None, "--sample", min=1, help="--mode answer: a seeded sample of N queries."),
    rows: Path = typer.Option(None, "--rows", help="--mode answer: write each query's outcome and confidence "
                              "signals to this JSONL file (for calibrating the confidence)."),
    threshold: float = typer.Option(None, "--threshold", min=0.0, max=1.0,
                                    help="--mode answer: the answer threshold to report at "
                                    "(default: SWITCHBOARD_RAG_ANSWER_THRESHOLD)."),
    as_json: bool = JsonOpt,
) -> None:
    """Index a BEIR corpus in a throw-away generation and report nDCG@10, recall@10/100, MRR@10 and latency.

    With ``--mode answer``: answered_correct_rate (answerable queries answered citing a relevant document),
    wrong_answer_rate (answers citing none, over all queries) and unanswerable_abstain_rate, at the
    threshold and over a sweep.
    """
    from rag.eval import EvalError, evaluate_beir, markdown_table

    if mode == "answer":
        _answer_eval(beir, reranker, split, keep, seed, threshold, as_json, sample, rows)
        return
    modes = list(MODES) if mode == "all" else [mode]
    if any(m not in MODES for m in modes):
        fail(f"--mode must be one of {', '.join(MODES)} or all, not {mode!r}", as_json, code=2)
    if queries not in ("auto", "all", "heldout"):
        fail("--queries must be auto, all or heldout", as_json, code=2)
    s = settings()
    model_dir = reranker or (Path(s.reranker_model) if s.reranker_model else None)
    if mode == "all" and model_dir is None:
        modes.remove("rerank")
    if "rerank" in modes and model_dir is None:
        fail("--mode rerank needs a reranker: pass --reranker MODEL_DIR or set SWITCHBOARD_RERANKER_MODEL "
             "(train one with `switchboard rag train-reranker`)", as_json, code=2)
    if not beir.is_dir():
        fail(f"{beir}: not a folder", as_json, code=2)
    if fusion is not None and fusion not in ("rrf", "convex"):
        fail("--fusion must be rrf or convex", as_json, code=2)

    from router.cli.index import knowledge_base

    query_ids = None
    note = None
    rr = None
    try:
        if model_dir is not None:
            from rag.rerank import heldout_query_ids

            from router.app.composition import make_reranker

            rr = make_reranker(s, model_dir)   # scored as the gateway would (bf16 where it uses it)
            held = heldout_query_ids(model_dir)
            if held and queries in ("auto", "heldout"):
                from rag.eval import load_beir

                judged = set(load_beir(beir, split).qrels)
                shared = held & judged
                if shared:
                    query_ids = sorted(shared)
                    note = f"{len(shared)} queries the reranker did not train on"
                elif queries == "heldout":
                    fail(f"{model_dir} was trained on another set: none of its {len(held)} held-out queries is "
                         f"judged in {beir}", as_json, code=2)
                else:
                    note = (f"all judged queries (none of the reranker's {len(held)} held-out queries is in this "
                            "set: it was trained on another one)")
            elif queries == "heldout":
                fail(f"{model_dir} lists no held-out queries", as_json, code=2)
        with knowledge_base(source=beir, progress=not as_json) as kb:
            kb.reranker = rr
            cfg = kb.config
            cfg.fusion = fusion or cfg.fusion
            cfg.weights = (cfg.weights[0] if bm25_weight is None else bm25_weight,
                           cfg.weights[1] if dense_weight is None else dense_weight)
            report = evaluate_beir(kb, beir, modes, split=split, query_ids=query_ids, keep=keep,
                                   progress=not as_json)
            report["fusion"] = {"method": kb.config.fusion, "weights": {"bm25": kb.config.weights[0],
                                "dense": kb.config.weights[1]}, "rrf_k": kb.config.rrf_k}
            report["encoder"] = kb.generations.encoder_name
    except (EvalError, FileNotFoundError) as exc:
        fail(str(exc), as_json, code=2)
    report["queries"] = note or "all judged queries"
    report["reranker"] = str(model_dir) if model_dir else None
    results = report["results"]
    if len(modes) == 1:
        out = {**results[modes[0]], "dataset": report["dataset"], "n_docs": report["n_docs"],
               "n_chunks": report["build"]["chunks"], "encoder": report["encoder"], "fusion": report["fusion"],
               "reranker": report["reranker"], "queries": report["queries"], "build": report["build"]}
    else:
        out = {"mode": "all", "dataset": report["dataset"], "n_docs": report["n_docs"],
               "n_chunks": report["build"]["chunks"], "encoder": report["encoder"], "fusion": report["fusion"],
               "reranker": report["reranker"], "queries": report["queries"], "results": results,
               "build": report["build"]}
    text = (f"{report['dataset']}: {report['n_docs']} docs, {report['build']['chunks']} chunks, "
            f"{report['queries']}; encoder {report['encoder']}; fusion {report['fusion']}; "
            f"reranker {report['reranker'] or 'none configured'}\n" + markdown_table(results))
    emit(out, as_json, text)


def _answer_eval(beir: Path, reranker: Path | None, split: str, keep: bool, seed: int, threshold: float | None,
                 as_json: bool, sample: int | None = None, rows: Path | None = None) -> None:
    from rag.eval import EvalError, answer_table, evaluate_answers

    from router.cli.index import knowledge_base

    if not beir.is_dir():
        fail(f"{beir}: not a folder", as_json, code=2)
    s = settings()
    model_dir = reranker or (Path(s.reranker_model) if s.reranker_model else None)
    try:
        rr = None
        if model_dir is not None:
            from router.app.composition import make_reranker

            rr = make_reranker(s, model_dir)
        with knowledge_base(source=beir, progress=not as_json) as kb:
            kb.reranker = rr
            report = evaluate_answers(kb, beir, split=split, seed=seed, threshold=threshold, keep=keep,
                                      progress=not as_json, sample=sample, with_rows=rows is not None)
            report["encoder"] = kb.generations.encoder_name
    except (EvalError, FileNotFoundError) as exc:
        fail(str(exc), as_json)
    report["reranker"] = str(model_dir) if model_dir else None
    if rows is not None:
        import json

        with open(rows, "w", encoding="utf-8") as fh:
            for r in report.pop("rows"):
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    text = (f"{report['dataset']}: {report['n_queries']} queries, {report['n_unanswerable']} made unanswerable "
            f"(seed {seed}, {report['n_docs_removed']} documents removed); reranker "
            f"{report['reranker'] or 'none'}\n"
            f"at threshold {report['threshold']}: answered correctly {report['answered_correct_rate']} of "
            f"answerable, wrong answers {report['wrong_answer_rate']} of all, abstained on "
            f"{report['unanswerable_abstain_rate']} of unanswerable\n" + answer_table(report))
    emit(report, as_json, text)


@app.command("calibrate")
def calibrate_cmd(
    rows: list[Path] = typer.Option(..., "--rows", help="JSONL from `rag eval --mode answer --rows FILE` "
                                    "(repeat for several sets, e.g. one per language)."),
    seed: int = typer.Option(13, "--seed", help="Seed of the dev / held-out split of each set's queries."),
    dev_share: float = typer.Option(0.5, "--dev-share", min=0.05, max=0.95, help="Share of queries fitted on."),
    max_wrong: float = typer.Option(0.05, "--max-wrong", min=0.0, max=1.0,
                                    help="Highest wrong-answer rate (of all queries) the threshold may allow."),
    target: list[str] = typer.Option(None, "--target", help="Dataset(s) whose dev wrong-answer rate sets the "
                                     "threshold (default: every set in the rows)."),
    write: Path = typer.Option(None, "--write", help="Also write the fitted model as a knowledge folder's "
                               "calibration file (e.g. <knowledge>/calibration.yaml), which the gateway loads with "
                               "that knowledge base."),
    encoder: str = typer.Option("multilingual-e5-small", "--encoder", help="The encoder the rows were scored "
                                "with (recorded in the file written by --write; another encoder ignores it)."),
    as_json: bool = JsonOpt,
) -> None:
    """Fit the answer confidence and threshold on a dev split; report the held-out split.

    Prints the values to set (SWITCHBOARD_RAG_ANSWER_THRESHOLD, SWITCHBOARD_RAG_CONFIDENCE_CENTER, ...), or with
    --write keeps them beside the knowledge base they were fitted for.
    """
    import json

    from rag.eval import EvalError, calibrate

    loaded = []
    for path in rows:
        if not path.is_file():
            fail(f"{path}: no such rows file", as_json, code=2)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                r["signals"], r["query_id"]   # noqa: B018 - both are required
            except (ValueError, KeyError, TypeError):
                fail(f"{path}:{n}: not a row of `rag eval --mode answer --rows`", as_json, code=2)
            loaded.append(r)
    try:
        report = calibrate(loaded, seed=seed, dev_share=dev_share, max_wrong=max_wrong, target=target or None)
    except EvalError as exc:
        fail(str(exc), as_json, code=2)
    m = report["model"]
    lines = [f"fitted on {dev_share:.0%} of each set's queries (seed {seed}); threshold {m['answer_threshold']} "
             f"(dev wrong answers <= {max_wrong} on {', '.join(report['targets'])})"]
    for d, r in report["datasets"].items():
        h = r["heldout"]
        lines.append(f"{d}: held-out {r['n_heldout']} queries: answered correctly {h['answered_correct_rate']}, "
                     f"wrong {h['wrong_answer_rate']}, abstained on unanswerable {h['unanswerable_abstain_rate']}")
    lines.append("settings: " + " ".join([
        f"SWITCHBOARD_RAG_ANSWER_THRESHOLD={m['answer_threshold']}",
        f"SWITCHBOARD_RAG_CONFIDENCE_CENTER='{json.dumps(m['confidence_center'])}'",
        f"SWITCHBOARD_RAG_CONFIDENCE_SLOPE={m['confidence_slope']}",
        f"SWITCHBOARD_RAG_COVERAGE_WEIGHT={m['coverage_weight']}",
        f"SWITCHBOARD_RAG_QUESTION_WEIGHT={m['question_weight']}",
        f"SWITCHBOARD_RAG_MARGIN_WEIGHT={m['margin_weight']}",
        f"SWITCHBOARD_RAG_UNKNOWN_WEIGHT={m['unknown_weight']}"]))
    if write is not None:
        import yaml

        sets = ", ".join(f"{d} ({r['n_dev']} fitted, {r['n_heldout']} held out: answered correctly "
                         f"{r['heldout']['answered_correct_rate']}, wrong {r['heldout']['wrong_answer_rate']})"
                         for d, r in report["datasets"].items())
        head = ("# The answer confidence fitted for this knowledge base (rag/confidence.py); loaded with it unless a\n"
                "# SWITCHBOARD_RAG_* setting says otherwise. Written by `switchboard rag calibrate --write`.\n"
                f"# Fitted on {sets}; seed {seed}, threshold at dev wrong answers <= {max_wrong}.\n")
        body = yaml.safe_dump({"encoder": encoder, "parameters": m}, sort_keys=False, allow_unicode=True)
        write.write_text(head + body, encoding="utf-8")
        lines.append(f"wrote {write}")
        report["written"] = str(write)
    emit(report, as_json, "\n".join(lines))


@app.command("train-reranker")
def train_reranker_cmd(
    beir: str = typer.Option(..., "--beir", help="BEIR directory: corpus.jsonl, queries.jsonl, qrels/test.tsv."),
    out: str = typer.Option(..., "--out", help="Model folder to write (loads with CrossEncoder(MODEL_DIR))."),
    epochs: int = typer.Option(5, "--epochs", min=1, help="Passes over the training queries."),
    seed: int = typer.Option(13, "--seed", help="Seed for the query split, negative sampling and weights."),
    train_split: float = typer.Option(0.7, "--train-split", help="Share of queries used for training + "
                                      "calibration; the rest is held out (ids saved in the model folder)."),
    calib_split: float = typer.Option(0.2, "--calib-split", help="Share of the training part kept aside to "
                                      "calibrate the blend with the first stage."),
    base_model: str = typer.Option("multilingual-e5-small", "--base-model",
                                   help="Encoder to start from: a prepared model name or a directory."),
    layers: int = typer.Option(6, "--layers", min=0, help="Keep only the first K encoder layers (0 = all); "
                               "fewer layers = faster rerank."),
    max_length: int = typer.Option(128, "--max-length", min=16, help="Token cap per (query, passage) pair."),
    group_size: int = typer.Option(12, "--group-size", min=2, help="1 answer + hard negatives per listwise group."),
    top_n: int = typer.Option(20, "--top-n", min=1, help="Candidates reranked at query time."),
    threads: int = typer.Option(2, "--threads", min=1, help="torch threads."),
    bf16: bool = typer.Option(None, "--bf16/--no-bf16", help="Forward passes under bf16 autocast (default: "
                              "where the CPU has bf16 dot products; ~1.8x faster, weights stay fp32)."),
    as_json: bool = JsonOpt,
) -> None:
    """Fine-tune a cross-encoder reranker on a BEIR set (hard negatives from a first-stage retriever)."""
    from rag.rerank_train import TrainingError, train_reranker

    s = settings()
    try:
        summary = train_reranker(
            beir, out, epochs=epochs, seed=seed, base_model=base_model, train_split=train_split,
            calib_split=calib_split, layers=layers or None, max_length=max_length, group_size=group_size,
            top_n=top_n, threads=threads, bf16=bf16, progress=not as_json, models_dir=s.models_dir,
        )
    except (TrainingError, FileNotFoundError) as exc:
        fail(str(exc), as_json, code=2)
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
