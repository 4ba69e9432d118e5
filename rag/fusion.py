"""Fusing the lexical and dense rankings into one (our own code: Elasticsearch's RRF is licensed).

Two methods, both weighted per retriever:

* ``rrf``: reciprocal rank fusion, score = sum_r w_r / (k + rank_r) (k = 60 by default). Only
  ranks count, so it needs no calibration, but equal weights let a weak retriever drag a strong
  one down (StackFAQ: BM25 0.73, dense 0.91, equal-weight RRF 0.85 nDCG@10).
* ``convex``: score = sum_r w_r * norm_r(score), a convex combination of per-query normalised
  scores; it keeps how *much* better one hit is than the next, which ranks throw away.

Normalisation (``minmax`` by default) maps each retriever's scores for the query onto [0, 1];
a hit missing from one list gets 0 from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from rag.types import Hit

METHODS = ("rrf", "convex")
NORMS = ("minmax", "max", "zscore", "none")


def _normalise(scores: Sequence[float], how: str) -> list[float]:
    if not scores:
        return []
    if how == "none":
        return list(scores)
    if how == "max":
        top = max(scores)
        return [s / top if top > 0 else 0.0 for s in scores]
    if how == "zscore":
        mean = sum(scores) / len(scores)
        sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores)) or 1.0
        # squashed to (0, 1) so a missing hit (0) still ranks below every present one
        return [1.0 / (1.0 + math.exp(-(s - mean) / sd)) for s in scores]
    lo, hi = min(scores), max(scores)
    if hi - lo <= 1e-12:
        return [1.0 for _ in scores]
    return [(s - lo) / (hi - lo) for s in scores]


def _merge(rankings: Mapping[str, Sequence[Hit]], fused: dict[str, float], method: str) -> list[Hit]:
    by_id: dict[str, Hit] = {}
    for name, hits in rankings.items():
        for h in hits:
            merged = by_id.get(h.chunk_id)
            if merged is None:
                merged = replace(h, scores=dict(h.scores))
                by_id[h.chunk_id] = merged
            else:
                merged.scores.update(h.scores)
                if merged.chunk is None:
                    merged.chunk = h.chunk
            merged.scores[f"{name}_rank"] = float(h.rank)
    # ties broken by chunk id so the order is deterministic
    ordered = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))
    out = []
    for rank, (cid, score) in enumerate(ordered, 1):
        h = by_id[cid]
        h.score, h.rank = score, rank
        h.scores[method] = score
        out.append(h)
    return out


def rrf(rankings: Mapping[str, Sequence[Hit]], *, k: int = 60, weights: Mapping[str, float] | None = None,
        limit: int | None = None) -> list[Hit]:
    """Weighted reciprocal rank fusion. ``rankings`` maps a retriever name to its hits, best first."""
    if k < 0:
        raise ValueError("k must be >= 0")
    weights = weights or {}
    fused: dict[str, float] = {}
    for name, hits in rankings.items():
        w = float(weights.get(name, 1.0))
        for rank, h in enumerate(hits, 1):
            fused[h.chunk_id] = fused.get(h.chunk_id, 0.0) + w / (k + rank)
    out = _merge(rankings, fused, "rrf")
    return out[:limit] if limit else out


def convex(rankings: Mapping[str, Sequence[Hit]], *, weights: Mapping[str, float] | None = None,
           norm: str = "minmax", limit: int | None = None) -> list[Hit]:
    """Convex combination of normalised scores (weights are rescaled to sum to 1)."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}")
    weights = {name: float((weights or {}).get(name, 1.0)) for name in rankings}
    total = sum(weights.values()) or 1.0
    fused: dict[str, float] = {}
    for name, hits in rankings.items():
        w = weights[name] / total
        normed = _normalise([h.score for h in hits], norm)
        for h, s in zip(hits, normed, strict=True):
            fused[h.chunk_id] = fused.get(h.chunk_id, 0.0) + w * s
    out = _merge(rankings, fused, "convex")
    return out[:limit] if limit else out


def fuse(rankings: Mapping[str, Sequence[Hit]], *, method: str = "rrf", weights: Mapping[str, float] | None = None,
         k: int = 60, norm: str = "minmax", limit: int | None = None) -> list[Hit]:
    if method == "rrf":
        return rrf(rankings, k=k, weights=weights, limit=limit)
    if method == "convex":
        return convex(rankings, weights=weights, norm=norm, limit=limit)
    raise ValueError(f"fusion method must be one of {METHODS}, not {method!r}")
