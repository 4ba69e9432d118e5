"""How retrieval and answering are tuned: :class:`RetrievalConfig`, and the settings that set it.

Each tunable is declared once, as a field of :class:`RetrievalConfig` (type, default, bounds,
description). The fields marked :data:`SETTING` also become rag's part of the gateway's settings tree,
:class:`RagSettings`, as ``rag_<field>`` (so read from ``SWITCHBOARD_RAG_<FIELD>``): the app's ``Settings``
composes it (as it does the channels' settings), and :meth:`RagSettings.retrieval_config` builds the config.
"""

from __future__ import annotations

from copy import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, SecretStr, create_model

from rag.chunk import DEFAULT_OVERLAP_CHARS, DEFAULT_TARGET_CHARS

#: marks a field of RetrievalConfig that is also a setting (``SWITCHBOARD_RAG_<FIELD>``)
SETTING: dict[str, Any] = {"setting": True}


class RetrievalConfig(BaseModel):
    """How retrieval and answering are tuned (values come from settings via the composition root)."""

    candidates: int = Field(default=100, ge=1, le=1000, description="Hits per retriever before fusion.",
                            json_schema_extra=SETTING)
    fusion: Literal["rrf", "convex"] = Field(default="convex", description="How BM25 and dense rankings fuse.",
                                             json_schema_extra=SETTING)   # see rag/fusion.py, `switchboard rag eval`
    bm25_weight: float = Field(default=1.0, ge=0, description="Fusion weight of BM25.", json_schema_extra=SETTING)
    dense_weight: float = Field(default=3.0, ge=0, description="Fusion weight of dense search.",
                                json_schema_extra=SETTING)
    rrf_k: int = Field(default=60, ge=0, description="RRF constant k.", json_schema_extra=SETTING)
    norm: str = "minmax"
    ef_search: int = Field(default=100, ge=1, le=1000, description="pgvector hnsw.ef_search per query.",
                           json_schema_extra=SETTING)
    chunk_chars: int = Field(default=DEFAULT_TARGET_CHARS, ge=50, description="Target chunk size in characters.",
                             json_schema_extra=SETTING)
    chunk_overlap: int = Field(default=DEFAULT_OVERLAP_CHARS, ge=0, description="Characters of sentence overlap "
                               "between chunks.", json_schema_extra=SETTING)
    max_shrink: float = Field(default=0.5, ge=0, le=1, description="Largest share of the serving documents an index "
                              "rebuild or sync may drop; more (or an empty result) is refused unless --allow-shrink.",
                              json_schema_extra=SETTING)
    rerank_top_n: int = 20
    answer_passages: int = 3           # passages returned with an answer (the evidence)
    answer_threshold: float = Field(default=0.57, ge=0, le=1, description="Below this confidence: no answer, L2 "
                                    "(`switchboard rag calibrate` fits it).", json_schema_extra=SETTING)
    # confidence = sigmoid(slope * (cosine - center[lang]) + question_weight * (question - cosine)
    #                      + coverage_weight * (coverage - 0.5) + margin_weight * margin), see confidence().
    # The weights are a logistic regression fitted on the StackFAQ dev half with multilingual-e5-small
    # (`switchboard rag eval --mode answer --rows` then `switchboard rag calibrate`). The zh center is en's:
    # oppo_zh's incomplete labels call unjudged paraphrases wrong, and a fit on them (center 1.06) answered
    # 20 % of its held-out queries correctly (README, Answerability). Another encoder or knowledge base
    # needs its own fit.
    confidence_center: dict[str, float] = Field(
        default_factory=lambda: {"en": 0.915, "zh": 0.915},
        description="Encoder cosine at which an answer is a coin flip, per query language (JSON); fitted for "
        "multilingual-e5-small (`switchboard rag calibrate`).", json_schema_extra=SETTING)
    confidence_slope: float = Field(default=23.8, description="Logistic slope on the cosine.",
                                    json_schema_extra=SETTING)
    coverage_weight: float = Field(default=3.35, description="Logistic weight of the share of query words found in "
                                   "the passage.", json_schema_extra=SETTING)
    question_weight: float = Field(default=24.3, description="Logistic weight of how much closer the query is to "
                                   "the passage's own questions than to its text.", json_schema_extra=SETTING)
    margin_weight: float = Field(default=29.0, description="Logistic weight of the best document's cosine lead over "
                                 "the next (capped at 0.1).", json_schema_extra=SETTING)
    unknown_weight: float = Field(default=0.0, description="Logistic weight of the share of the query's words that "
                                  "no article uses (negative: fitted per knowledge base, see its calibration file).",
                                  json_schema_extra=SETTING)
    same_language: bool = True         # answer from a passage in the query's language when one is retrieved

    @property
    def weights(self) -> tuple[float, float]:
        """(bm25, dense): the fusion weights as a pair."""
        return (self.bm25_weight, self.dense_weight)

    @weights.setter
    def weights(self, pair: tuple[float, float]) -> None:
        self.bm25_weight, self.dense_weight = pair


