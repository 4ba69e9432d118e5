"""Threshold fitting from TRAIN only: out-of-fold signals, a rejector, then the threshold.

Cross-validation over the training rows, with two kinds of out-of-scope stand-ins:

* the training set's own ``oos`` rows (when it has any), held out by fold like every other row;
* *held-out intents*: in each fold a different fifth of the intents is left out of the head's
  training entirely, so their messages play "a new intent close to the known ones" — the near
  out-of-scope case where plain thresholds fail, and the only OOS evidence a set without ``oos``
  rows has.

On those out-of-fold rows the rejector (a logistic model over the head's and the nearest examples'
signals, router.classify.embedding.SIGNALS) learns P(prediction right and in scope), and the
threshold on it is chosen to maximise in-scope accuracy + OOS recall. Nothing here ever sees a
test file: the caller passes TRAIN rows only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from router.classify.embedding import HEAD_KNN, SIGNALS, Head, Scoring, apply_rejector, compute_signals, features
from router.classify.intents import UNKNOWN

log = logging.getLogger(__name__)

REAL_OOS, HELD_OUT = "oos", "held_out_intent"
# How much the recall on held-out intents counts next to in-scope accuracy (which counts 1) and real
# ``oos`` rows (1). Held-out intents are *near* OOS, harder than most out-of-scope traffic; at full weight
# they push the threshold into rejecting many in-scope messages.
HELD_OUT_WEIGHT = 0.25
FIT_VERSION = 1  # bump when the fitting procedure changes: cached fits of the old one are then ignored


@dataclass
class FitResult:
    scoring: Scoring
    threshold: float
    cv: dict[str, Any]                           # out-of-fold figures at the chosen threshold
    oof_scores: dict[str, list[float]] = field(default_factory=dict)  # in_scope / oos / held_out_intent

    def summary(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "method": self.scoring.method, "cv": self.cv}


def _fold_ids(labels: np.ndarray, folds: int, rng: np.random.Generator) -> np.ndarray:
    """Stratified fold id per row (rows of each label spread evenly over the folds)."""
    ids = np.empty(len(labels), dtype=np.int64)
    for lab in np.unique(labels):
        idx = np.flatnonzero(labels == lab)
        rng.shuffle(idx)
        start = rng.integers(folds)
        ids[idx] = (np.arange(len(idx)) + start) % folds
    return ids


def out_of_fold(vectors: np.ndarray, texts: list[str], labels: list[str], *, C: float, lexical: bool,
                folds: int = 5, hold_out_intents: bool = True, seed: int = 0, progress: bool = False
                ) -> dict[str, np.ndarray]:
    """Rejector features and targets for every training row, each computed by a head that never saw it."""
    y_all = np.asarray(labels, dtype=object)
    is_oos = y_all == UNKNOWN
    intents = sorted(set(y_all[~is_oos]))
    if len(intents) < 2:
        raise ValueError("fitting needs at least two intents with examples")
    index = {n: i for i, n in enumerate(intents)}
    rng = np.random.default_rng(seed)
    fold = _fold_ids(y_all, folds, rng)
    # each intent is held out in exactly one fold (when there are enough intents to spare some)
    hold = hold_out_intents and len(intents) >= 4
    group = np.full(len(intents), -1)
    if hold:
        perm = rng.permutation(len(intents))
        group[perm] = np.arange(len(intents)) % folds
    feats, target, kind, gold, pred = [], [], [], [], []
    it = range(folds)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="cross-validation folds", unit="fold")
    for f in it:
        held = {intents[i] for i in np.flatnonzero(group == f)}
        kept = [n for n in intents if n not in held]
        if len(kept) < 2:
            continue
        kept_index = {n: i for i, n in enumerate(kept)}
        in_train = (fold != f) & ~is_oos & np.array([y not in held for y in y_all])
        oos_train = (fold != f) & is_oos
        tr = np.flatnonzero(in_train | oos_train)
        y_tr = np.array([kept_index[y] if y != UNKNOWN else len(kept) for y in y_all[tr]])
        head = Head(C, lexical).fit(vectors[tr], [texts[i] for i in tr], y_tr)
        ex = np.flatnonzero(in_train)
        ex_labels = np.array([kept_index[y] for y in y_all[ex]])
        test_in = np.flatnonzero((fold == f) & ~is_oos & np.array([y not in held for y in y_all]))
        test_held = np.flatnonzero(np.array([y in held for y in y_all]))
        test_oos = np.flatnonzero((fold == f) & is_oos)
        te = np.concatenate([test_in, test_held, test_oos])
        sig = compute_signals(vectors[te], [texts[i] for i in te], vectors[ex], ex_labels, len(kept), head)
        fe = features(sig)
        best = sig["p_per_intent"].argmax(axis=1)
        predicted = np.array([kept[b] for b in best], dtype=object)
        n_in = len(test_in)
        feats.append(fe)
        target.append(np.concatenate([(predicted[:n_in] == y_all[test_in]).astype(np.int64),
                                      np.zeros(len(test_held) + len(test_oos), dtype=np.int64)]))
        kind.append(np.array(["in_scope"] * n_in + [HELD_OUT] * len(test_held) + [REAL_OOS] * len(test_oos)))
        gold.append(np.concatenate([y_all[test_in], np.full(len(test_held) + len(test_oos), UNKNOWN, dtype=object)]))
        pred.append(predicted)
    del index
    return {"features": np.vstack(feats), "target": np.concatenate(target), "kind": np.concatenate(kind),
            "gold": np.concatenate(gold), "pred": np.concatenate(pred)}


def _weights(kind: np.ndarray, shares: dict[str, float]) -> np.ndarray:
    """Sample weights: in-scope rows weigh 1 in total, each OOS kind ``shares[kind]`` in total."""
    w = np.zeros(len(kind))
    w[kind == "in_scope"] = 1.0 / max(1, int((kind == "in_scope").sum()))
    for k, share in shares.items():
        n = int((kind == k).sum())
        if n:
            w[kind == k] = share / n
    return w


def fit_rejector(feats: np.ndarray, target: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    mean = feats.mean(axis=0)
    scale = feats.std(axis=0)
    scale = np.where(scale < 1e-6, 1.0, scale)  # a constant signal (no oos class) must not divide by ~0
    z = (feats - mean) / scale
    model = LogisticRegression(C=1.0, max_iter=1000)
    model.fit(z, target, sample_weight=weights * len(weights))
    return {"features": list(SIGNALS), "mean": [round(float(v), 6) for v in mean],
            "scale": [round(float(v), 6) for v in scale], "coef": [round(float(v), 6) for v in model.coef_[0]],
            "intercept": round(float(model.intercept_[0]), 6)}


def choose_threshold(scores: np.ndarray, correct: np.ndarray, kind: np.ndarray, shares: dict[str, float]
                     ) -> tuple[float, dict[str, Any]]:
    """The threshold maximising in-scope accuracy + sum over OOS kinds of share * recall.

    Ties take the middle of the best plateau.
    """
    ins = kind == "in_scope"
    kinds = [k for k, v in shares.items() if v > 0 and (kind == k).any()]
    cand = np.unique(np.round(scores, 4))
    cand = np.concatenate([[0.0], (cand[:-1] + cand[1:]) / 2 if len(cand) > 1 else cand, [1.0]])
    cand = np.unique(np.round(cand, 4))
    s_in, ok_in = scores[ins], correct[ins]
    best_val, best_ts = -1.0, [0.0]
    rows = []
    for t in cand:
        acc = float(((s_in >= t) & ok_in).mean()) if ins.any() else 0.0
        recalls = {k: float((scores[kind == k] < t).mean()) for k in kinds}
        rec = sum(shares[k] * r for k, r in recalls.items())
        val = acc + rec
        rows.append((float(t), acc, recalls))
        if val > best_val + 1e-12:
            best_val, best_ts = val, [float(t)]
        elif abs(val - best_val) <= 1e-12:
            best_ts.append(float(t))
    t = best_ts[len(best_ts) // 2]
    if not kinds:
        # no OOS evidence at all: reject only what is rarer than 1 in 40 correct in-scope messages
        t = float(np.quantile(s_in[ok_in], 0.025)) if ok_in.any() else 0.0
    t = round(t, 4)
    acc = float(((s_in >= t) & ok_in).mean()) if ins.any() else None
    recalls = {k: float((scores[kind == k] < t).mean()) for k in kinds}
    return t, {"in_scope_accuracy": acc, "oos_recall": recalls, "objective": round(best_val, 4),
               "no_rejection_accuracy": float(ok_in.mean()) if ins.any() else None}


def fit_scoring(vectors: np.ndarray, texts: list[str], labels: list[str], *, C: float = 10.0, lexical: bool = True,
                folds: int = 5, hold_out_intents: bool | None = None, oos_weight: float = 1.0,
                held_out_weight: float = HELD_OUT_WEIGHT, seed: int = 0, encoder_name: str | None = None,
                progress: bool = False) -> FitResult:
    """Fit the rejector and the global threshold from TRAIN rows (``labels`` may contain ``oos``).

    ``hold_out_intents`` None (default) means: only when TRAIN has no ``oos`` rows. Real ``oos`` rows,
    when there are some, are the better evidence (measured: held-out intents on top cost in-scope
    accuracy on every set that has them).
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    has_oos = any(y == UNKNOWN for y in labels)
    if hold_out_intents is None:
        hold_out_intents = not has_oos
    oof = out_of_fold(vectors, texts, labels, C=C, lexical=lexical, folds=folds,
                      hold_out_intents=hold_out_intents, seed=seed, progress=progress)
    kind = oof["kind"]
    if len(set(oof["target"].tolist())) < 2:   # every out-of-fold guess right (or wrong): nothing to fit on
        per_intent = {y: labels.count(y) for y in set(labels)}
        raise ValueError(f"TRAIN is too small for {folds} folds: {len(labels)} rows over {len(per_intent)} labels "
                         f"(fewest examples: {min(per_intent.values())}); give each intent at least {2 * folds} "
                         "examples, add oos rows, or lower --folds")
    shares = {REAL_OOS: oos_weight, HELD_OUT: held_out_weight}
    rejector = fit_rejector(oof["features"], oof["target"], _weights(kind, shares))
    scores = apply_rejector(rejector, oof["features"])
    correct = oof["target"].astype(bool)
    threshold, cv = choose_threshold(scores, correct, kind, shares)
    cv.update({"folds": folds, "rows": int(len(kind)),
               "kinds": {k: int((kind == k).sum()) for k in ("in_scope", REAL_OOS, HELD_OUT)}})
    scoring = Scoring(method=HEAD_KNN, C=C, lexical=lexical, rejector=rejector, encoder=encoder_name,
                      extra={"fitted": {"folds": folds, "hold_out_intents": hold_out_intents,
                                        "oos_weight": oos_weight, "held_out_weight": held_out_weight,
                                        "seed": seed}})
    return FitResult(scoring, threshold, cv, {
        "in_scope": scores[kind == "in_scope"].tolist(), REAL_OOS: scores[kind == REAL_OOS].tolist(),
        HELD_OUT: scores[kind == HELD_OUT].tolist()})


