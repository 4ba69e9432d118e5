"""Retrieval evaluation on a BEIR folder, with ranx metrics: how quality is measured.

The corpus is indexed into a throw-away generation (vectors come from the embedding cache, so
a second run skips the encoder), every query runs through the same code as production
(rewrite -> BM25 / dense / fusion / rerank), and chunk hits are collapsed to documents (a
document ranks where its best chunk ranks) before scoring against the qrels.
"""

from __future__ import annotations

import csv
import re
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag.confidence import confidence, features, model_of
from rag.ingest import beir_document, read_jsonl

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


class EvalError(ValueError):
    """The BEIR folder is incomplete or inconsistent."""


@dataclass
class BeirData:
    corpus: list[dict[str, Any]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_beir(folder: str | Path, split: str = "test") -> BeirData:
    folder = Path(folder)
    corpus_path, queries_path = folder / "corpus.jsonl", folder / "queries.jsonl"
    qrels_path = folder / "qrels" / f"{split}.tsv"
    for p in (corpus_path, queries_path, qrels_path):
        if not p.is_file():
            raise EvalError(f"{folder} is not a BEIR folder: {p.relative_to(folder)} is missing")
    corpus = [obj for _, obj in read_jsonl(corpus_path)]
    if any("_id" not in d for d in corpus):
        raise EvalError(f"{corpus_path}: every document needs an _id")
    queries = {}
    for n, o in read_jsonl(queries_path):
        if "_id" not in o:
            raise EvalError(f"{queries_path}:{n}: a query needs an _id")
        queries[str(o["_id"])] = str(o.get("text", ""))
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, encoding="utf-8") as fh:
        for row in csv.reader(fh, delimiter="\t"):
            if len(row) < 3 or row[0] in ("query-id", "query_id", "qid"):
                continue
            qid, did, score = row[0].strip(), row[1].strip(), row[2].strip()
            try:
                rel = int(float(score))
            except ValueError as exc:
                raise EvalError(f"{qrels_path}: bad relevance {score!r}") from exc
            if rel > 0:
                qrels.setdefault(qid, {})[did] = rel
    qrels = {q: r for q, r in qrels.items() if q in queries}
    if not qrels:
        raise EvalError(f"{qrels_path}: no judged query matches queries.jsonl")
    return BeirData(corpus=corpus, queries=queries, qrels=qrels)


def doc_run(hits: Sequence[Any], k: int) -> dict[str, float]:
    """Chunk hits -> the top-k documents, each scored by its best chunk (strictly decreasing scores)."""
    out: dict[str, float] = {}
    for h in hits:
        doc_id = h.chunk.doc_id if h.chunk else h.chunk_id.rsplit("#", 1)[0]
        if doc_id not in out:
            out[doc_id] = float(len(out))
            if len(out) >= k:
                break
    n = len(out)
    return {d: float(n - pos) for d, pos in out.items()}  # rank-based scores: ranx sorts by score


def score_runs(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, float]:
    from ranx import Qrels, Run, evaluate

    judged = {q: r for q, r in qrels.items() if q in run}
    full_run = {q: (run[q] or {"__none__": 0.0}) for q in judged}
    result = evaluate(Qrels.from_dict(judged), Run.from_dict(full_run), list(METRICS), make_comparable=True)
    return {m: round(float(result[m]), 4) for m in METRICS}


