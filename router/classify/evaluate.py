"""Evaluation of the classifier on JSONL intent sets, and the on-disk embedding cache it relies on.

Files are JSONL lines ``{"text": ..., "intent": ...}``; intent ``oos`` means out of scope.
Metrics follow the CLINC150 convention: in-scope accuracy counts a rejected in-scope message as
wrong; OOS recall/precision treat "UNKNOWN" as the positive class; macro-F1 is over the in-scope
intents plus ``oos`` as one more class.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from router.classify.intents import UNKNOWN

# --- data --------------------------------------------------------------------------------------------------


class DatasetError(ValueError):
    """A JSONL intents file that cannot be read; names the file and line."""


@dataclass
class Example:
    text: str
    intent: str  # "oos" = out of scope


def read_jsonl(path: str | Path) -> list[Example]:
    p = Path(path)
    rows: list[Example] = []
    try:
        fh = p.open(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"{p}: {exc.strerror or exc}") from None
    with fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{p}:{n}: not JSON: {exc.msg}") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str) or not isinstance(
                    obj.get("intent"), str):
                raise DatasetError(f'{p}:{n}: expected {{"text": str, "intent": str}}')
            if not obj["text"].strip():
                raise DatasetError(f"{p}:{n}: empty text")
            rows.append(Example(obj["text"], obj["intent"]))
    if not rows:
        raise DatasetError(f"{p}: no examples")
    return rows


# --- embedding cache ---------------------------------------------------------------------------------------


def encoder_key(encoder: Any) -> str:
    """Identity of an encoder for caching: its name and the fingerprint of its weights' directory."""
    path = Path(getattr(encoder, "path", "") or "")
    stamp = ""
    for name in ("model.safetensors", "pytorch_model.bin", "modules.json"):
        f = path / name
        if f.is_file():
            st = f.stat()
            stamp += f"{name}:{st.st_size}:{int(st.st_mtime)};"
    prompt = getattr(encoder, "query_prompt_name", None)
    raw = f"{getattr(encoder, 'name', 'encoder')}|{path}|{stamp}|{prompt}"
    return f"{getattr(encoder, 'name', 'encoder')}-{hashlib.sha256(raw.encode()).hexdigest()[:12]}"


class EmbeddingCache:
    """Query embeddings of text lists on disk: ``<dir>/<encoder key>/<sha256 of the texts>.npy``.

    Encoding a 15k-line training set takes minutes on a busy 2-core box; repeated evaluations and
    fits of the same file reuse the vectors. A corrupt or mismatched file is recomputed.
    """

    def __init__(self, root: str | Path | None):
        self.root = Path(root) if root else None

    def encode(self, encoder: Any, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        texts = list(texts)
        if self.root is None:
            return encoder.encode_queries(texts, show_progress=progress)
        digest = hashlib.sha256("\x1e".join(texts).encode("utf-8")).hexdigest()[:24]
        folder = self.root / encoder_key(encoder)
        path = folder / f"{digest}.npy"
        if path.is_file():
            try:
                vecs = np.load(path)
                if vecs.shape == (len(texts), encoder.dim):
                    return vecs
            except (OSError, ValueError):
                pass
        vecs = encoder.encode_queries(texts, show_progress=progress)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{digest}.{time.time_ns()}.npy"
        np.save(tmp, vecs)
        tmp.replace(path)
        return vecs


# --- metrics -----------------------------------------------------------------------------------------------


def metrics(gold: Sequence[str], pred: Sequence[str | None]) -> dict[str, Any]:
    """In-scope accuracy, OOS recall/precision, macro-F1 (``pred`` None = UNKNOWN)."""
    from sklearn.metrics import f1_score

    p = [UNKNOWN if x is None else x for x in pred]
    g = list(gold)
    in_idx = [i for i, x in enumerate(g) if x != UNKNOWN]
    oos_idx = [i for i, x in enumerate(g) if x == UNKNOWN]
    pred_oos = [i for i, x in enumerate(p) if x == UNKNOWN]
    labels = sorted(set(g))
    return {
        "n": len(g),
        "n_in_scope": len(in_idx),
        "n_oos": len(oos_idx),
        "in_scope_accuracy": (sum(p[i] == g[i] for i in in_idx) / len(in_idx)) if in_idx else None,
        "oos_recall": (sum(p[i] == UNKNOWN for i in oos_idx) / len(oos_idx)) if oos_idx else None,
        "oos_precision": (sum(g[i] == UNKNOWN for i in pred_oos) / len(pred_oos)) if pred_oos else None,
        "macro_f1": float(f1_score(g, p, labels=labels, average="macro", zero_division=0)),
        "accuracy": sum(a == b for a, b in zip(g, p, strict=True)) / len(g) if g else None,
    }


def confusion_pairs(gold: Sequence[str], pred: Sequence[str | None], top: int = 25) -> list[dict[str, Any]]:
    """The most frequent (gold, predicted) mistakes."""
    c = Counter((g, UNKNOWN if p is None else p) for g, p in zip(gold, pred, strict=True)
                if g != (UNKNOWN if p is None else p))
    return [{"gold": g, "predicted": p, "count": n} for (g, p), n in c.most_common(top)]
