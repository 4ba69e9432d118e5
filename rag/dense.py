"""Dense retrieval on pgvector: one ``kb_chunks`` partition per generation with its own HNSW index.

Vectors are L2-normalised, so cosine distance (``<=>``, ``vector_cosine_ops``) ranks like the
dot product and ``1 - distance`` is the cosine similarity reported as the score. The HNSW index
is built after the bulk load (far faster than growing it row by row) with a generous
``maintenance_work_mem``; ``hnsw.ef_search`` is set per query (``SET LOCAL``) from settings.

Embeddings are cached in ``kb_embeddings`` by (encoder, content hash): a rebuild encodes only
chunks whose text changed and copies the other vectors inside Postgres (a join, not a round
trip through Python).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from psycopg import sql
from psycopg_pool import ConnectionPool

from rag.types import Chunk, Hit

_GENERATION_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
CHUNK_COLUMNS = ("chunk_id", "doc_id", "ord", "title", "section", "lang", "category", "source", "updated_at",
                 "content_hash", "text", "keywords")
_PG_TYPES = ("text", "text", "int4", "text", "text", "text", "text", "text", "text", "text", "text", "text")


def partition_name(generation: str) -> str:
    if not _GENERATION_RE.match(generation or ""):
        raise ValueError(f"bad generation name {generation!r}")
    return "kb_chunks_" + re.sub(r"[^a-z0-9_]", "_", generation)


def _ord(chunk: Chunk) -> int:
    tail = chunk.chunk_id.rsplit("#", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def chunk_row(chunk: Chunk) -> tuple:
    return (chunk.chunk_id, chunk.doc_id, _ord(chunk), chunk.title or "", chunk.section or "", chunk.lang or "",
            chunk.category or "", chunk.source or "", chunk.updated_at, chunk.content_hash, chunk.text,
            "\n".join(chunk.keywords))


def row_chunk(row: dict[str, Any]) -> Chunk:
    return Chunk(chunk_id=row["chunk_id"], doc_id=row["doc_id"], text=row["text"], title=row["title"],
                 section=row["section"], lang=row["lang"], category=row["category"], source=row["source"],
                 updated_at=row["updated_at"], content_hash=row["content_hash"],
                 keywords=tuple(k for k in (row.get("keywords") or "").split("\n") if k))


class DenseStore:
    """Chunk rows, vectors and the embedding cache in Postgres. Stateless apart from the pool."""

    def __init__(self, pool: ConnectionPool, *, dim: int = 384, ef_search: int = 100, hnsw_m: int = 16,
                 hnsw_ef_construction: int = 64, maintenance_work_mem: str = "512MB"):
        self.pool = pool
        self.dim = dim
        self.ef_search = ef_search
        self.hnsw_m = hnsw_m
        self.hnsw_ef_construction = hnsw_ef_construction
        self.maintenance_work_mem = maintenance_work_mem

    # ------------------------------------------------------------------ generations

    def create_generation(self, generation: str) -> None:
        part = sql.Identifier(partition_name(generation))
        with self.pool.connection() as conn:
            conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} PARTITION OF kb_chunks FOR VALUES IN ({})").format(
                part, sql.Literal(generation)))

    def drop_generation(self, generation: str) -> None:
        with self.pool.connection() as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(partition_name(generation))))

    def build_index(self, generation: str) -> float:
        """Build the HNSW (cosine) index of a loaded generation; returns seconds taken."""
        t0 = time.perf_counter()
        part = partition_name(generation)
        with self.pool.connection() as conn:
            with conn.transaction():
                conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(
                    sql.Literal(self.maintenance_work_mem)))
                conn.execute(sql.SQL(
                    "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops) "
                    "WITH (m = {}, ef_construction = {})").format(
                    sql.Identifier(part + "_hnsw"), sql.Identifier(part),
                    sql.Literal(int(self.hnsw_m)), sql.Literal(int(self.hnsw_ef_construction))))
                conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(part)))
        return time.perf_counter() - t0

    def count(self, generation: str) -> int:
        with self.pool.connection() as conn:
            row = conn.execute("SELECT count(*) AS n FROM kb_chunks WHERE generation = %s", (generation,)).fetchone()
        return int(row["n"])

    # ------------------------------------------------------------------ embedding cache

    def missing_hashes(self, encoder: str, hashes: Iterable[str]) -> set[str]:
        """Content hashes with no cached vector for ``encoder``."""
        wanted = list(dict.fromkeys(hashes))
        found: set[str] = set()
        with self.pool.connection() as conn:
            for i in range(0, len(wanted), 20000):
                part = wanted[i:i + 20000]
                rows = conn.execute(
                    "SELECT content_hash FROM kb_embeddings WHERE encoder = %s AND content_hash = ANY(%s)",
                    (encoder, part)).fetchall()
                found.update(r["content_hash"] for r in rows)
        return set(wanted) - found

    def cache_vectors(self, encoder: str, hashes: Sequence[str], vectors: np.ndarray) -> int:
        """Store vectors for content hashes (existing entries are kept: same text, same encoder)."""
        if len(hashes) == 0:
            return 0
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape != (len(hashes), self.dim):
            raise ValueError(f"expected {len(hashes)} vectors of dim {self.dim}, got {vectors.shape}")
        with self.pool.connection() as conn:
            with conn.transaction():
                conn.execute("CREATE TEMP TABLE kb_new_vectors (content_hash text, embedding vector) ON COMMIT DROP")
                with conn.cursor().copy("COPY kb_new_vectors (content_hash, embedding) FROM STDIN (FORMAT BINARY)") as cp:
                    cp.set_types(["text", "vector"])
                    for h, v in zip(hashes, vectors, strict=True):
                        cp.write_row((h, v))
                cur = conn.execute(
                    "INSERT INTO kb_embeddings (encoder, content_hash, embedding) "
                    "SELECT DISTINCT ON (content_hash) %s, content_hash, embedding FROM kb_new_vectors "
                    "ON CONFLICT (encoder, content_hash) DO NOTHING", (encoder,))
                return cur.rowcount

    def cached_vectors(self, encoder: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors of ``hashes`` for ``encoder`` (those it has)."""
        wanted = list(dict.fromkeys(hashes))
        out: dict[str, np.ndarray] = {}
        with self.pool.connection() as conn:
            for i in range(0, len(wanted), 20000):
                rows = conn.execute("SELECT content_hash, embedding FROM kb_embeddings WHERE encoder = %s "
                                    "AND content_hash = ANY(%s)", (encoder, wanted[i:i + 20000])).fetchall()
                out.update((r["content_hash"], _array(r["embedding"])) for r in rows)
        return out

    def cache_size(self, encoder: str | None = None) -> int:
        with self.pool.connection() as conn:
            if encoder:
                row = conn.execute("SELECT count(*) AS n FROM kb_embeddings WHERE encoder = %s", (encoder,)).fetchone()
            else:
                row = conn.execute("SELECT count(*) AS n FROM kb_embeddings").fetchone()
        return int(row["n"])

    def embed_missing(self, encoder_obj: Any, encoder: str, chunks: Sequence[Chunk], text_of: Callable[[Chunk], str],
                      *, batch_size: int = 64, progress: bool = False,
                      on_batch: Callable[[int], None] | None = None) -> tuple[int, int]:
        """Encode and cache the chunks whose content hash has no vector yet.

        Returns (encoded, reused). Encoding is batched (a progress bar when asked) and each batch
        is cached as soon as it is done, so an interrupted rebuild keeps what it paid for.
        """
        by_hash: dict[str, Chunk] = {}
        for c in chunks:
            by_hash.setdefault(c.content_hash, c)
        missing = self.missing_hashes(encoder, by_hash)
        todo = [by_hash[h] for h in by_hash if h in missing]
        # Similar lengths per batch pad less; the cache makes the order irrelevant to the result.
        todo.sort(key=lambda c: len(text_of(c)), reverse=True)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(todo), desc="embed", unit="chunk", leave=False)
        step = max(batch_size, 1) * 4
        try:
            for i in range(0, len(todo), step):
                part = todo[i:i + step]
                vecs = encoder_obj.encode_passages([text_of(c) for c in part], batch_size=batch_size)
                self.cache_vectors(encoder, [c.content_hash for c in part], vecs)
                if bar is not None:
                    bar.update(len(part))
                if on_batch is not None:
                    on_batch(len(part))
        finally:
            if bar is not None:
                bar.close()
        return len(todo), len(by_hash) - len(todo)

    # ------------------------------------------------------------------ chunk rows

    def load_chunks(self, generation: str, encoder: str, chunks: Sequence[Chunk]) -> int:
        """Insert chunk rows into ``generation`` taking vectors from the cache (all must be cached).

        Rows already present (same chunk id) are replaced, so a retried load is idempotent.
        """
        if not chunks:
            return 0
        part = sql.Identifier(partition_name(generation))
        cols = sql.SQL(", ").join(map(sql.Identifier, CHUNK_COLUMNS))
        tcols = sql.SQL(", ").join(sql.SQL("t.") + sql.Identifier(c) for c in CHUNK_COLUMNS)
        with self.pool.connection() as conn:
            with conn.transaction():
                conn.execute(sql.SQL(
                    "CREATE TEMP TABLE kb_new_chunks (LIKE kb_chunks INCLUDING DEFAULTS) ON COMMIT DROP"))
                conn.execute("ALTER TABLE kb_new_chunks DROP COLUMN generation, DROP COLUMN embedding")
                with conn.cursor().copy(sql.SQL("COPY kb_new_chunks ({}) FROM STDIN (FORMAT BINARY)").format(cols)) as cp:
                    cp.set_types(list(_PG_TYPES))
                    for c in chunks:
                        cp.write_row(chunk_row(c))
                conn.execute(sql.SQL("DELETE FROM {} p USING kb_new_chunks t WHERE p.chunk_id = t.chunk_id").format(part))
                cur = conn.execute(sql.SQL(
                    "INSERT INTO {} (generation, {}, embedding) "
                    "SELECT %s, {}, e.embedding FROM kb_new_chunks t "
                    "JOIN kb_embeddings e ON e.encoder = %s AND e.content_hash = t.content_hash").format(
                    part, cols, tcols), (generation, encoder))
                inserted = cur.rowcount
                if inserted != len(chunks):
                    raise RuntimeError(f"{len(chunks) - inserted} chunks have no cached vector for encoder {encoder!r}")
        return inserted

    def delete_chunks(self, generation: str, chunk_ids: Iterable[str]) -> int:
        ids = list(chunk_ids)
        if not ids:
            return 0
        with self.pool.connection() as conn:
            cur = conn.execute(sql.SQL("DELETE FROM {} WHERE chunk_id = ANY(%s)").format(
                sql.Identifier(partition_name(generation))), (ids,))
            return cur.rowcount

    def chunk_hashes(self, generation: str) -> dict[str, tuple[str, str]]:
        """chunk_id -> (doc_id, content_hash) of a generation (what sync compares against)."""
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT chunk_id, doc_id, content_hash FROM kb_chunks WHERE generation = %s",
                                (generation,)).fetchall()
        return {r["chunk_id"]: (r["doc_id"], r["content_hash"]) for r in rows}

    def fetch(self, generation: str, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        if not chunk_ids:
            return {}
        cols = sql.SQL(", ").join(map(sql.Identifier, CHUNK_COLUMNS))
        with self.pool.connection() as conn:
            rows = conn.execute(sql.SQL("SELECT {} FROM {} WHERE chunk_id = ANY(%s)").format(
                cols, sql.Identifier(partition_name(generation))), (list(chunk_ids),)).fetchall()
        return {r["chunk_id"]: row_chunk(r) for r in rows}

    def fetch_documents(self, generation: str, doc_ids: Sequence[str] | None) -> dict[str, list[Chunk]]:
        """Every chunk of each document (None: of every document), in reading order: an answer is composed
        from the whole article."""
        if doc_ids is not None and not doc_ids:
            return {}
        cols = sql.SQL(", ").join(map(sql.Identifier, CHUNK_COLUMNS))
        where = sql.SQL("WHERE doc_id = ANY(%s)" if doc_ids is not None else "")
        with self.pool.connection() as conn:
            rows = conn.execute(sql.SQL("SELECT {} FROM {} {} ORDER BY doc_id, ord").format(
                cols, sql.Identifier(partition_name(generation)), where),
                (list(doc_ids),) if doc_ids is not None else ()).fetchall()
        out: dict[str, list[Chunk]] = {}
        for r in rows:
            out.setdefault(r["doc_id"], []).append(row_chunk(r))
        return out

    def docs(self, generation: str) -> int:
        with self.pool.connection() as conn:
            row = conn.execute("SELECT count(DISTINCT doc_id) AS n FROM kb_chunks WHERE generation = %s",
                               (generation,)).fetchone()
        return int(row["n"])

    # ------------------------------------------------------------------ search

    def search(self, generation: str, query_vector: np.ndarray, k: int = 100, *, lang: str | None = None,
               ef_search: int | None = None) -> list[Hit]:
        """Top-k chunks by cosine similarity, with their rows (so dense hits need no second fetch)."""
        if k <= 0:
            return []
        vec = np.asarray(query_vector, dtype=np.float32).reshape(-1)
        if vec.shape[0] != self.dim:
            raise ValueError(f"query vector has dim {vec.shape[0]}, the store holds {self.dim}")
        ef = max(int(ef_search or self.ef_search), k)          # HNSW returns at most ef_search rows
        cols = sql.SQL(", ").join(map(sql.Identifier, CHUNK_COLUMNS))
        where = sql.SQL("WHERE lang = %s") if lang else sql.SQL("")
        q = sql.SQL("SELECT {}, embedding <=> %s AS distance FROM {} {} ORDER BY embedding <=> %s LIMIT %s").format(
            cols, sql.Identifier(partition_name(generation)), where)
        params: list[Any] = [vec]
        if lang:
            params.append(lang)
        params += [vec, k]
        with self.pool.connection() as conn:
            with conn.transaction():
                conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(min(ef, 1000))))
                if lang:   # a filter drops rows after the index scan: let the scan go on until k rows pass
                    conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                rows = conn.execute(q, params).fetchall()
        hits = []
        for rank, r in enumerate(sorted(rows, key=lambda r: r["distance"]), 1):
            score = 1.0 - float(r["distance"])
            hits.append(Hit(chunk_id=r["chunk_id"], score=score, rank=rank, chunk=row_chunk(r),
                            scores={"dense": score}))
        return hits


def _array(value: Any) -> np.ndarray:
    """A pgvector value as float32 (``Vector`` when the type is registered, else its text form)."""
    if hasattr(value, "to_numpy"):
        return np.asarray(value.to_numpy(), dtype=np.float32)
    if isinstance(value, str):
        return np.asarray([float(x) for x in value.strip("[]").split(",")], dtype=np.float32)
    return np.asarray(value, dtype=np.float32)