def config_from_rows(rows: list[Any], *, tier: str = "L1", base: Any = None) -> Any:
    """An IntentConfig whose examples are TRAIN rows (``oos`` rows become ``oos_examples``).

    With ``base`` (an IntentConfig), its intents keep their tier, rules and description and gain the
    rows' examples; intents only in the rows get ``tier``.
    """
    from router.classify.intents import Intent, IntentConfig

    by_intent: dict[str, list[str]] = {}
    oos: list[str] = []
    for r in rows:
        if r.intent == UNKNOWN:
            oos.append(r.text)
        else:
            by_intent.setdefault(r.intent, []).append(r.text)
    intents: list[Intent] = []
    if base is not None:
        for it in base.intents:
            extra = [e for e in by_intent.pop(it.name, []) if e not in it.examples]
            intents.append(it.model_copy(update={"examples": list(it.examples) + extra}))
    intents += [Intent(name=n, tier=tier, examples=ex) for n, ex in by_intent.items()]
    data = base.model_dump() if base is not None else {}
    data.update({"intents": [i.model_dump() for i in intents],
                 "oos_examples": list(dict.fromkeys((base.oos_examples if base is not None else []) + oos))})
    return IntentConfig.model_validate(data)


def query_vectors_of(name: str | None) -> str | None:
    """The name of the vectors a fit depends on: those of the examples, encoded as queries. A ``+bf16`` encoder
    computes its passages in bf16 but its queries in fp32 (rag.encoder_backends.BF16Encoder), so its fits are the
    plain encoder's, value for value; any other backend computes other numbers and is fitted for itself."""
    return name.removesuffix("+bf16") if name else name