def evaluate_mode(kb: Any, data: BeirData, generation: str, mode: str, *, query_ids: Sequence[str] | None = None,
                  k: int = 100, progress: bool = False,
                  on_query: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run every judged query in ``mode`` on ``generation``; metrics + latency percentiles."""
    qids = [q for q in (query_ids if query_ids is not None else sorted(data.qrels)) if q in data.qrels]
    run: dict[str, dict[str, float]] = {}
    latencies: list[float] = []
    iterator: Any = qids
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(qids, desc=f"eval {mode}", unit="query", leave=False)
    # k chunks per query, collapsed to documents: the same candidate depth as production (a document
    # with several chunks in the top k appears once, so a run may hold fewer than k documents)
    chunk_k = k
    for i, qid in enumerate(iterator):
        t = time.perf_counter()
        hits = kb.retrieve(data.queries[qid], chunk_k, mode, generation=generation)
        latencies.append(time.perf_counter() - t)
        run[qid] = doc_run(hits, k)
        if on_query:
            on_query(i + 1, len(qids))
    metrics = score_runs(data.qrels, run)
    lat = np.asarray(latencies) * 1000.0
    return {
        "mode": mode, **metrics, "n_queries": len(qids),
        "latency_ms_p50": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
        "latency_ms_p95": round(float(np.percentile(lat, 95)), 2) if len(lat) else None,
    }


def evaluate_beir(kb: Any, folder: str | Path, modes: Sequence[str], *, split: str = "test",
                  query_ids: Sequence[str] | None = None, keep: bool = False, progress: bool = False) -> dict[str, Any]:
    """Index the BEIR corpus in a throw-away generation and evaluate each mode on it."""
    data = load_beir(folder, split)
    docs = [beir_document(d, source=str(Path(folder).name)) for d in data.corpus]
    build = kb.generations.build(docs, source=str(folder), purpose="eval")
    generation = build["generation"]
    try:
        results = {m: evaluate_mode(kb, data, generation, m, query_ids=query_ids, progress=progress) for m in modes}
    finally:
        if not keep:
            kb.generations.drop(generation)
    return {"dataset": Path(folder).name, "n_docs": len(docs), "build": build, "results": results}


# -- answerability -------------------------------------------------------------------------------------------

ANSWER_METRICS = ("answered_correct_rate", "wrong_answer_rate", "unanswerable_abstain_rate")
SWEEP = tuple(round(0.05 * i, 2) for i in range(1, 20))
SWEEP_FINE = tuple(round(0.01 * i, 2) for i in range(1, 100))


def split_unanswerable(data: BeirData, seed: int = 13, share: float = 0.5) -> tuple[set[str], set[str]]:
    """(unanswerable query ids, removed document ids): a seeded ``share`` of the judged queries lose
    every relevant document from the indexed corpus.

    Queries are taken in a seeded order and their relevant documents removed until ``share`` of the
    queries have none left; a query that shares all its documents with removed ones is unanswerable
    too (so the split is about, not exactly, ``share``), one that keeps some stays answerable.
    """
    import random

    qids = sorted(data.qrels)
    random.Random(seed).shuffle(qids)
    removed: set[str] = set()
    target = round(len(qids) * share)

    def unanswerable() -> set[str]:
        return {q for q in qids if not (set(data.qrels[q]) - removed)}

    gone: set[str] = set()
    for q in qids:
        if len(gone) >= target:
            break
        if q in gone:
            continue
        removed |= set(data.qrels[q])
        gone = unanswerable()
    return gone, removed


def answer_rates(rows: Sequence[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """The three rates at ``threshold`` from per-query rows {unanswerable, confidence, relevant_cited}."""
    n = len(rows)
    answerable = [r for r in rows if not r["unanswerable"]]
    unanswerable = [r for r in rows if r["unanswerable"]]
    answered = [r for r in rows if r["confidence"] >= threshold and r["cited"] is not None]
    correct = sum(1 for r in answered if not r["unanswerable"] and r["relevant_cited"])
    wrong = sum(1 for r in answered if not r["relevant_cited"])
    abstained = sum(1 for r in unanswerable if not (r["confidence"] >= threshold and r["cited"] is not None))
    return {
        "threshold": threshold,
        "answered_correct_rate": round(correct / len(answerable), 4) if answerable else None,
        "wrong_answer_rate": round(wrong / n, 4) if n else None,
        "unanswerable_abstain_rate": round(abstained / len(unanswerable), 4) if unanswerable else None,
        "answered_rate": round(len(answered) / n, 4) if n else None,
    }


def evaluate_answers(kb: Any, folder: str | Path, *, split: str = "test", seed: int = 13, share: float = 0.5,
                     threshold: float | None = None, query_ids: Sequence[str] | None = None,
                     sample: int | None = None, progress: bool = False, keep: bool = False,
                     with_rows: bool = False) -> dict[str, Any]:
    """Answerability on a BEIR set: index the corpus without the documents of a seeded half of the queries,
    answer every query as L1 would (``kb.answer``) and score the answer or abstention.

    An answer is correct when it cites a document judged relevant (in the full qrels); an answer to an
    unanswerable query is always wrong. The rates are given at ``threshold`` (default: the knowledge
    base's answer threshold) and over a sweep of thresholds (the confidence is computed once).
    """
    data = load_beir(folder, split)
    if query_ids is not None:
        keep_ids = set(query_ids)
        data = BeirData(data.corpus, data.queries, {q: r for q, r in data.qrels.items() if q in keep_ids})
    if sample is not None and sample < len(data.qrels):   # a seeded subset of the queries (large sets)
        import random

        picked = set(random.Random(seed).sample(sorted(data.qrels), sample))
        data = BeirData(data.corpus, data.queries, {q: r for q, r in data.qrels.items() if q in picked})
    gone, removed = split_unanswerable(data, seed, share)
    docs = [beir_document(d, source=str(Path(folder).name)) for d in data.corpus if str(d["_id"]) not in removed]
    build = kb.generations.build(docs, source=str(folder), purpose="eval")
    generation = build["generation"]
    rows: list[dict[str, Any]] = []
    latencies: list[float] = []
    try:
        qids = sorted(data.qrels)
        iterator: Any = qids
        if progress:
            from tqdm.auto import tqdm

            iterator = tqdm(qids, desc="eval answer", unit="query", leave=False)
        for qid in iterator:
            t = time.perf_counter()
            ans = kb.answer(data.queries[qid], generation=generation)
            latencies.append(time.perf_counter() - t)
            cited = next((c.get("doc_id") for c in ans.citations if c.get("doc_id")), None)
            top = ans.passages[0].chunk.doc_id if ans.passages and ans.passages[0].chunk else None
            rows.append({"query_id": qid, "dataset": Path(folder).name, "unanswerable": qid in gone,
                         "confidence": float(ans.confidence), "cited": cited,
                         "relevant_cited": cited in data.qrels[qid],
                         "top_relevant": top in data.qrels[qid] and qid not in gone, "signals": dict(ans.signals)})
    finally:
        if not keep:
            kb.generations.drop(generation)
    default = kb.config.answer_threshold if threshold is None else threshold
    lat = np.asarray(latencies) * 1000.0
    return {
        "mode": "answer", "dataset": Path(folder).name, "seed": seed, "n_queries": len(rows),
        "n_unanswerable": len(gone), "n_answerable": len(rows) - len(gone), "n_docs_indexed": len(docs),
        "n_docs_removed": len(removed), "build": build,
        **answer_rates(rows, default),
        "sweep": [answer_rates(rows, t) for t in sorted({*SWEEP, default})],
        "latency_ms_p50": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
        "latency_ms_p95": round(float(np.percentile(lat, 95)), 2) if len(lat) else None,
        "confidence_model": confidence_model(kb.config),
        # the queries `rag calibrate` (same seed, half for dev) never fitted on: the honest figures
        "heldout": answer_rates(calibration_split(rows, seed)[1], default),
        **({"rows": rows} if with_rows else {}),
    }


def confidence_model(config: Any) -> dict[str, Any]:
    """The confidence's parameters as configured (what `rag calibrate` fits)."""
    return model_of(config)


def _features(sig: dict[str, Any]) -> list[float] | None:
    """The confidence's linear terms (rag.confidence.features); None when it is 0 by rule."""
    return features(sig)


def calibration_split(rows: Sequence[dict[str, Any]], seed: int = 13, dev_share: float = 0.5) -> tuple[list, list]:
    """(dev, held-out) rows: a seeded share of each dataset's queries to fit on, the rest to report on."""
    import random

    dev, held = [], []
    by_set: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_set.setdefault(str(r.get("dataset", "")), []).append(r)
    for name in sorted(by_set):
        part = sorted(by_set[name], key=lambda r: str(r["query_id"]))
        random.Random(f"{seed}:{name}").shuffle(part)
        cut = round(len(part) * dev_share)
        dev += part[:cut]
        held += part[cut:]
    return dev, held


def _with_confidence(rows: Sequence[dict[str, Any]], model: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows with their confidence recomputed under ``model`` (the same function the service decides with)."""
    return [{**r, "confidence": confidence(r["signals"], model)} for r in rows]


def _fit(rows: Sequence[dict[str, Any]], langs: Sequence[str]) -> dict[str, Any] | None:
    """Logistic regression of "the best passage is relevant" on the confidence's terms, one intercept per
    language, written as the confidence's parameters (None: nothing to fit on)."""
    from sklearn.linear_model import LogisticRegression

    fit_rows = [r for r in rows if _features(r["signals"]) is not None]
    if not fit_rows or len({bool(r["top_relevant"]) for r in fit_rows}) < 2:
        return None
    x = np.array([_features(r["signals"]) + [float(str(r["signals"].get("lang")) == lg) for lg in langs]
                  for r in fit_rows])
    y = np.array([bool(r["top_relevant"]) for r in fit_rows])
    lr = LogisticRegression(C=100.0, fit_intercept=False, max_iter=5000).fit(x, y)
    w = [float(v) for v in lr.coef_[0]]
    slope = w[0] if abs(w[0]) > 1e-6 else 1e-6
    return {"confidence_slope": round(slope, 3), "question_weight": round(w[1], 3),
            "coverage_weight": round(w[2], 3), "margin_weight": round(w[3], 3), "unknown_weight": round(w[4], 3),
            "confidence_center": {lg: round(-w[5 + i] / slope, 4) for i, lg in enumerate(langs)}}


def _cross_fitted(rows: Sequence[dict[str, Any]], langs: Sequence[str], seed: int, folds: int = 5) -> list[dict]:
    """Each row's confidence from a model fitted on the other folds."""
    import random

    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    out: list[dict[str, Any]] = [dict(r) for r in rows]
    for k in range(folds):
        test = {i for j, i in enumerate(order) if j % folds == k}
        model = _fit([r for i, r in enumerate(rows) if i not in test], langs)
        if model is None:
            continue
        for i, r in zip(sorted(test), _with_confidence([rows[i] for i in sorted(test)], model), strict=True):
            out[i] = r
    return out


def calibrate(rows: Sequence[dict[str, Any]], *, seed: int = 13, dev_share: float = 0.5, max_wrong: float = 0.05,
              target: Sequence[str] | None = None) -> dict[str, Any]:
    """Fit the confidence on a dev split of ``rows`` (from ``rag eval --mode answer --rows``) and pick the
    answer threshold; report on the held-out split, which the fit never saw.

    The model is a logistic regression of "the best passage cites a relevant document" on the
    confidence's terms, with one intercept per language (the per-language centers). The threshold is
    the lowest at which the wrong-answer rate on the dev split of every ``target`` dataset (default:
    all) is at most ``max_wrong``: below it the bot answers more, above it it errs less.
    """
    dev, held = calibration_split(rows, seed, dev_share)
    langs = sorted({str(r["signals"].get("lang")) for r in rows if _features(r["signals"]) is not None})
    model = _fit(dev, langs)
    if model is None:
        raise EvalError("calibration needs dev queries both answered correctly and not")
    # the threshold is chosen on cross-fitted dev confidences (each from a fit that did not see the query):
    # in-sample confidences are optimistic and would pick a threshold that errs more on new queries
    dev_c = _cross_fitted(dev, langs, seed)
    held_c = _with_confidence(held, model)
    sets = sorted({str(r.get("dataset", "")) for r in rows})
    targets = list(target) if target else sets
    unknown = set(targets) - set(sets)
    if unknown:
        raise EvalError(f"--target {sorted(unknown)}: no such dataset in the rows ({sets})")
    chosen = None
    for t in SWEEP_FINE:
        if all((answer_rates([r for r in dev_c if r.get("dataset") == d], t)["wrong_answer_rate"] or 0) <= max_wrong
               for d in targets):
            chosen = t
            break
    if chosen is None:
        chosen = SWEEP_FINE[-1]
    model["answer_threshold"] = chosen
    report: dict[str, Any] = {"seed": seed, "dev_share": dev_share, "max_wrong": max_wrong, "targets": targets,
                              "model": model, "datasets": {}}
    for d in sets:
        report["datasets"][d] = {
            "n_dev": sum(1 for r in dev if r.get("dataset") == d),
            "n_heldout": sum(1 for r in held if r.get("dataset") == d),
            "dev": answer_rates([r for r in dev_c if r.get("dataset") == d], chosen),
            "heldout": answer_rates([r for r in held_c if r.get("dataset") == d], chosen),
            # every query with the fitted model: what `rag eval --mode answer` reports once it is the default
            "all": answer_rates([r for r in _with_confidence(rows, model) if r.get("dataset") == d], chosen),
            "heldout_sweep": [answer_rates([r for r in held_c if r.get("dataset") == d], t) for t in SWEEP],
        }
    return report


def answer_table(report: dict[str, Any]) -> str:
    cols = ["threshold", *ANSWER_METRICS, "answered_rate"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in report["sweep"]:
        mark = " *" if r["threshold"] == report["threshold"] else ""
        lines.append("| " + " | ".join(str(r.get(c, "")) + (mark if c == "threshold" else "") for c in cols) + " |")
    return "\n".join(lines)


def markdown_table(results: dict[str, dict[str, Any]]) -> str:
    cols = ["mode", *METRICS, "n_queries", "latency_ms_p50", "latency_ms_p95"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in results.values():
        lines.append("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    return "\n".join(lines)


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


# -- the answer set: is the reply itself right? ---------------------------------------------------------------

_FRAMING = re.compile(r"^\s*(?:q|a|问|答)\s*[:：]", re.I | re.M)
_REPLY_END = ("。", ".", "!", "！", "?", "？", "”", "」", ")", "）", '"')


def load_answer_set(path: str | Path) -> list[dict[str, Any]]:
    """JSONL rows {q, lang, kind (fact | howto | two_part | none), doc, must: [[alternatives], ...],
    must_not: [texts]}."""
    return [obj for _, obj in read_jsonl(Path(path))]


def judge_reply(row: dict[str, Any], answered: bool, text: str | None, cited: str | None) -> dict[str, Any]:
    """One question's verdict: right (the facts it must contain, or no answer when none exists), raw framing,
    a fragment (not ending where a sentence ends, or ending on an introduction), the wrong language."""
    from rag.chunk import detect_lang

    text = text or ""
    unanswerable = row.get("kind") == "none"
    low = text.casefold()
    has_facts = all(any(str(a).casefold() in low for a in group) for group in row.get("must", []))
    # what a right reply must not say: an entry that answers another question ("Is shipping free?")
    has_facts = has_facts and not any(str(a).casefold() in low for a in row.get("must_not", []))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return {
        "q": row["q"], "kind": row.get("kind"), "lang": row.get("lang"), "answered": answered,
        "right": (not answered) if unanswerable else (answered and has_facts),
        "framing": answered and bool(_FRAMING.search(text)),
        "fragment": answered and (not lines or not lines[-1].endswith(_REPLY_END)
                                  or bool(re.match(r"[a-z,;，；、]", lines[0]))),
        "wrong_language": answered and bool(text) and detect_lang(text) != row.get("lang"),
        "cited_right": (cited == row.get("doc")) if not unanswerable else None,
        "cited": cited, "text": text,
    }


def answer_set_rates(verdicts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    answerable = [v for v in verdicts if v["kind"] != "none"]
    none = [v for v in verdicts if v["kind"] == "none"]
    answered = [v for v in verdicts if v["answered"]]

    def rate(part: Sequence[dict[str, Any]], key: str) -> float | None:
        return round(sum(1 for v in part if v[key]) / len(part), 4) if part else None

    return {
        "n": len(verdicts), "n_answerable": len(answerable), "n_unanswerable": len(none),
        "right_rate": rate(verdicts, "right"),
        "answerable_right_rate": rate(answerable, "right"),
        "unanswered_answerable_rate": round(sum(1 for v in answerable if not v["answered"]) / len(answerable), 4)
        if answerable else None,
        "wrong_answer_unanswerable_rate": round(sum(1 for v in none if v["answered"]) / len(none), 4) if none else None,
        "cited_right_rate": rate(answerable, "cited_right"),
        "framing": sum(1 for v in answered if v["framing"]), "fragments": sum(1 for v in answered if v["fragment"]),
        "wrong_language": sum(1 for v in answered if v["wrong_language"]),
        "by_kind": {k: rate([v for v in verdicts if v["kind"] == k], "right")
                    for k in sorted({v["kind"] for v in verdicts})},
    }


def evaluate_answer_set(kb: Any, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every question through ``kb.answer`` (as L1 asks it), judged by :func:`judge_reply`."""
    verdicts = []
    latencies = []
    calibration = []
    for row in rows:
        t = time.perf_counter()
        ans = kb.answer(row["q"])
        latencies.append(time.perf_counter() - t)
        first = next((c.get("doc_id") for c in ans.citations if c.get("doc_id")), None)
        verdicts.append(judge_reply(row, bool(ans.answered), ans.text, first if ans.answered else None))
        # what `rag calibrate` fits on: would the reply composed from the best passage be right, answered or not
        would = judge_reply(row, True, ans.text or ans.draft, first)["right"] and row.get("kind") != "none"
        calibration.append({"dataset": "answer_set", "query_id": row["q"], "signals": dict(ans.signals),
                            "confidence": float(ans.confidence), "unanswerable": row.get("kind") == "none",
                            "cited": first, "top_relevant": bool(would), "relevant_cited": bool(would)})
    lat = np.asarray(latencies) * 1000.0
    return {**answer_set_rates(verdicts), "verdicts": verdicts, "calibration_rows": calibration,
            "latency_ms_p50": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
            "latency_ms_p95": round(float(np.percentile(lat, 95)), 2) if len(lat) else None}
