"""The answer confidence: one function, used by the knowledge base to decide and by the evaluation to score.

A logistic of signals of the best passage (rag.service.KnowledgeBase.signals): its dense cosine relative to
a per-language center, how much closer the query is to what the passage says it answers than to its text,
the share of the query's words it contains, its cosine lead over the next document (capped), and the share of
the query's words that the knowledge base never uses. A missing signal is neutral; a passage the encoder did not
rank at all gets 0. ``rag calibrate`` fits the parameters (for one knowledge base: its calibration file,
rag.config.load_calibration).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MARGIN_CAP = 0.1            # a lead beyond this over the next document says nothing more
PARAMETERS = ("answer_threshold", "confidence_center", "confidence_slope", "question_weight", "coverage_weight",
              "margin_weight", "unknown_weight")


def features(sig: Mapping[str, Any]) -> list[float] | None:
    """The confidence's terms (cosine, question - cosine, coverage - 0.5, capped margin, unknown words); None: 0
    by rule."""
    cos = sig.get("cosine")
    if cos is None:             # found by BM25 only: the encoder did not rank it in its top candidates
        return None
    q = sig.get("question")
    m = sig.get("margin")
    return [float(cos), float((q if q is not None else cos) - cos), float(sig.get("coverage") or 0.0) - 0.5,
            float(min(m if m is not None else MARGIN_CAP, MARGIN_CAP)), float(sig.get("unknown") or 0.0)]


def model_of(config: Any) -> dict[str, Any]:
    """The parameters of a RetrievalConfig (or anything with the same attributes) as a plain dict."""
    return {"answer_threshold": config.answer_threshold, "confidence_center": dict(config.confidence_center),
            "confidence_slope": config.confidence_slope, "question_weight": config.question_weight,
            "coverage_weight": config.coverage_weight, "margin_weight": config.margin_weight,
            "unknown_weight": config.unknown_weight}


def confidence(sig: Mapping[str, Any], model: Mapping[str, Any]) -> float:
    """P(the best passage answers the query) in (0, 1) under ``model`` (see :func:`model_of`)."""
    f = features(sig)
    if f is None:
        return 0.0
    centers = model.get("confidence_center") or {}
    center = centers.get(sig.get("lang"), sum(centers.values()) / len(centers) if centers else 0.85)
    z = (model["confidence_slope"] * (f[0] - center) + model["question_weight"] * f[1]
         + model["coverage_weight"] * f[2] + model["margin_weight"] * f[3]
         + float(model.get("unknown_weight") or 0.0) * f[4])
    return float(1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0))))
