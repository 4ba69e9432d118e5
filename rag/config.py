"""How retrieval and answering are tuned: :class:`RetrievalConfig`, and the settings that set it.

:class:`RagSettings` is rag's part of the gateway's settings tree: the app's ``Settings`` composes it
(as it does the channels' settings), so each field is read from ``SWITCHBOARD_RAG_*``. Its defaults are
:class:`RetrievalConfig`'s, written once, here; :meth:`RagSettings.retrieval_config` builds the config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from rag.chunk import DEFAULT_OVERLAP_CHARS, DEFAULT_TARGET_CHARS


@dataclass
class RetrievalConfig:
    """How retrieval and answering are tuned (values come from settings via the composition root)."""

    candidates: int = 100              # per retriever, before fusion
    fusion: str = "convex"             # rrf | convex (see rag/fusion.py and `switchboard rag eval`)
    weights: tuple[float, float] = (1.0, 3.0)   # (bm25, dense)
    rrf_k: int = 60
    norm: str = "minmax"
    ef_search: int = 100
    rerank_top_n: int = 20
    answer_passages: int = 3           # passages returned with an answer (the evidence)
    answer_threshold: float = 0.57     # confidence below this: no answer, L2 gets the evidence
    # confidence = sigmoid(slope * (cosine - center[lang]) + question_weight * (question - cosine)
    #                      + coverage_weight * (coverage - 0.5) + margin_weight * margin), see confidence().
    # The weights are a logistic regression fitted on the StackFAQ dev half with multilingual-e5-small
    # (`switchboard rag eval --mode answer --rows` then `switchboard rag calibrate`). The zh center is en's:
    # oppo_zh's incomplete labels call unjudged paraphrases wrong, and a fit on them (center 1.06) answered
    # 20 % of its held-out queries correctly (README, Answerability). Another encoder or knowledge base
    # needs its own fit.
    confidence_center: dict[str, float] = field(default_factory=lambda: {"en": 0.915, "zh": 0.915})
    confidence_slope: float = 23.8
    coverage_weight: float = 3.35
    question_weight: float = 24.3
    margin_weight: float = 29.0
    same_language: bool = True         # answer from a passage in the query's language when one is retrieved
    chunk_chars: int = DEFAULT_TARGET_CHARS
    chunk_overlap: int = DEFAULT_OVERLAP_CHARS
    max_shrink: float = 0.5            # a rebuild/sync dropping more of the serving documents is refused


_D = RetrievalConfig()


class RagSettings(BaseModel):
    """rag's settings, composed into the app's Settings (``SWITCHBOARD_RAG_*``)."""

    rag_candidates: int = Field(default=_D.candidates, ge=1, le=1000, description="Hits per retriever before fusion.")
    rag_fusion: Literal["rrf", "convex"] = Field(default=_D.fusion, description="How BM25 and dense rankings fuse.")
    rag_bm25_weight: float = Field(default=_D.weights[0], ge=0, description="Fusion weight of BM25.")
    rag_dense_weight: float = Field(default=_D.weights[1], ge=0, description="Fusion weight of dense search.")
    rag_rrf_k: int = Field(default=_D.rrf_k, ge=0, description="RRF constant k.")
    rag_ef_search: int = Field(default=_D.ef_search, ge=1, le=1000, description="pgvector hnsw.ef_search per query.")
    rag_chunk_chars: int = Field(default=_D.chunk_chars, ge=50, description="Target chunk size in characters.")
    rag_chunk_overlap: int = Field(default=_D.chunk_overlap, ge=0,
                                   description="Characters of sentence overlap between chunks.")
    rag_max_shrink: float = Field(default=_D.max_shrink, ge=0, le=1, description="Largest share of the serving "
                                  "documents an index rebuild or sync may drop; more (or an empty result) is "
                                  "refused unless --allow-shrink.")
    rag_answer_threshold: float = Field(default=_D.answer_threshold, ge=0, le=1,
                                        description="Below this confidence: no answer, L2 (`switchboard rag calibrate` fits it).")
    rag_confidence_center: dict[str, float] = Field(
        default_factory=lambda: dict(_D.confidence_center),
        description="Encoder cosine at which an answer is a coin flip, per query language (JSON); fitted for "
        "multilingual-e5-small (`switchboard rag calibrate`).")
    rag_confidence_slope: float = Field(default=_D.confidence_slope, description="Logistic slope on the cosine.")
    rag_coverage_weight: float = Field(default=_D.coverage_weight, description="Logistic weight of the share of "
                                       "query words found in the passage.")
    rag_question_weight: float = Field(default=_D.question_weight, description="Logistic weight of how much closer "
                                       "the query is to the passage's own questions than to its text.")
    rag_margin_weight: float = Field(default=_D.margin_weight, description="Logistic weight of the best document's "
                                     "cosine lead over the next (capped at 0.1).")
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

    def retrieval_config(self) -> RetrievalConfig:
        """The retrieval config these settings describe (what they do not set keeps its default)."""
        return RetrievalConfig(
            candidates=self.rag_candidates, fusion=self.rag_fusion,
            weights=(self.rag_bm25_weight, self.rag_dense_weight), rrf_k=self.rag_rrf_k,
            ef_search=self.rag_ef_search, answer_threshold=self.rag_answer_threshold,
            confidence_center=dict(self.rag_confidence_center), confidence_slope=self.rag_confidence_slope,
            coverage_weight=self.rag_coverage_weight, question_weight=self.rag_question_weight,
            margin_weight=self.rag_margin_weight, chunk_chars=self.rag_chunk_chars,
            chunk_overlap=self.rag_chunk_overlap, max_shrink=self.rag_max_shrink,
        )