def examples_digest(config: Any) -> str:
    """A short fingerprint of what a fit reads (each intent's examples and the out-of-scope examples), kept with the
    fit so the loader can say that the examples changed since (the stored fit is used all the same)."""
    import hashlib
    import json

    seen = [[i.name, list(i.examples)] for i in config.intents if i.examples] + [["", list(config.oos_examples)]]
    return hashlib.sha256(json.dumps(seen, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def needs_fit(config: Any, encoder: Any) -> str | None:
    """Why a config must be fitted before use (None: it can be used as it is).

    A config that carries its threshold and fitted ``scoring`` is used as written, whatever its examples now
    are: a fit is a deliberate step (``switchboard router fit --intents FILE``), so a new example never moves the
    threshold unseen. Only a file without a threshold, or one fitted for other vectors, is fitted at load."""
    name = query_vectors_of(getattr(encoder, "name", None))
    fitted_with = query_vectors_of((config.scoring or {}).get("encoder"))
    if config.threshold is None:
        return "the intents file has no threshold"
    if config.scoring and name and fitted_with and fitted_with != name:
        return f"the thresholds were fitted with encoder {fitted_with!r}, this one is {name!r}"
    return None


def stale_fit(config: Any) -> bool:
    """Whether the examples changed since the stored fit (False when the fit does not say what it read)."""
    fitted = ((config.scoring or {}).get("fitted") or {}).get("examples")
    return bool(fitted) and fitted != examples_digest(config)


def refit_config(config: Any, example_vectors: np.ndarray, oos_vectors: np.ndarray | None, *,
                 encoder_name: str | None = None, progress: bool = False, **kwargs: Any) -> Any:
    """The config with a fitted ``scoring`` block and global threshold (per-intent thresholds are kept).

    ``example_vectors`` are the examples' vectors in config order, ``oos_vectors`` those of
    ``oos_examples``. With fewer than two intents there is nothing to separate: the nearest-example
    cosine is used with a threshold below every example's own leave-one-out similarity.
    """
    with_examples = [i for i in config.intents if i.examples]
    texts = [e for i in with_examples for e in i.examples]
    labels = [i.name for i in with_examples for _ in i.examples]
    vectors = np.asarray(example_vectors, dtype=np.float32)
    if len(with_examples) < 2:
        sims = vectors @ vectors.T
        np.fill_diagonal(sims, -1.0)
        t = float(np.round(sims.max(axis=1).min() - 0.01, 4)) if len(vectors) > 1 else 0.0
        log.warning("only one intent has examples: using the nearest-example cosine with threshold %.4f", t)
        return config.model_copy(update={"scoring": None, "threshold": t})
    if oos_vectors is not None and len(oos_vectors):
        vectors = np.vstack([vectors, np.asarray(oos_vectors, dtype=np.float32)])
        texts = texts + list(config.oos_examples)
        labels = labels + [UNKNOWN] * len(oos_vectors)
    result = fit_scoring(vectors, texts, labels, encoder_name=query_vectors_of(encoder_name), progress=progress,
                         **kwargs)
    scoring = result.scoring.to_dict()
    scoring["fitted"] = {**scoring.get("fitted", {}), "examples": examples_digest(config)}
    scoring["cv"] = _rounded(result.cv)
    return config.model_copy(update={"scoring": scoring, "threshold": result.threshold})


def _rounded(obj: Any) -> Any:
    if isinstance(obj, float):
        return round(obj, 4)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj
