"""Cross-encoder rerank of the first-stage candidates, fused with the first-stage ranking.

Why fuse instead of replacing: a small cross-encoder trained on a few hundred support questions
is not reliably better than the dense retriever on its own, but it is usefully *different*.
The blend weight is calibrated at training time on queries the model did not train on (see
rag/rerank_train.py) and written into the model folder, so a weak reranker gets a small (or
zero) weight instead of making the ranking worse.

Cost: a cross-encoder reads every (query, passage) pair, so latency is N x tokens x layers.
The defaults (N=20, 128 tokens, a 6-layer student) keep an L1 answer inside ~500 ms on 2
cores; benchmarks/rerank_latency.py measures the trade-offs.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rag.types import Chunk, Hit

CONFIG_NAME = "switchboard-reranker.json"
DEFAULT_TOP_N = 20
DEFAULT_MAX_LENGTH = 128
RRF_K = 60
BlendMethod = Literal["rrf", "minmax"]


@dataclass
class Blend:
    """How the rerank score is combined with the first stage.

    ``weight`` is the rerank share in [0, 1] (0 = first stage only, 1 = rerank only).
    ``rrf``: weighted reciprocal ranks (scale-free, robust to any first stage);
    ``minmax``: weighted per-query min-max normalised scores (keeps score margins).
    """

    weight: float = 0.5
    method: BlendMethod = "rrf"
    k: int = RRF_K

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.weight) <= 1.0:
            raise ValueError(f"blend weight must be in [0, 1], not {self.weight}")
        if self.method not in ("rrf", "minmax"):
            raise ValueError(f"blend method must be 'rrf' or 'minmax', not {self.method!r}")
        self.weight = float(self.weight)


@dataclass
class RerankerConfig:
    """What the trainer writes next to the weights (``switchboard-reranker.json``)."""

    top_n: int = DEFAULT_TOP_N
    max_length: int = DEFAULT_MAX_LENGTH
    blend: Blend = field(default_factory=Blend)
    platt: tuple[float, float] | None = None   # P(relevant) = sigmoid(a * logit + b), fitted on calibration
    heldout_queries: list[str] = field(default_factory=list)   # never trained on: evaluate on these only
    extra: dict[str, Any] = field(default_factory=dict)        # training summary (seed, split, metrics ...)

    @classmethod
    def load(cls, model_dir: str | Path) -> RerankerConfig:
        path = Path(model_dir) / CONFIG_NAME
        if not path.is_file():
            return cls()
        raw = json.loads(path.read_text(encoding="utf-8"))
        known = {"top_n", "max_length", "blend", "platt", "heldout_queries"}
        platt = raw.get("platt")
        return cls(
            top_n=int(raw.get("top_n", DEFAULT_TOP_N)),
            max_length=int(raw.get("max_length", DEFAULT_MAX_LENGTH)),
            blend=Blend(**raw.get("blend", {})),
            platt=(float(platt["a"]), float(platt["b"])) if platt else None,
            heldout_queries=[str(q) for q in raw.get("heldout_queries", [])],
            extra={k: v for k, v in raw.items() if k not in known},
        )

    def save(self, model_dir: str | Path) -> None:
        data = {"top_n": self.top_n, "max_length": self.max_length, "blend": asdict(self.blend),
                "platt": {"a": self.platt[0], "b": self.platt[1]} if self.platt else None,
                **self.extra, "heldout_queries": self.heldout_queries}
        path = Path(model_dir) / CONFIG_NAME
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)


def heldout_query_ids(model_dir: str | Path) -> set[str] | None:
    """Query ids the reranker in ``model_dir`` never saw in training (None: unknown, e.g. not ours)."""
    path = Path(model_dir) / CONFIG_NAME
    if not path.is_file():
        return None
    return set(RerankerConfig.load(model_dir).heldout_queries)


def passage_text(title: str, text: str, section: str = "") -> str:
    """The passage side of a pair, identical at training and at query time."""
    head = title.strip()
    if section.strip() and section.strip() != head:
        head = f"{head} > {section.strip()}" if head else section.strip()
    return f"{head}\n{text.strip()}" if head else text.strip()


def chunk_text(chunk: Chunk) -> str:
    return passage_text(chunk.title, chunk.text, chunk.section)


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def _minmax(x: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    lo = float(np.min(x)) if lo is None else lo
    hi = float(np.max(x)) if hi is None else hi
    if not math.isfinite(hi - lo) or hi - lo <= 1e-12:
        return np.ones_like(x, dtype=np.float64)
    return (x.astype(np.float64) - lo) / (hi - lo)


def blend_scores(first_scores: Sequence[float], rerank_scores: Sequence[float], blend: Blend) -> np.ndarray:
    """Fused scores for a candidate list given in first-stage order (best first).

    ``rerank_scores`` may be shorter than ``first_scores``: the tail was not reranked and is
    ranked as if tied last by the reranker, so it always stays below the reranked head.
    Weight 0 reproduces the first-stage order exactly.
    """
    first = np.asarray(first_scores, dtype=np.float64)
    rr = np.asarray(rerank_scores, dtype=np.float64)
    n, m = len(first), len(rr)
    if m > n:
        raise ValueError("more rerank scores than candidates")
    w = blend.weight
    if blend.method == "rrf":
        first_rank = np.arange(1, n + 1, dtype=np.float64)
        rerank_rank = np.full(n, m + 1, dtype=np.float64)
        if m:
            order = np.argsort(-rr, kind="stable")
            rerank_rank[order] = np.arange(1, m + 1)
        return w / (blend.k + rerank_rank) + (1 - w) / (blend.k + first_rank)
    # minmax: normalise on the reranked head; the tail falls at or below 0 on both scales.
    head = first[:m] if m else first
    f = _minmax(first, float(np.min(head)), float(np.max(head))) if n else first
    r = np.zeros(n, dtype=np.float64)
    if m:
        r[:m] = _minmax(rr)
    return w * r + (1 - w) * f


class CrossEncoderReranker:
    """A sentence-transformers CrossEncoder loaded offline, plus its calibrated blend.

    ``top_n`` / ``max_length`` / ``blend`` default to what the trainer calibrated (the model
    folder's ``switchboard-reranker.json``), else N=20, 128 tokens, an even RRF blend.
    ``quantize=True`` applies dynamic int8 quantisation to the linear layers (faster on CPU);
    ``bf16=True`` scores under bfloat16 autocast (fp32 weights; faster where the CPU has bf16 dot
    products, see ``rag.encoder_backends.bf16_supported``, with scores within ~1e-2 of fp32's).
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        top_n: int | None = None,
        max_length: int | None = None,
        threads: int | None = 1,
        blend: Blend | None = None,
        batch_size: int = 16,
        quantize: bool = False,
        bf16: bool = False,
    ):
        path = Path(model_dir).expanduser()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a cross-encoder model directory (no config.json)")
        from rag.encoder import force_offline

        force_offline()
        import torch

        if threads:
            torch.set_num_threads(int(threads))
        from sentence_transformers import CrossEncoder
        from transformers.utils import logging as hf_logging

        self.config = RerankerConfig.load(path)
        self.top_n = int(top_n if top_n is not None else self.config.top_n)
        self.max_length = int(max_length if max_length is not None else self.config.max_length)
        if self.top_n < 1 or self.max_length < 16:
            raise ValueError("top_n must be >= 1 and max_length >= 16")
        self.blend = blend if blend is not None else self.config.blend
        self.batch_size = max(1, int(batch_size))
        self.path = path.resolve()
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            self.model = CrossEncoder(str(path), device="cpu", local_files_only=True, max_length=self.max_length)
        finally:
            hf_logging.set_verbosity(verbosity)
        self.model.max_seq_length = self.max_length
        if int(getattr(self.model, "num_labels", 1)) != 1:
            raise ValueError(f"{path} has {self.model.num_labels} labels; a reranker needs one relevance logit")
        self.model.eval()
        self.quantized = False
        if quantize:
            self.model = torch.ao.quantization.quantize_dynamic(self.model, {torch.nn.Linear}, dtype=torch.qint8)
            self.quantized = True
        self.bf16 = bool(bf16) and not self.quantized
        self._identity = torch.nn.Identity()
        self._lock = threading.Lock()   # fast tokenizers are not re-entrant

    def __repr__(self) -> str:
        return (f"CrossEncoderReranker(path={str(self.path)!r}, top_n={self.top_n}, max_length={self.max_length}, "
                f"blend={self.blend})")

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Raw relevance logits for (query, passage) pairs."""
        if not passages:
            return np.empty(0, dtype=np.float32)
        import torch

        pairs = [(query, p) for p in passages]
        with self._lock, torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            out = self.model.predict(pairs, batch_size=self.batch_size, activation_fn=self._identity,
                                     show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float32).reshape(-1)

    def rerank(self, query: str, hits: list[Hit]) -> list[Hit]:
        """Rerank the first ``top_n`` hits (given best first) and fuse with their first-stage order.

        Sets ``hit.scores["rerank"]`` (logit) on the reranked head -- and ``hit.scores["rerank_prob"]``,
        the probability that the passage answers the query, when the trainer calibrated one --, keeps
        the first-stage score in
        ``hit.scores["first_stage"]``, and returns all hits re-sorted by the fused ``score`` with
        ranks 1..n. Hits beyond ``top_n`` keep their relative order below the head.
        """
        if not hits:
            return []
        ordered = sorted(hits, key=lambda h: h.rank) if all(h.rank > 0 for h in hits) else list(hits)
        head = ordered[: self.top_n]
        missing = [h.chunk_id for h in head if h.chunk is None]
        if missing:
            raise ValueError(f"rerank needs the chunk text of every candidate; missing for {missing[:3]}")
        logits = self.score(query, [chunk_text(h.chunk) for h in head])  # type: ignore[arg-type]
        fused = blend_scores([h.score for h in ordered], logits, self.blend)
        platt = self.config.platt
        for h, logit in zip(head, logits, strict=True):
            h.scores["rerank"] = float(logit)
            if platt is not None:
                h.scores["rerank_prob"] = _sigmoid(platt[0] * float(logit) + platt[1])
        for h, s in zip(ordered, fused, strict=True):
            h.scores.setdefault("first_stage", float(h.score))
            h.score = float(s)
        out = [ordered[i] for i in np.argsort(-fused, kind="stable")]
        for rank, h in enumerate(out, start=1):
            h.rank = rank
        return out
