"""The embedding channel: a light head on frozen embeddings + nearest examples, one calibrated score.

Why a combination (measured on four intent sets, see README): on the frozen multilingual-e5-small
encoder cosine similarity sits in a narrow band (in-scope ~0.94-0.98, OOS ~0.84-0.91) and catches
far-away out-of-scope messages, while a logistic head separates neighbouring intents better but is
over-confident on far-away OOS. The head reads the standardised embedding next to character
n-gram tf-idf of the text (a lexical signal, as BM25 is next to vectors in retrieval; it helps most
on short Chinese messages). A second small logistic model, the *rejector*, fitted on out-of-fold
predictions over TRAIN (router.classify.fit), turns the signals of both into one probability that
the predicted intent is right; that probability is the confidence compared with the threshold.

Configs without a fitted ``scoring`` block and with a hand-written ``threshold`` use the plain
nearest-example cosine, which is what such a threshold usually means.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from router.classify.intents import IntentConfig

log = logging.getLogger(__name__)

KNN = "knn"            # score = cosine to the nearest example of the best intent
HEAD_KNN = "head+knn"  # score = rejector(head probabilities, cosines)

SIGNALS = ("p_top", "p_margin", "p_oos", "cos_top", "cos_intent", "cos_margin", "cos_mean5", "agree", "logit_p")


@dataclass
class Scoring:
    """The fitted parameters of the channel (persisted under ``scoring:`` in the intents file)."""

    method: str = HEAD_KNN
    C: float = 10.0                         # inverse regularisation of the logistic head
    lexical: bool = True                    # add char n-gram tf-idf next to the embedding in the head
    k: int = 5                              # nearest examples shown in explanations (and averaged)
    rejector: dict[str, Any] | None = None  # {"mean", "scale", "coef", "intercept"} over SIGNALS
    encoder: str | None = None              # the encoder the rejector and thresholds were fitted with
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Scoring:
        if not d:
            return cls(method=KNN)
        names = ("method", "C", "lexical", "k", "rejector", "encoder")
        known = {k: d[k] for k in names if k in d}
        return cls(**known, extra={k: v for k, v in d.items() if k not in names})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "C": self.C, "lexical": self.lexical, "k": self.k}
        if self.encoder:
            out["encoder"] = self.encoder
        if self.rejector:
            out["rejector"] = self.rejector
        out.update(self.extra)
        return out


# --- the head ----------------------------------------------------------------------------------------------


class Head:
    """Multinomial logistic regression on [standardised embedding | char 1-3-gram tf-idf]."""

    def __init__(self, C: float = 10.0, lexical: bool = True):
        self.C = float(C)
        self.lexical = bool(lexical)

    def _features(self, vectors: np.ndarray, texts: list[str] | None):
        z = (np.asarray(vectors, dtype=np.float32) - self.mean) / self.scale
        if not self.lexical:
            return z
        from scipy import sparse

        return sparse.hstack([sparse.csr_matrix(z), self.tfidf.transform(texts)], format="csr")

    def fit(self, vectors: np.ndarray, texts: list[str], y: np.ndarray) -> Head:
        from sklearn.linear_model import LogisticRegression

        v = np.asarray(vectors, dtype=np.float32)
        self.mean = v.mean(axis=0)
        # divide by sqrt(dim) too: the dense block then weighs like one unit-norm tf-idf row
        self.scale = (v.std(axis=0) + 1e-6) * np.sqrt(v.shape[1])
        if self.lexical:
            from sklearn.feature_extraction.text import TfidfVectorizer

            self.tfidf = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3), sublinear_tf=True,
                                         lowercase=True, dtype=np.float32)
            self.tfidf.fit(texts)
        self.model = LogisticRegression(C=self.C, max_iter=1000, tol=1e-4)
        self.model.fit(self._features(v, texts), y)
        self.classes_ = self.model.classes_
        return self

    def predict_proba(self, vectors: np.ndarray, texts: list[str] | None) -> np.ndarray:
        if len(vectors) <= 8:
            return self._proba_small(np.asarray(vectors, dtype=np.float32), texts)
        return self.model.predict_proba(self._features(vectors, texts))

    def _proba_small(self, vectors: np.ndarray, texts: list[str] | None) -> np.ndarray:
        """The same probabilities as scikit-learn's predict_proba, without its per-call input validation
        (which costs more than the arithmetic for one message on the request path)."""
        fast = getattr(self, "_fast", None)
        if fast is None:  # built once, published in one assignment (safe under concurrent first calls)
            d = self.mean.shape[0]
            coef = np.asarray(self.model.coef_, dtype=np.float64)
            fast = (coef[:, :d].T.copy(), coef[:, d:].T.copy() if self.lexical else None,
                    np.asarray(self.model.intercept_, dtype=np.float64),
                    self.tfidf.build_analyzer() if self.lexical else None,
                    self.tfidf.vocabulary_ if self.lexical else None,
                    np.asarray(self.tfidf.idf_, dtype=np.float64) if self.lexical else None)
            self._fast = fast
        w_dense, w_lex, b, analyze, vocab, idf = fast
        z = ((vectors - self.mean) / self.scale).astype(np.float64)
        logits = z @ w_dense + b
        if self.lexical:
            for r, text in enumerate(texts or []):
                counts: dict[int, int] = {}
                for gram in analyze(text):
                    j = vocab.get(gram)
                    if j is not None:
                        counts[j] = counts.get(j, 0) + 1
                if counts:
                    idx = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
                    tf = 1.0 + np.log(np.fromiter(counts.values(), dtype=np.float64, count=len(counts)))
                    val = tf * idf[idx]
                    val /= np.linalg.norm(val)
                    logits[r] += val @ w_lex[idx]
        if logits.shape[1] == 1:  # binary model: one logit for the second class
            p = 1.0 / (1.0 + np.exp(-logits[:, 0]))
            return np.column_stack([1.0 - p, p])
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)


def _head_key(texts: list[str], y: np.ndarray, vectors: np.ndarray, C: float, lexical: bool) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([C, lexical, texts], ensure_ascii=False).encode())
    h.update(np.ascontiguousarray(y).tobytes())
    h.update(np.ascontiguousarray(vectors[:: max(1, len(vectors) // 64)], dtype=np.float32).tobytes())
    return h.hexdigest()[:32]


def trained_head(vectors: np.ndarray, texts: list[str], y: np.ndarray, C: float, lexical: bool,
                 cache_dir: Path | None = None) -> Head:
    """Train a head, or load the one trained from exactly these examples before (the cache is the
    gateway's own files under $SWITCHBOARD_HOME/cache; a 15k-example head takes a while to fit).

    The cache holds arrays only (``.npz`` loaded with ``allow_pickle=False``, the vocabulary as JSON
    inside it) and the SHA-256 of that file next to it: loading never runs code from the file, and a
    truncated or altered entry is rebuilt.
    """
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"{_head_key(texts, y, vectors, C, lexical)}.npz"
        head = _load_head(path)
        if head is not None:
            return head
    head = Head(C, lexical).fit(vectors, texts, y)
    if path is not None:
        _save_head(head, path)
    return head


def _digest_path(path: Path) -> Path:
    return path.with_suffix(".sha256")


def _save_head(head: Head, path: Path) -> None:
    arrays = {"mean": head.mean, "scale": head.scale, "coef": head.model.coef_, "intercept": head.model.intercept_,
              "classes": np.asarray(head.classes_), "C": np.asarray([head.C]),
              "lexical": np.asarray([head.lexical])}
    if head.lexical:
        vocab = {k: int(v) for k, v in head.tfidf.vocabulary_.items()}
        arrays["idf"] = head.tfidf.idf_
        arrays["vocabulary_json"] = np.frombuffer(json.dumps(vocab, ensure_ascii=False).encode(), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{id(head)}.tmp.npz")
    np.savez(tmp, **arrays)
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    tmp.replace(path)
    _digest_path(path).write_text(digest + "\n", encoding="utf-8")


def _load_head(path: Path) -> Head | None:
    if not path.is_file() or not _digest_path(path).is_file():
        return None
    try:
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != _digest_path(path).read_text(encoding="utf-8").strip():
            log.warning("head cache %s does not match its digest: rebuilt", path)
            return None
        import io

        from sklearn.linear_model import LogisticRegression

        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            head = Head(float(z["C"][0]), bool(z["lexical"][0]))
            head.mean, head.scale = z["mean"], z["scale"]
            model = LogisticRegression(C=head.C, max_iter=1000, tol=1e-4)
            model.coef_, model.intercept_, model.classes_ = z["coef"], z["intercept"], z["classes"]
            model.n_features_in_ = model.coef_.shape[1]
            head.model, head.classes_ = model, model.classes_
            if head.lexical:
                from sklearn.feature_extraction.text import TfidfVectorizer

                vocab = json.loads(bytes(z["vocabulary_json"]).decode())
                tfidf = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3), sublinear_tf=True,
                                        lowercase=True, dtype=np.float32, vocabulary=vocab)
                tfidf.vocabulary_ = vocab
                tfidf.idf_ = z["idf"]
                head.tfidf = tfidf
        return head
    except Exception:  # noqa: BLE001 - a stale or broken cache entry is simply rebuilt
        log.warning("ignoring unreadable head cache %s", path)
        return None


# --- signals -----------------------------------------------------------------------------------------------


def segment_plan(labels: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Column order and segment starts that group the examples by label (computed once per scorer)."""
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
    if len(starts) != n:
        raise ValueError("every intent needs at least one example")
    return order, starts


def segment_max(sims: np.ndarray, labels: np.ndarray, n: int,
                plan: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Max over the columns of each label: (m, n_examples) -> (m, n_labels); every label must occur."""
    order, starts = plan if plan is not None else segment_plan(labels, n)
    return np.maximum.reduceat(sims[:, order], starts, axis=1).astype(np.float32, copy=False)


def compute_signals(q: np.ndarray, texts: list[str] | None, ex_vectors: np.ndarray, ex_labels: np.ndarray,
                    n_intents: int, head: Head | None, plan: tuple[np.ndarray, np.ndarray] | None = None
                    ) -> dict[str, np.ndarray]:
    """Everything the score and the explanation are made of, for a batch of message vectors."""
    sims = q @ ex_vectors.T
    out: dict[str, np.ndarray] = {"sims": sims, "cos_per_intent": segment_max(sims, ex_labels, n_intents, plan)}
    if head is not None:
        proba = head.predict_proba(q, texts)
        cols = {int(c): j for j, c in enumerate(head.classes_)}
        out["p_per_intent"] = proba[:, [cols[i] for i in range(n_intents)]]
        oos_col = cols.get(n_intents)
        out["p_oos"] = proba[:, oos_col] if oos_col is not None else np.zeros(len(q), dtype=np.float64)
    return out


def features(sig: dict[str, np.ndarray]) -> np.ndarray:
    """The rejector's inputs, one row per message, in SIGNALS order."""
    p = sig["p_per_intent"]
    cos = sig["cos_per_intent"]
    rows = np.arange(len(p))
    if p.shape[1] > 1:
        top2 = np.argpartition(-p, 1, axis=1)[:, :2]
        swap = p[rows, top2[:, 0]] < p[rows, top2[:, 1]]
        best = np.where(swap, top2[:, 1], top2[:, 0])
        second = np.where(swap, top2[:, 0], top2[:, 1])
        p2 = p[rows, second]
    else:
        best = np.zeros(len(p), dtype=np.int64)
        p2 = np.zeros(len(p))
    p1 = p[rows, best]
    k = min(5, sig["sims"].shape[1])
    topk = -np.partition(-sig["sims"], k - 1, axis=1)[:, :k]
    cos_intent = cos[rows, best]
    masked = cos.copy()
    masked[rows, best] = -1.0
    cos_other = masked.max(axis=1) if cos.shape[1] > 1 else np.full(len(p), -1.0)
    pc = np.clip(p1, 1e-6, 1 - 1e-6)
    return np.column_stack([
        p1,
        p1 - p2,
        sig["p_oos"],
        topk.max(axis=1),
        cos_intent,
        cos_intent - cos_other,
        topk.mean(axis=1),
        (cos.argmax(axis=1) == best).astype(np.float64),
        np.log(pc / (1 - pc)),
    ]).astype(np.float64)


def pooled(sig: dict[str, np.ndarray], groups: list[list[int]]) -> tuple[dict[str, np.ndarray], list[list[int]]]:
    """The signals with each group of intents (indices) made one: their head probabilities summed, their nearest
    example the group's nearest. Intents in no group stay as they are; returns the signals and, per new column, the
    intents it stands for. Two intents that lead to one task ("where is my lamp?": order_query and shipping_status,
    both the order lookup) split the evidence for it; pooled, the rejector reads how sure the message is of the task."""
    n = sig["p_per_intent"].shape[1]
    grouped = {i for g in groups for i in g}
    columns = [list(g) for g in groups] + [[i] for i in range(n) if i not in grouped]
    out = dict(sig)
    out["p_per_intent"] = np.column_stack([sig["p_per_intent"][:, c].sum(axis=1) for c in columns])
    out["cos_per_intent"] = np.column_stack([sig["cos_per_intent"][:, c].max(axis=1) for c in columns])
    return out, columns


def conditioned(sig: dict[str, np.ndarray], barred: list[int], labels: np.ndarray) -> dict[str, np.ndarray]:
    """The signals given that the message is none of the ``barred`` intents (indices): their head probability shared
    out over the rest, out-of-scope included (P(intent | not barred)), their examples out of the nearest. The rejector
    then reads how sure the message is of what it can be."""
    out = dict(sig)
    if "p_per_intent" in sig:   # a head (the plain nearest-example method has none)
        p = sig["p_per_intent"].copy()
        rest = np.clip(1.0 - p[:, barred].sum(axis=1), 1e-6, None)
        p[:, barred] = 0.0
        out["p_per_intent"] = p / rest[:, None]
        out["p_oos"] = sig["p_oos"] / rest
    cos = sig["cos_per_intent"].copy()
    cos[:, barred] = -1.0
    out["cos_per_intent"] = cos
    sims = sig["sims"].copy()
    sims[:, np.isin(labels, barred)] = -1.0
    out["sims"] = sims
    return out


def apply_rejector(rejector: dict[str, Any], feats: np.ndarray) -> np.ndarray:
    z = (feats - np.asarray(rejector["mean"])) / np.asarray(rejector["scale"])
    logit = z @ np.asarray(rejector["coef"]) + float(rejector["intercept"])
    return 1.0 / (1.0 + np.exp(-np.clip(logit, -50, 50)))


# --- the channel -------------------------------------------------------------------------------------------


class EmbeddingScorer:
    """Scores L2-normalised message vectors (and their texts) against the examples of a config."""

    def __init__(self, config: IntentConfig, vectors: np.ndarray, labels: np.ndarray, texts: list[str],
                 oos_vectors: np.ndarray | None, scoring: Scoring, *, threshold: float,
                 cache_dir: Path | None = None, head: Head | None = None):
        self.config = config
        self.names = [i.name for i in config.intents if i.examples]
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.labels = np.asarray(labels, dtype=np.int64)
        self._plan = segment_plan(self.labels, len(self.names))
        self.texts = texts
        self.scoring = scoring
        self.thresholds = np.array([config.intent(n).threshold if config.intent(n).threshold is not None
                                    else threshold for n in self.names], dtype=np.float64)
        self.head = head
        uses_head = scoring.method == HEAD_KNN and scoring.rejector and len(self.names) >= 2
        if uses_head and self.head is None:
            x, y, t = self.vectors, self.labels, list(texts)
            if oos_vectors is not None and len(oos_vectors):
                x = np.vstack([x, np.asarray(oos_vectors, dtype=np.float32)])
                y = np.concatenate([y, np.full(len(oos_vectors), len(self.names), dtype=np.int64)])
                t = t + list(config.oos_examples)
            self.head = trained_head(x, t, y, scoring.C, scoring.lexical, cache_dir)
        if not uses_head:
            self.head = None

    @property
    def method(self) -> str:
        return HEAD_KNN if self.head is not None else KNN

    @classmethod
    def build(cls, config: IntentConfig, encoder: Any, *, threshold: float, example_vectors: np.ndarray | None = None,
              oos_vectors: np.ndarray | None = None, cache_dir: Path | None = None) -> EmbeddingScorer:
        with_examples = [i for i in config.intents if i.examples]
        texts = [e for i in with_examples for e in i.examples]
        labels = np.array([j for j, i in enumerate(with_examples) for _ in i.examples], dtype=np.int64)
        if example_vectors is None:
            example_vectors = encoder.encode_queries(texts)
        if oos_vectors is None and config.oos_examples and encoder is not None:
            oos_vectors = encoder.encode_queries(config.oos_examples)
        if len(example_vectors) != len(texts):
            raise ValueError(f"{len(example_vectors)} example vectors for {len(texts)} examples")
        return cls(config, example_vectors, labels, texts, oos_vectors, Scoring.from_dict(config.scoring),
                   threshold=threshold, cache_dir=cache_dir)

    def score(self, vectors: np.ndarray, texts: list[str], pools: Sequence[Sequence[str]] = (),
              barred: Sequence[str] = ()) -> list[tuple[str | None, float, dict[str, Any]]]:
        """The intent (None below its threshold), the score and the explanation of each message. ``pools``: groups
        of intents that lead to one task, whose evidence is summed when deciding whether the message is in scope
        (see ``pooled``); the intent named is then the pool's likeliest, the explanation says ``pooled``.
        ``barred``: intents the messages are known not to be (``conditioned``): never named, their evidence shared
        out over the rest."""
        q = np.asarray(vectors, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        sig = compute_signals(q, texts, self.vectors, self.labels, len(self.names), self.head, self._plan)
        out = [self.names.index(n) for n in dict.fromkeys(barred) if n in self.names]
        if out and len(out) < len(self.names):
            sig = conditioned(sig, out, self.labels)
        groups = [[self.names.index(n) for n in dict.fromkeys(p) if n in self.names] for p in pools]
        groups = [g for g in groups if len(g) > 1]
        if groups and self.head is not None:
            return self._score_pooled(sig, groups)
        if self.head is not None:
            rank = sig["p_per_intent"]
            feats = features(sig)
            scores = apply_rejector(self.scoring.rejector, feats)
        else:
            rank = sig["cos_per_intent"]
            feats = None
            scores = rank.max(axis=1)
        results = []
        for r in range(len(q)):
            best, second = _top2(rank[r])
            threshold = float(self.thresholds[best])
            s = float(scores[r])
            intent = self.names[best] if s >= threshold else None
            results.append((intent, s, self._explain(r, sig, rank, best, second, threshold, s, feats)))
        return results

    def _score_pooled(self, sig: dict[str, np.ndarray], groups: list[list[int]]
                      ) -> list[tuple[str | None, float, dict[str, Any]]]:
        pooled_sig, columns = pooled(sig, groups)
        rank = pooled_sig["p_per_intent"]
        feats = features(pooled_sig)
        scores = apply_rejector(self.scoring.rejector, feats)
        results = []
        for r in range(len(rank)):
            best, second = _top2(rank[r])
            members = columns[best]
            threshold = float(self.thresholds[members].max())
            likeliest = members[int(np.argmax(sig["p_per_intent"][r, members]))]
            s = float(scores[r])
            why = self._explain(r, sig, sig["p_per_intent"], likeliest, None, threshold, s, feats)
            why["pooled"] = [self.names[i] for i in members] if len(members) > 1 else None
            if second is not None:
                why["runner_up"] = "+".join(self.names[i] for i in columns[second])
                why["margin"] = round(float(rank[r, best] - rank[r, second]), 4)
            results.append((self.names[likeliest] if s >= threshold else None, s, why))
        return results

    def _explain(self, r: int, sig: dict, rank: np.ndarray, best: int, second: int | None, threshold: float,
                 score: float, feats: np.ndarray | None) -> dict[str, Any]:
        sims = sig["sims"][r]
        k = max(1, min(int(self.scoring.k), len(sims)))
        top = np.argpartition(-sims, k - 1)[:k] if len(sims) > k else np.arange(len(sims))
        top = top[np.argsort(-sims[top])]
        out: dict[str, Any] = {
            "method": self.method,
            "candidate": self.names[best],
            "score": round(score, 4),
            "threshold": round(threshold, 4),
            "runner_up": self.names[second] if second is not None else None,
            "margin": round(float(rank[r, best] - rank[r, second]), 4) if second is not None else None,
            "margin_of": "head probability" if self.head is not None else "nearest-example cosine",
            "nearest": [{"intent": self.names[int(self.labels[i])], "example": self.texts[i],
                         "score": round(float(sims[i]), 4)} for i in top],
        }
        if feats is not None:
            out["signals"] = {n: round(float(v), 4) for n, v in zip(SIGNALS, feats[r], strict=True)}
        return out


def _top2(row: np.ndarray) -> tuple[int, int | None]:
    if len(row) == 1:
        return 0, None
    a, b = np.argpartition(-row, 1)[:2]
    return (int(a), int(b)) if row[a] >= row[b] else (int(b), int(a))