#: the file in a knowledge folder that holds the answer confidence fitted for that knowledge base
CALIBRATION_FILE = "calibration.yaml"
#: what a calibration file may set (rag.confidence.PARAMETERS)
CALIBRATED = ("answer_threshold", "confidence_center", "confidence_slope", "question_weight", "coverage_weight",
              "margin_weight", "unknown_weight")


def load_calibration(folder: str | Path | None, encoder: str | None = None) -> dict[str, Any]:
    """The answer confidence fitted for the knowledge base in ``folder`` (its ``calibration.yaml``), or {}.

    The confidence's defaults were fitted on retrieval sets of one answer per document; a help centre whose
    articles hold many entries, lists and tables scores on another scale, so its own fit (``switchboard rag
    calibrate --rows ... --write``) travels with its articles. A file fitted for another encoder is ignored:
    its scale is that encoder's.
    """
    import yaml

    path = Path(folder) / CALIBRATION_FILE if folder else None
    if path is None or not path.is_file():
        return {}
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping with 'encoder' and 'parameters'")
    if encoder and doc.get("encoder") and doc["encoder"] != encoder:
        return {}
    params = doc.get("parameters") or {}
    unknown = set(params) - set(CALIBRATED)
    if unknown:
        raise ValueError(f"{path}: parameters: unknown {sorted(unknown)} (allowed: {', '.join(CALIBRATED)})")
    RetrievalConfig(**params)           # the same bounds as the settings
    return dict(params)


#: the RetrievalConfig fields that are settings, in declaration order
SETTINGS: tuple[str, ...] = tuple(name for name, info in RetrievalConfig.model_fields.items()
                                  if info.json_schema_extra == SETTING)


class _Settings(BaseModel):
    def retrieval_config(self, calibration: dict[str, Any] | None = None) -> RetrievalConfig:
        """The retrieval config these settings describe (what they do not set keeps its default); a knowledge
        base's ``calibration`` (:func:`load_calibration`) replaces the defaults it fits, never a value set
        explicitly (``SWITCHBOARD_RAG_*``)."""
        values = {name: getattr(self, f"rag_{name}") for name in SETTINGS}
        for name, value in (calibration or {}).items():
            if f"rag_{name}" not in self.model_fields_set:
                values[name] = value
        return RetrievalConfig(**values)


def _setting(name: str) -> tuple[Any, Any]:
    info = copy(RetrievalConfig.model_fields[name])
    info.json_schema_extra = None
    return info.annotation, info


if TYPE_CHECKING:
    _RetrievalSettings = _Settings
else:   # ``rag_<field>`` for every RetrievalConfig field marked SETTING, made from its declaration
    _RetrievalSettings = create_model("_RetrievalSettings", __base__=_Settings, __module__=__name__,
                                      **{f"rag_{name}": _setting(name) for name in SETTINGS})


class RagSettings(_RetrievalSettings):
    """rag's settings, composed into the app's Settings (``SWITCHBOARD_RAG_*``): the retrieval config's
    settings, then the optional answer generator's."""

    rag_warm_answers: bool = Field(default=True, description="Encode the knowledge base's lines for answer "
                                   "composition in the background at start-up (off: on first use).")
    rag_generator_url: str | None = Field(default=None, description="OpenAI-compatible endpoint that may rephrase "
                                          "answers (every sentence must be supported); unset = extractive only.")
    rag_generator_model: str | None = None
    rag_generator_api_key: SecretStr | None = None
    rag_generator_timeout_seconds: float = Field(default=3.0, gt=0, le=30, description="The generator's own HTTP "
                                                 "timeout: it runs inside the turn, so it is kept short.")
    rag_generator_concurrency: int = Field(default=2, ge=1, le=64, description="Turns that may call the generator "
                                           "at once; others keep the extractive answer instead of waiting.")
