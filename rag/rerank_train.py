"""Fine-tune a cross-encoder reranker from BEIR-style "this question was answered by that article" data.

No pretrained cross-encoder can be installed offline, so we start from a bi-encoder's weights
(default: the prepared multilingual-e5-small folder; sentence-transformers adds a fresh 1-logit
head) and optionally keep only its first ``layers`` layers: a shallower student is faster at query
time. Training is listwise: each training question is scored against its answer and
``group_size - 1`` hard negatives sampled from what a first-stage retriever (dense cosine + BM25)
ranks highest, with a softmax cross-entropy over the group.

Queries are split with a seed into train / calibration / held-out. The model never sees the
calibration or held-out queries; the calibration queries pick the blend weight with the first
stage (so rerank is never allowed to make the ranking worse there), and the held-out ids are
written into the model folder so `switchboard rag eval` can measure on them alone.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag.rerank import CONFIG_NAME, Blend, RerankerConfig, blend_scores, passage_text

# (query texts) -> for each query, [(doc_id, score), ...] best first
FirstStage = Callable[[Sequence[str]], list[list[tuple[str, float]]]]


class TrainingError(ValueError):
    """The training data or options cannot produce a reranker."""


# --------------------------------------------------------------------------- data


@dataclass
class BeirSet:
    corpus: dict[str, tuple[str, str]]      # doc id -> (title, text)
    queries: dict[str, str]                 # query id -> text
    qrels: dict[str, dict[str, int]]        # query id -> {doc id: relevance > 0}


def load_beir(beir_dir: str | Path, split: str = "test") -> BeirSet:
    """Read ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` (header line optional)."""
    root = Path(beir_dir)
    for rel in ("corpus.jsonl", "queries.jsonl"):
        if not (root / rel).is_file():
            raise TrainingError(f"{root} is not a BEIR directory: {rel} is missing")
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        tsvs = sorted((root / "qrels").glob("*.tsv")) if (root / "qrels").is_dir() else []
        if len(tsvs) != 1:
            raise TrainingError(f"{qrels_path} is missing")
        qrels_path = tsvs[0]

    def jsonl(path: Path) -> list[dict[str, Any]]:
        rows = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError as exc:
                        raise TrainingError(f"{path}:{n}: not JSON ({exc})") from exc
        return rows

    def rows_with_id(path: Path) -> list[dict[str, Any]]:
        rows = jsonl(path)
        for n, r in enumerate(rows, start=1):
            if not isinstance(r, dict) or "_id" not in r:
                raise TrainingError(f"{path}: row {n} has no _id")
        return rows

    corpus = {str(r["_id"]): (str(r.get("title") or ""), str(r.get("text") or ""))
              for r in rows_with_id(root / "corpus.jsonl")}
    queries = {str(r["_id"]): str(r.get("text") or "") for r in rows_with_id(root / "queries.jsonl")}
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or (n == 1 and not parts[2].strip().lstrip("-").isdigit()):
                continue   # header or blank
            try:
                qid, did, rel = parts[0], parts[1], int(float(parts[2]))
            except ValueError as exc:
                raise TrainingError(f"{qrels_path}:{n}: relevance must be a number, not {parts[2]!r}") from exc
            if rel > 0 and qid in queries and did in corpus:
                qrels.setdefault(qid, {})[did] = rel
    if not qrels:
        raise TrainingError(f"{qrels_path}: no positive judgements for known queries and documents")
    return BeirSet(corpus, queries, qrels)


def split_queries(qids: Sequence[str], *, train_split: float, calib_split: float, seed: int
                  ) -> tuple[list[str], list[str], list[str]]:
    """Deterministic (train, calibration, held-out) split; calibration is a share of the train part."""
    if not 0.0 < train_split < 1.0:
        raise TrainingError("train_split must be between 0 and 1 (the rest is held out for evaluation)")
    if not 0.0 <= calib_split < 1.0:
        raise TrainingError("calib_split must be in [0, 1)")
    ids = sorted(qids)
    random.Random(seed).shuffle(ids)
    n_train_part = max(1, min(len(ids) - 1, round(len(ids) * train_split)))
    train_part, heldout = ids[:n_train_part], ids[n_train_part:]
    n_calib = round(len(train_part) * calib_split)
    if calib_split > 0 and n_train_part >= 2:
        n_calib = max(1, min(n_train_part - 1, n_calib))
    calib, train = train_part[:n_calib], train_part[n_calib:]
    return sorted(train), sorted(calib), sorted(heldout)


# --------------------------------------------------------------------------- first stage


_WORD = re.compile(r"\w", re.UNICODE)


def _tokens(text: str) -> list[str]:
    import jieba

    return [t for t in (w.strip().lower() for w in jieba.lcut_for_search(text)) if t and _WORD.search(t)]


class SimpleHybrid:
    """Dense cosine over the encoder's passage vectors + BM25 (tantivy, jieba tokens), fused by a
    convex combination of per-query min-max scores. Used to mine hard negatives and as the first
    stage for calibration when no other retriever is passed in.
    """

    def __init__(self, corpus: dict[str, tuple[str, str]], encoder: Any, *, dense_weight: float = 0.8,
                 depth: int = 100, progress: bool = True):
        import jieba
        import tantivy

        jieba.setLogLevel(60)
        self.ids = list(corpus)
        self.encoder = encoder
        self.dense_weight = float(dense_weight)
        self.depth = int(depth)
        texts = [passage_text(t, x) for t, x in corpus.values()]
        self.doc_vecs = encoder.encode_passages(texts, batch_size=32, show_progress=progress)
        sb = tantivy.SchemaBuilder()
        sb.add_unsigned_field("row", stored=True, indexed=False, fast=False)
        sb.add_text_field("body", stored=False, tokenizer_name="sb_ws")
        self.schema = sb.build()
        self.index = tantivy.Index(self.schema)   # in memory
        self._register()
        writer = self.index.writer(heap_size=50_000_000, num_threads=1)
        for row, text in enumerate(texts):
            writer.add_document(tantivy.Document(row=row, body=" ".join(_tokens(text))))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()

    def _register(self) -> None:
        import tantivy

        self.index.register_tokenizer("sb_ws", tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())

    def bm25(self, query: str, k: int) -> list[tuple[int, float]]:
        import tantivy

        terms = sorted(set(_tokens(query)))
        if not terms:
            return []
        q = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(self.schema, "body", t)) for t in terms]
        )
        searcher = self.index.searcher()
        return [(int(searcher.doc(addr)["row"][0]), float(score)) for score, addr in searcher.search(q, k).hits]

    def __call__(self, queries: Sequence[str]) -> list[list[tuple[str, float]]]:
        qv = self.encoder.encode_queries(list(queries), batch_size=32)
        sims = qv @ self.doc_vecs.T
        out = []
        k = min(self.depth, len(self.ids))
        for i, query in enumerate(queries):
            dense = sims[i]
            top = np.argsort(-dense, kind="stable")[:k]
            fused: dict[int, float] = {}
            d_lo, d_hi = float(dense[top].min()), float(dense[top].max())
            for r in top:
                fused[int(r)] = self.dense_weight * _unit(float(dense[r]), d_lo, d_hi)
            lex = self.bm25(query, k)
            if lex:
                b_lo, b_hi = min(s for _, s in lex), max(s for _, s in lex)
                for r, s in lex:
                    fused[r] = fused.get(r, 0.0) + (1 - self.dense_weight) * _unit(s, b_lo, b_hi)
            ranked = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            out.append([(self.ids[r], s) for r, s in ranked])
        return out


def _unit(x: float, lo: float, hi: float) -> float:
    return 1.0 if hi - lo <= 1e-12 else (x - lo) / (hi - lo)


# --------------------------------------------------------------------------- metrics


def ndcg_at_10(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> float:
    """Mean nDCG@10 with ranx (queries missing from ``run`` count as 0)."""
    from ranx import Qrels, Run, evaluate

    qrels = {q: d for q, d in qrels.items() if q in run}
    if not qrels:
        return 0.0
    run = {q: (r if r else {"__none__": 0.0}) for q, r in run.items() if q in qrels}
    return float(evaluate(Qrels(qrels), Run(run), "ndcg@10"))


def _run_from(ranked: dict[str, list[tuple[str, float]]]) -> dict[str, dict[str, float]]:
    # Rank-derived scores so ties and score scales cannot reorder what we ranked.
    return {q: {d: float(len(lst) - i) for i, (d, _) in enumerate(lst)} for q, lst in ranked.items()}


# --------------------------------------------------------------------------- model


def _build_model(base_model: Path, *, max_length: int, layers: int | None, seed: int, pooling: str = "mean"):
    """A CrossEncoder over the first ``layers`` layers of ``base_model`` with a fresh 1-logit head.

    ``mean``: transformer -> mean pooling -> linear (saved as sentence-transformers modules, so
    ``CrossEncoder(dir)`` loads it). Why not the usual [CLS] head: e5 was trained with mean pooling
    and its [CLS] state is the same vector for every input (cosine 1.000 measured), which leaves a
    [CLS] classifier nothing to start from. ``cls``: the classic sequence-classification head.
    """
    import torch
    from sentence_transformers import CrossEncoder
    from transformers.utils import logging as hf_logging

    torch.manual_seed(seed)
    try:
        base_layers = int(json.loads((Path(base_model) / "config.json").read_text())["num_hidden_layers"])
    except (OSError, ValueError, KeyError):
        base_layers = None
    if layers and base_layers and layers > base_layers:
        layers = None   # asking for more layers than there are would add untrained ones: keep them all
    config_kwargs = {"num_hidden_layers": int(layers)} if layers else None
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()   # the new head / dropped layers are expected, not news
    try:
        if pooling == "mean":
            from sentence_transformers.base.modules import Dense, Transformer
            from sentence_transformers.sentence_transformer.modules import Pooling

            body = Transformer(str(base_model), transformer_task="feature-extraction", config_kwargs=config_kwargs,
                               processor_kwargs={"model_max_length": max_length},
                               model_kwargs={"local_files_only": True})
            dim = body.get_embedding_dimension()
            head = Dense(dim, 1, activation_function=None, module_input_name="sentence_embedding",
                         module_output_name="scores")
            model = CrossEncoder(modules=[body, Pooling(dim, "mean"), head], device="cpu")
        elif pooling == "cls":
            model = CrossEncoder(str(base_model), num_labels=1, max_length=max_length, device="cpu",
                                 local_files_only=True, config_kwargs=config_kwargs)
        else:
            raise TrainingError(f"pooling must be 'mean' or 'cls', not {pooling!r}")
    finally:
        hf_logging.set_verbosity(verbosity)
    hf = _hf_model(model)
    pooler = getattr(getattr(hf, "bert", None) or hf, "pooler", None)
    if pooler is not None and hasattr(pooler, "dense"):
        w = pooler.dense.weight
        if float(w.detach().abs().max()) == 0.0:
            # Encoders rebuilt without a pooler (our e5 folder) ship zeros, which would feed a [CLS]
            # head a constant; start from identity.
            with torch.no_grad():
                w.copy_(torch.eye(w.shape[0], dtype=w.dtype))
                pooler.dense.bias.zero_()
    return model


def _hf_model(model: Any) -> Any:
    first = model[0]
    for attr in ("auto_model", "model"):
        inner = getattr(first, attr, None)
        if inner is not None:
            return inner
    raise TrainingError("cannot find the transformer inside the CrossEncoder")


def _logits(model: Any, pairs: list[tuple[str, str]]) -> Any:
    features = model.preprocess(pairs)
    return model(features)["scores"].reshape(-1)


def _score_all(model: Any, pairs: list[tuple[str, str]], batch_size: int = 32) -> np.ndarray:
    import torch

    if not pairs:
        return np.empty(0, dtype=np.float32)
    out = model.predict(pairs, batch_size=batch_size, activation_fn=torch.nn.Identity(),
                        show_progress_bar=False, convert_to_numpy=True)
    return np.asarray(out, dtype=np.float32).reshape(-1)


def _fit_platt(qids: list[str], logits: dict[str, np.ndarray], candidates: Callable[[str], list[str]],
               qrels: dict[str, dict[str, int]]) -> tuple[float, float] | None:
    """Logistic fit of logit -> relevant on calibration candidates, so the answer threshold can use a
    probability. None when the calibration candidates hold only one class."""
    from sklearn.linear_model import LogisticRegression

    x, y = [], []
    for q in qids:
        for d, z in zip(candidates(q), logits[q], strict=False):
            x.append(float(z))
            y.append(1 if d in qrels[q] else 0)
    if len(set(y)) < 2:
        return None
    lr = LogisticRegression(C=1.0).fit(np.asarray(x).reshape(-1, 1), np.asarray(y))
    return float(lr.coef_[0][0]), float(lr.intercept_[0])


# --------------------------------------------------------------------------- training


def train_reranker(
    beir_dir: str | Path,
    out_dir: str | Path,
    *,
    epochs: int = 2,
    seed: int = 13,
    base_model: str | Path | None = None,
    first_stage_encoder: str | Path | None = None,
    first_stage: FirstStage | None = None,
    train_split: float = 0.5,
    calib_split: float = 0.2,
    layers: int | None = 6,
    max_length: int = 128,
    group_size: int = 8,
    negatives_depth: int = 30,
    batch_groups: int = 2,
    lr: float = 1e-4,
    head_lr: float = 1e-3,
    top_n: int = 20,
    threads: int = 1,
    max_train_queries: int | None = None,
    freeze_embeddings: bool = True,
    pooling: str = "mean",
    bf16: bool | None = None,
    evaluate: bool = True,
    progress: bool = True,
    models_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Train, calibrate and save a reranker; returns a summary (also stored in the model folder).

    ``base_model``: an encoder folder (default: multilingual-e5-small under ``models_dir``).
    ``first_stage``: a retriever for mining / calibration (default: SimpleHybrid over the
    ``first_stage_encoder``, itself defaulting to ``base_model``).
    ``bf16``: forward passes under bf16 autocast (weights, gradients and optimiser stay fp32), ~1.8x
    faster where the CPU has bf16 dot products; None = where it has them.
    """
    t_start = time.perf_counter()
    from rag.encoder import E5_NAME, Encoder, force_offline, resolve_model_path

    force_offline()
    import torch
    from tqdm.auto import tqdm

    if epochs < 1:
        raise TrainingError("epochs must be >= 1")
    if group_size < 2:
        raise TrainingError("group_size must be >= 2 (one answer and at least one negative)")
    if threads:
        torch.set_num_threads(int(threads))
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)

    models_dir = Path(models_dir) if models_dir else Path(os.environ.get("SWITCHBOARD_HOME", "var")) / "models"
    base = resolve_model_path(base_model or E5_NAME, models_dir)
    out = Path(out_dir).expanduser().absolute()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / CONFIG_NAME).is_file())):
        raise TrainingError(f"{out} exists and is not a reranker folder written by switchboard")
    data = load_beir(beir_dir)
    train_q, calib_q, heldout_q = split_queries(
        list(data.qrels), train_split=train_split, calib_split=calib_split, seed=seed
    )
    if max_train_queries:
        train_q = train_q[: int(max_train_queries)]
    if not train_q:
        raise TrainingError("no training queries after the split")

    # ---- first stage: mine hard negatives for train, candidates for calibration / held-out
    t0 = time.perf_counter()
    if first_stage is None:
        enc_dir = resolve_model_path(first_stage_encoder, models_dir) if first_stage_encoder else base
        first_stage = SimpleHybrid(data.corpus, Encoder(enc_dir, threads=threads),
                                   depth=max(negatives_depth, top_n) + 10, progress=progress)
    need = sorted(set(train_q) | set(calib_q) | (set(heldout_q) if evaluate else set()))
    ranked_lists = first_stage([data.queries[q] for q in need])
    ranked = dict(zip(need, ranked_lists, strict=True))
    mining_seconds = time.perf_counter() - t0

    rng = random.Random(seed)
    examples: list[tuple[str, str, list[str]]] = []   # (qid, positive doc, hard-negative pool)
    for q in train_q:
        positives = data.qrels[q]
        pool = [d for d, _ in ranked[q] if d not in positives][:negatives_depth]
        if len(pool) < group_size - 1:   # small corpora: top up with random negatives
            others = [d for d in data.corpus if d not in positives and d not in pool]
            rng.shuffle(others)
            pool += others[: group_size - 1 - len(pool)]
        if not pool:
            continue
        for d in sorted(positives):
            examples.append((q, d, pool))
    if not examples:
        raise TrainingError("no training examples: every training query needs a positive and a negative")

    def doc_text(d: str) -> str:
        title, text = data.corpus[d]
        return passage_text(title, text)

    # ---- model and optimiser
    model = _build_model(base, max_length=max_length, layers=layers, seed=seed, pooling=pooling)
    hf = _hf_model(model)
    if freeze_embeddings:
        # The multilingual vocabulary is 250k x 384: its dense gradient and Adam state would cost more
        # per step than the transformer itself, and a few hundred questions cannot improve it anyway.
        hf.get_input_embeddings().weight.requires_grad_(False)
    # The new head (and a [CLS] head's pooler) learns fast; the pretrained body slowly.
    body_ids = {id(p) for n, p in hf.named_parameters() if not any(h in n for h in ("classifier", "pooler"))}
    trainable = [p for p in model.parameters() if p.requires_grad]
    body = [p for p in trainable if id(p) in body_ids]
    head = [p for p in trainable if id(p) not in body_ids]
    optimiser = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head, "lr": head_lr}], weight_decay=0.01)
    steps_per_epoch = math.ceil(len(examples) / batch_groups)
    total_steps = steps_per_epoch * epochs
    warmup = max(1, int(0.1 * total_steps))

    def lr_factor(step: int) -> float:   # linear warm-up, then linear decay to 0
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimiser, lr_factor)
    if bf16 is None:
        from rag.encoder_backends import bf16_supported

        bf16 = bf16_supported()
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    t0 = time.perf_counter()
    losses: list[float] = []
    bar = tqdm(total=total_steps, desc="train reranker", unit="step", disable=not progress)
    for epoch in range(epochs):
        order = list(range(len(examples)))
        rng.shuffle(order)
        model.train()
        for start in range(0, len(order), batch_groups):
            pairs: list[tuple[str, str]] = []
            groups = 0
            for i in order[start:start + batch_groups]:
                q, pos, pool = examples[i]
                negs = rng.sample(pool, min(group_size - 1, len(pool)))
                while len(negs) < group_size - 1:   # tiny pools: repeat (still a valid softmax group)
                    negs.append(rng.choice(pool))
                query = data.queries[q]
                pairs.append((query, doc_text(pos)))
                pairs.extend((query, doc_text(n)) for n in negs)
                groups += 1
            with autocast():
                logits = _logits(model, pairs).float().reshape(groups, group_size)
            target = torch.zeros(groups, dtype=torch.long)
            loss = torch.nn.functional.cross_entropy(logits, target)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimiser.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            bar.update(1)
            bar.set_postfix(epoch=epoch + 1, loss=f"{np.mean(losses[-20:]):.3f}")
    bar.close()
    model.eval()
    train_seconds = time.perf_counter() - t0

    # ---- calibration: pick the blend that does best on queries the model never saw
    def rerank_scores(qids: list[str], desc: str) -> dict[str, np.ndarray]:
        res = {}
        for q in tqdm(qids, desc=desc, unit="query", disable=not progress):
            cands = [d for d, _ in ranked[q][:top_n]]
            with autocast():
                res[q] = _score_all(model, [(data.queries[q], doc_text(d)) for d in cands])
        return res

    def blended_run(qids: list[str], logits: dict[str, np.ndarray], blend: Blend) -> dict[str, dict[str, float]]:
        run = {}
        for q in qids:
            lst = ranked[q]
            fused = blend_scores([s for _, s in lst], logits[q], blend)
            order = np.argsort(-fused, kind="stable")
            run[q] = {lst[i][0]: float(len(lst) - r) for r, i in enumerate(order)}
        return run

    grid = [Blend(weight=w, method=m) for m in ("rrf", "minmax") for w in np.round(np.arange(0, 1.0001, 0.1), 2)]
    calibration: dict[str, Any] = {"queries": len(calib_q)}
    if calib_q:
        calib_logits = rerank_scores(calib_q, "calibrate")
        cq = {q: data.qrels[q] for q in calib_q}
        scores = [(ndcg_at_10(cq, blended_run(calib_q, calib_logits, b)), b) for b in grid]
        first_ndcg = scores[0][0]   # weight 0 = first stage
        best_score = max(s for s, _ in scores)
        # Among (near-)ties prefer the smaller rerank weight: the conservative choice.
        best = min((b for s, b in scores if s >= best_score - 1e-9), key=lambda b: (b.weight, b.method != "rrf"))
        platt = _fit_platt(calib_q, calib_logits, lambda q: [d for d, _ in ranked[q][:top_n]], data.qrels)
        calibration.update({
            "first_stage_ndcg@10": round(first_ndcg, 4), "blend_ndcg@10": round(best_score, 4),
            "platt": {"a": round(platt[0], 6), "b": round(platt[1], 6)} if platt else None,
            "grid": [{"method": b.method, "weight": b.weight, "ndcg@10": round(s, 4)} for s, b in scores],
        })
    else:
        best, platt = Blend(weight=0.5, method="rrf"), None
        calibration["note"] = "no calibration queries (calib_split=0): even RRF blend, uncalibrated"

    # ---- held-out evaluation (never trained or calibrated on)
    evaluation: dict[str, Any] = {"queries": len(heldout_q)}
    if evaluate and heldout_q:
        t_eval = time.perf_counter()
        held_logits = rerank_scores(heldout_q, "evaluate")
        per_query = (time.perf_counter() - t_eval) / len(heldout_q)
        hq = {q: data.qrels[q] for q in heldout_q}
        evaluation.update({
            "first_stage_ndcg@10": round(ndcg_at_10(hq, _run_from({q: ranked[q] for q in heldout_q})), 4),
            "rerank_only_ndcg@10": round(ndcg_at_10(hq, blended_run(heldout_q, held_logits, Blend(1.0, "minmax"))), 4),
            "blend_ndcg@10": round(ndcg_at_10(hq, blended_run(heldout_q, held_logits, best)), 4),
            "rerank_seconds_per_query": round(per_query, 4),
        })

    # ---- save atomically: temp folder beside the target, then rename
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    n_layers = int(getattr(hf.config, "num_hidden_layers", 0))
    summary: dict[str, Any] = {
        "out_dir": str(out), "base_model": str(base), "seed": seed, "epochs": epochs, "layers": n_layers, "pooling": pooling,
        "max_length": max_length, "group_size": group_size, "negatives_depth": negatives_depth,
        "train_split": train_split, "calib_split": calib_split, "top_n": top_n,
        "n_train_queries": len(train_q), "n_calibration_queries": len(calib_q), "n_heldout_queries": len(heldout_q),
        "n_examples": len(examples), "steps": total_steps, "bf16": bool(bf16),
        "final_loss": round(float(np.mean(losses[-20:])), 4) if losses else None,
        "mining_seconds": round(mining_seconds, 1), "train_seconds": round(train_seconds, 1),
        "blend": {"method": best.method, "weight": best.weight, "k": best.k},
        "calibration": calibration, "heldout": evaluation,
    }
    try:
        model.save_pretrained(str(work))
        cfg = RerankerConfig(top_n=top_n, max_length=max_length, blend=best, platt=platt, heldout_queries=heldout_q,
                             extra={"training": summary, "train_queries": train_q, "calibration_queries": calib_q})
        cfg.save(work)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(work, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    summary["seconds"] = round(time.perf_counter() - t_start, 1)
    return summary
