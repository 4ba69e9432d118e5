"""Data passed between retrieval stages and out of the rag package (plain data, no behaviour)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Chunk:
    """One indexed piece of a knowledge document. ``chunk_id`` is shared by the lexical and dense stores."""

    chunk_id: str
    doc_id: str
    text: str
    title: str = ""
    section: str = ""            # heading path, e.g. "Refunds > Timelines"
    lang: str = ""
    category: str = ""
    source: str = ""
    updated_at: str | None = None
    content_hash: str = ""
    keywords: tuple[str, ...] = ()   # what customers call the whole article (its front matter's "keywords")

    def said(self) -> str:
        """Everything the passage says, its headings and its article's keywords included: the words a question
        can find in it."""
        return f"{self.title}\n{' '.join(self.keywords)}\n{self.section}\n{self.text}"


@dataclass
class Hit:
    """A retrieved chunk with its score from one retriever (or the fused / reranked score)."""

    chunk_id: str
    score: float
    rank: int = 0
    chunk: Chunk | None = None
    scores: dict[str, float] = field(default_factory=dict)   # per stage: bm25, dense, rrf, rerank ...

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return d


@dataclass
class Answer:
    """What L1 gets from the knowledge base.

    ``answered`` is False when the evidence is not confident enough: the router then sends the
    conversation to L2 with ``passages`` as the evidence. ``text`` is made only of text taken from
    the cited passages (or a generated rephrasing whose every sentence a cited passage supports).
    """

    answered: bool
    query: str
    text: str | None = None
    citations: list[dict[str, Any]] = field(default_factory=list)   # doc_id, chunk_id, title, section, source, score
    confidence: float = 0.0
    passages: list[Hit] = field(default_factory=list)
    reason: str | None = None                                       # why there is no answer
    timings: dict[str, float] = field(default_factory=dict)         # seconds per stage: rewrite, bm25, dense, fuse, rerank, answer
    rewritten_query: str | None = None
    signals: dict[str, Any] = field(default_factory=dict)           # what the confidence was computed from
    draft: str | None = None                                        # the composed text, answered or not (L2's draft)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
