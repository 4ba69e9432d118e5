"""The lexical (BM25) search protocol. One file per backend: tantivy (embedded), elasticsearch (scale-out).

A backend holds one index per *generation*; the blue/green rebuild writes a new generation
while the current one serves, then switches atomically.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from rag.types import Chunk, Hit


@runtime_checkable
class LexicalIndex(Protocol):
    name: str   # "tantivy" | "elasticsearch"

    def create_generation(self, generation: str) -> None:
        """Create an empty index for ``generation`` (idempotent)."""

    def add(self, generation: str, chunks: Iterable[Chunk]) -> int:
        """Index chunks into ``generation``; returns how many were written. Commits before returning."""

    def delete(self, generation: str, chunk_ids: Iterable[str]) -> int:
        """Remove chunks by id from ``generation``."""

    def count(self, generation: str) -> int:
        """Number of chunks in ``generation``."""

    def activate(self, generation: str) -> None:
        """Make ``generation`` the one searched by default (tantivy: pointer file; ES: alias swap)."""

    def active(self) -> str | None:
        """The generation searched by default, if any."""

    def search(self, query: str, k: int = 100, *, generation: str | None = None,
               lang: str | None = None) -> list[Hit]:
        """BM25 top-k for free user text (tokenised and turned into term queries, never parsed as syntax)."""

    def drop_generation(self, generation: str) -> None:
        """Delete a generation's index."""

    def generations(self) -> list[str]:
        """Existing generations, oldest first."""
