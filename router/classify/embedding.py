"""The embedding channel: nearest examples + a light head on frozen embeddings, one calibrated score.

Why a combination: on the frozen multilingual-e5-small encoder, cosine similarity sits in a narrow
band (in-scope ~0.94-0.98, OOS ~0.84-0.91) and catches far-away out-of-scope messages well, while a
logistic head separates close intents better but is over-confident on far-away OOS. A second small
logistic model (the *rejector*), fitted on out-of-fold predictions over TRAIN, turns the signals of
both into one probability that the predicted intent is right; that probability is the confidence
compared with the threshold. Unfitted configs (no ``scoring`` block) fall back to the plain nearest
example cosine, which is what a hand-written threshold in a YAML file usually means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from router.intents import IntentConfig

KNN = "knn"            # score = cosine to the nearest example of the best intent
HEAD_KNN = "head+knn"  # score = rejector(head probabilities, cosines)
OOS_LABEL = "__oos__"

SIGNALS = ("p_top", "p_margin", "p_oos", "cos_top", "cos_intent", "cos_margin", "cos_mean5", "agree")


@dataclass
class Scoring:
    """The fitted parameters of the channel (persisted under ``scoring:`` in the intents file)."""

    method: str = KNN
    C: float = 10.0                       # inverse regularisation of the logistic head
    k: int = 5                            # examples kept in explanations / averaged for cos_mean5
    rejector: dict[str, Any] | None = None  # {"mean", "scale", "coef", "intercept"} over SIGNALS
    encoder: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Scoring:
        if not d:
            return cls()
        known = {k: d[k] for k in ("method", "C", "k", "rejector", "encoder") if k in d}
        extra = {k: v for k, v in d.items() if k not in known}
        return cls(**known, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "C": self.C, "k": self.k}
        if self.rejector:
            out["rejector"] = self.rejector
        if self.encoder:
            out["encoder"] = self.encoder
        out.update(self.extra)
        return out


def _train_head(x: np.ndarray, y: np.ndarray, C: float):
    from sklearn.linear_model import LogisticRegression

    head = LogisticRegression(C=C, max_iter=300, tol=1e-3)
    head.fit(x, y)
    return head


class EmbeddingScorer:
    """Scores L2-normalised message vectors against the examples of a config."""

    def __init__(self, config: IntentConfig, vectors: np.ndarray, labels: np.ndarray, texts: list[str],
                 oos_vectors: np.ndarray | None, scoring: Scoring):
        self.config = config
        self.names = [i.name for i in config.intents if i.examples]
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.labels = labels                      # index into self.names per example row
        self.texts = texts
        self.scoring = scoring
        self.thresholds = np.array([config.intent(n).threshold if config.intent(n).threshold is not None
                                    else config.threshold for n in self.names], dtype=np.float32)
        self.head = None
        self.head_classes: np.ndarray | None = None
        self.oos_column: int | None = None
        if scoring.method == HEAD_KNN and len(self.names) >= 2:
            x, y = self.vectors, labels.astype(np.int64)
            if oos_vectors is not None and len(oos_vectors):
                x = np.vstack([x, oos_vectors.astype(np.float32)])
                y = np.concatenate([y, np.full(len(oos_vectors), len(self.names), dtype=np.int64)])
            self.head = _train_head(x, y, scoring.C)
            self.head_classes = self.head.classes_
            cols = {int(c): j for j, c in enumerate(self.head_classes)}
            self.oos_column = cols.get(len(self.names))
            # map head columns to intent indices (an intent with examples always has a column)
            self._col_of = np.array([cols[i] for i in range(len(self.names))])

    @classmethod
    def build(cls, config: IntentConfig, encoder: Any, *, example_vectors: np.ndarray | None = None,
              oos_vectors: np.ndarray | None = None) -> EmbeddingScorer:
        names = [i.name for i in config.intents if i.examples]
        texts = [e for i in config.intents if i.examples for e in i.examples]
        labels = np.array([j for j, i in enumerate(x for x in config.intents if x.examples) for _ in i.examples],
                          dtype=np.int32)
        if example_vectors is None:
            example_vectors = encoder.encode_queries(texts)
        if oos_vectors is None and config.oos_examples and encoder is not None:
            oos_vectors = encoder.encode_queries(config.oos_examples)
        if len(example_vectors) != len(texts):
            raise ValueError(f"{len(example_vectors)} example vectors for {len(texts)} examples")
        assert len(names) == (labels.max() + 1 if len(labels) else 0)
        return cls(config, example_vectors, labels, texts, oos_vectors, Scoring.from_dict(config.scoring))

    # --- signals --------------------------------------------------------------------------------------------

    def signals(self, q: np.ndarray) -> dict[str, np.ndarray]:
        """Per message: the ranking of intents and the raw signals the score is made of."""
        sims = q @ self.vectors.T                                   # (m, n_examples)
        per_intent = _segment_max(sims, self.labels, len(self.names))
        out: dict[str, np.ndarray] = {"sims": sims, "cos_per_intent": per_intent}
        if self.head is not None:
            proba = self.head.predict_proba(q)
            p_int = proba[:, self._col_of]
            out["p_per_intent"] = p_int
            out["p_oos"] = proba[:, self.oos_column] if self.oos_column is not None else np.zeros(len(q))
        return out

    def score(self, vectors: np.ndarray) -> list[tuple[str | None, float, dict[str, Any]]]:
        q = np.asarray(vectors, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        sig = self.signals(q)
        rank = sig.get("p_per_intent", sig["cos_per_intent"])
        scores, feats = self._score(sig)
        results = []
        for r in range(len(q)):
            order = np.argsort(-rank[r])
            best = int(order[0])
            second = int(order[1]) if len(order) > 1 else None
            threshold = float(self.thresholds[best])
            s = float(scores[r])
            intent = self.names[best] if s >= threshold else None
            results.append((intent, s, self._explain(r, sig, rank, best, second, threshold, s, feats)))
        return results

    def _score(self, sig: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
        if self.head is None or not self.scoring.rejector:
            best_cos = sig["cos_per_intent"].max(axis=1) if "p_per_intent" not in sig else \
                sig["cos_per_intent"][np.arange(len(sig["sims"])), sig["p_per_intent"].argmax(axis=1)]
            return best_cos, None
        feats = features(sig)
        rej = self.scoring.rejector
        z = (feats - np.asarray(rej["mean"])) / np.asarray(rej["scale"])
        logit = z @ np.asarray(rej["coef"]) + float(rej["intercept"])
        return 1.0 / (1.0 + np.exp(-logit)), feats

    def _explain(self, r: int, sig: dict, rank: np.ndarray, best: int, second: int | None, threshold: float,
                 score: float, feats: np.ndarray | None) -> dict[str, Any]:
        sims = sig["sims"][r]
        k = max(1, int(self.scoring.k))
        top = np.argpartition(-sims, min(k, len(sims) - 1))[:k] if len(sims) > k else np.arange(len(sims))
        top = top[np.argsort(-sims[top])]
        out: dict[str, Any] = {
            "method": self.scoring.method if self.head is not None and self.scoring.rejector else KNN,
            "candidate": self.names[best],
            "score": round(score, 4),
            "threshold": round(threshold, 4),
            "runner_up": self.names[second] if second is not None else None,
            "margin": round(float(rank[r, best] - rank[r, second]), 4) if second is not None else None,
            "nearest": [{"intent": self.names[int(self.labels[i])], "example": self.texts[i],
                         "score": round(float(sims[i]), 4)} for i in top],
        }
        if feats is not None:
            out["signals"] = {n: round(float(v), 4) for n, v in zip(SIGNALS, feats[r], strict=True)}
        return out


def _segment_max(sims: np.ndarray, labels: np.ndarray, n: int) -> np.ndarray:
    """Max over the columns of each label: (m, n_examples) -> (m, n_labels)."""
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
    out = np.maximum.reduceat(sims[:, order], starts, axis=1)
    if out.shape[1] != n:  # pragma: no cover - every intent in names has at least one example
        raise ValueError("an intent without examples")
    return out.astype(np.float32, copy=False)


def features(sig: dict[str, np.ndarray]) -> np.ndarray:
    """The rejector's inputs, one row per message, in SIGNALS order."""
    p = sig["p_per_intent"]
    cos = sig["cos_per_intent"]
    m = len(p)
    rows = np.arange(m)
    order = np.argsort(-p, axis=1)
    best, second = order[:, 0], order[:, 1]
    cos_sorted = -np.sort(-sig["sims"], axis=1)
    cos_top = cos_sorted[:, 0]
    cos_intent = cos[rows, best]
    cos_other = np.where(np.arange(cos.shape[1])[None, :] == best[:, None], -1.0, cos).max(axis=1)
    return np.column_stack([
        p[rows, best],
        p[rows, best] - p[rows, second],
        sig["p_oos"],
        cos_top,
        cos_intent,
        cos_intent - cos_other,
        cos_sorted[:, :5].mean(axis=1),
        (cos.argmax(axis=1) == best).astype(np.float32),
    ]).astype(np.float64)
