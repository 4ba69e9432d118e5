"""Blue/green generations of the knowledge indexes: rebuild, sync, rollback.

A rebuild writes a complete new generation (pgvector partition + HNSW index, and a lexical
index) while the current one keeps serving, checks that both stores hold every chunk, then
flips the single pointer row in ``kb_pointer`` in one transaction. The generation it replaced
stays as ``previous`` for :meth:`Generations.rollback`; older ones are dropped. Embedding is the
expensive part, so vectors come from the (encoder, content hash) cache whenever the text is
unchanged. One rebuild/sync/rollback at a time, across processes, by a Postgres advisory lock.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from rag.chunk import DEFAULT_OVERLAP_CHARS, DEFAULT_TARGET_CHARS, Document, chunk_documents, embed_text
from rag.dense import DenseStore
from rag.ingest import load_documents
from rag.lexical.base import LexicalIndex
from rag.types import Chunk

log = logging.getLogger(__name__)

LOCK_KEY = 0x5342_4B42  # "SBKB": one rebuild/sync/rollback at a time
KEEP_EVAL_HOURS = 24


class RebuildInProgress(RuntimeError):
    """Another process holds the rebuild lock."""


class GenerationError(RuntimeError):
    """A generation failed verification, or the requested switch is impossible."""


def new_generation_id(prefix: str = "g") -> str:
    now = dt.datetime.now(dt.timezone.utc)
    return f"{prefix}{now:%Y%m%dt%H%M%S}-{secrets.token_hex(3)}"


def _batched(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


class Generations:
    """Builds, switches and rolls back generations over one dense store and one lexical index."""

    def __init__(self, pool: ConnectionPool, dense: DenseStore, lexical: LexicalIndex, encoder: Any, *,
                 encoder_name: str | None = None, target_chars: int = DEFAULT_TARGET_CHARS,
                 overlap_chars: int = DEFAULT_OVERLAP_CHARS, embed_batch_size: int = 32, progress: bool = False):
        self.pool = pool
        self.dense = dense
        self.lexical = lexical
        self.encoder = encoder
        self.encoder_name = encoder_name or getattr(encoder, "name", None) or "encoder"
        self.target_chars = target_chars
        self.overlap_chars = overlap_chars
        self.embed_batch_size = embed_batch_size
        self.progress = progress

    # ------------------------------------------------------------------ pointer and status

    def pointer(self) -> dict[str, Any]:
        with self.pool.connection() as conn:
            row = conn.execute("SELECT active, previous, switched_at FROM kb_pointer WHERE name = 'default'").fetchone()
        return dict(row) if row else {"active": None, "previous": None, "switched_at": None}

    def active(self) -> str | None:
        return self.pointer()["active"]

    def status(self) -> dict[str, Any]:
        ptr = self.pointer()
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT id, status, purpose, encoder, lexical, source, docs, chunks, stats, created_at, "
                "finished_at, activated_at FROM kb_generations WHERE status <> 'retired' ORDER BY created_at"
            ).fetchall()
        return {"active": ptr["active"], "previous": ptr["previous"], "switched_at": ptr["switched_at"],
                "encoder": self.encoder_name, "lexical": self.lexical.name, "generations": [dict(r) for r in rows]}

    @contextmanager
    def lock(self, wait: bool = False) -> Iterator[None]:
        """The cross-process rebuild lock, on a connection of its own (no transaction held open)."""
        with psycopg.connect(self.pool.conninfo, autocommit=True) as conn:
            if wait:
                conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
            else:
                got = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]
                if not got:
                    raise RebuildInProgress("another rebuild, sync or rollback of the knowledge indexes is running")
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))

    # ------------------------------------------------------------------ building

    def chunk(self, docs: Iterable[Document]) -> list[Chunk]:
        return list(chunk_documents(docs, target_chars=self.target_chars, overlap_chars=self.overlap_chars))

    def _set(self, generation: str, **fields: Any) -> None:
        cols = ", ".join(f"{k} = %s" for k in fields)
        values = [Jsonb(v) if k == "stats" else v for k, v in fields.items()]
        with self.pool.connection() as conn:
            conn.execute(f"UPDATE kb_generations SET {cols} WHERE id = %s", (*values, generation))

    def _drop(self, generation: str) -> None:
        for step in (self.dense.drop_generation, self.lexical.drop_generation):
            try:
                step(generation)
            except Exception:  # noqa: BLE001 - cleanup must go on with the other store
                log.exception("dropping generation %s", generation)

    def build(self, docs: Sequence[Document], *, source: str = "", purpose: str = "serve",
              on_progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
        """Write a complete, verified generation (not activated). Returns its summary.

        ``on_progress(stage, done, total)`` is called during the embed and index stages.
        """
        t0 = time.perf_counter()
        generation = new_generation_id("e" if purpose == "eval" else "g")
        base = self.active() if purpose == "serve" else None
        chunks = self.chunk(docs)
        with self.pool.connection() as conn:
            conn.execute(
                "INSERT INTO kb_generations (id, status, purpose, encoder, lexical, source, docs, chunks) "
                "VALUES (%s, 'building', %s, %s, %s, %s, %s, %s)",
                (generation, purpose, self.encoder_name, self.lexical.name, source, len(docs), len(chunks)))
        timings: dict[str, float] = {}
        try:
            t = time.perf_counter()
            done = 0

            def embedded(n: int) -> None:
                nonlocal done
                done += n
                if on_progress:
                    on_progress("embed", done, len(chunks))

            encoded, reused = self.dense.embed_missing(
                self.encoder, self.encoder_name, chunks, embed_text, batch_size=self.embed_batch_size,
                progress=self.progress, on_batch=embedded)
            timings["embed"] = time.perf_counter() - t

            t = time.perf_counter()
            self.dense.create_generation(generation)
            for part in _batched(chunks, 20000):
                self.dense.load_chunks(generation, self.encoder_name, part)
            timings["load"] = time.perf_counter() - t
            timings["hnsw"] = self.dense.build_index(generation)

            t = time.perf_counter()
            to_index, lexical_reused = self._start_lexical(generation, chunks, base if purpose == "serve" else None)
            bar = None
            if self.progress:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(to_index), desc="lexical index", unit="chunk", leave=False)
            written = 0
            for part in _batched(to_index, 5000):
                written += self.lexical.add(generation, part)
                if bar is not None:
                    bar.update(len(part))
                if on_progress:
                    on_progress("lexical", written, len(to_index))
            if bar is not None:
                bar.close()
            timings["lexical"] = time.perf_counter() - t

            dense_n, lexical_n = self.dense.count(generation), self.lexical.count(generation)
            if not (dense_n == lexical_n == len(chunks)):
                raise GenerationError(
                    f"generation {generation} failed verification: {len(chunks)} chunks, "
                    f"{dense_n} in pgvector, {lexical_n} in {self.lexical.name}")
            seconds = time.perf_counter() - t0
            summary = {
                "generation": generation, "docs": len(docs), "chunks": len(chunks), "encoded": encoded,
                "reused": reused, "lexical_reused": lexical_reused, "seconds": round(seconds, 3),
                "chunks_per_s": round(len(chunks) / seconds, 1) if seconds > 0 else None,
                "embed_chunks_per_s": round(encoded / timings["embed"], 1) if encoded and timings["embed"] else None,
                "timings": {k: round(v, 3) for k, v in timings.items()}, "encoder": self.encoder_name,
                "lexical": self.lexical.name,
            }
            self._set(generation, status="ready", finished_at=dt.datetime.now(dt.timezone.utc), stats=summary)
            return summary
        except BaseException as exc:
            self._drop(generation)
            try:
                self._set(generation, status="failed", error=f"{type(exc).__name__}: {exc}"[:2000],
                          finished_at=dt.datetime.now(dt.timezone.utc))
            except Exception:  # noqa: BLE001
                log.exception("recording failed generation %s", generation)
            raise

    def _start_lexical(self, generation: str, chunks: Sequence[Chunk], base: str | None) -> tuple[list[Chunk], int]:
        """Create the lexical index of ``generation``; returns the chunks still to index and how many were reused.

        When the backend can copy the serving generation (same tokenizer), only chunks whose
        content hash changed are deleted and indexed again: tokenising is most of the lexical cost.
        """
        clone = getattr(self.lexical, "clone_generation", None)
        if base and clone is not None and clone(base, generation):
            old = self.dense.chunk_hashes(base)
            new = {c.chunk_id: c.content_hash for c in chunks}
            stale = [cid for cid, (_, h) in old.items() if new.get(cid) != h]
            self.lexical.delete(generation, stale)
            todo = [c for c in chunks if old.get(c.chunk_id, ("", ""))[1] != c.content_hash]
            return todo, len(chunks) - len(todo)
        self.lexical.create_generation(generation)
        return list(chunks), 0

    def _switch(self, generation: str) -> dict[str, Any]:
        """Flip the pointer to ``generation`` in one transaction; the old active becomes previous."""
        with self.pool.connection() as conn:
            with conn.transaction():
                ptr = conn.execute("SELECT active, previous FROM kb_pointer WHERE name = 'default' FOR UPDATE").fetchone()
                old_active, old_previous = ptr["active"], ptr["previous"]
                conn.execute("UPDATE kb_pointer SET active = %s, previous = %s, switched_at = now() "
                             "WHERE name = 'default'", (generation, old_active))
                conn.execute("UPDATE kb_generations SET status = 'active', activated_at = now() WHERE id = %s",
                             (generation,))
                if old_active and old_active != generation:
                    conn.execute("UPDATE kb_generations SET status = 'previous' WHERE id = %s", (old_active,))
                if old_previous and old_previous not in (generation, old_active):
                    conn.execute("UPDATE kb_generations SET status = 'retired' WHERE id = %s", (old_previous,))
        self.lexical.activate(generation)    # tantivy ACTIVE file / ES alias; the Postgres pointer is the truth
        retired = [g for g in (old_previous,) if g and g not in (generation, old_active)]
        for g in retired:
            self._drop(g)
        return {"active": generation, "previous": old_active, "dropped": retired}

    def _cleanup_leftovers(self) -> list[str]:
        """Generations a crashed run left behind (we hold the lock, so no serving build is in flight)."""
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT id FROM kb_generations WHERE "
                "(purpose = 'serve' AND status IN ('building', 'failed', 'ready', 'retired')) "
                "OR (purpose = 'eval' AND created_at < now() - make_interval(hours => %s)) "
                "OR status = 'retired'", (KEEP_EVAL_HOURS,)).fetchall()
            ptr = conn.execute("SELECT active, previous FROM kb_pointer WHERE name = 'default'").fetchone()
        keep = {ptr["active"], ptr["previous"]}
        dropped = []
        for r in rows:
            if r["id"] in keep:
                continue
            self._drop(r["id"])
            self._set(r["id"], status="retired")
            dropped.append(r["id"])
        return dropped

    def rebuild(self, source: str | Path, *, docs: Sequence[Document] | None = None,
                on_progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
        """Build a new generation from ``source`` while the active one serves, then switch to it."""
        with self.lock():
            self._cleanup_leftovers()
            docs = list(docs) if docs is not None else load_documents(Path(source))
            if not docs:
                raise GenerationError(f"{source}: no documents found")
            summary = self.build(docs, source=str(source), purpose="serve", on_progress=on_progress)
            switched = self._switch(summary["generation"])
            summary.update(previous=switched["previous"], dropped=switched["dropped"])
            return summary

    def rollback(self) -> dict[str, Any]:
        """Serve the previous generation again (the current one becomes previous, so this can be undone)."""
        with self.lock():
            ptr = self.pointer()
            prev, cur = ptr["previous"], ptr["active"]
            if not prev:
                raise GenerationError("there is no previous generation to roll back to")
            dense_n = self.dense.count(prev)
            try:
                lexical_n = self.lexical.count(prev)
            except LookupError as exc:
                raise GenerationError(f"previous generation {prev} has no lexical index here: {exc}") from exc
            if dense_n == 0 or dense_n != lexical_n:
                raise GenerationError(f"previous generation {prev} is incomplete ({dense_n} vs {lexical_n} chunks)")
            with self.pool.connection() as conn:
                with conn.transaction():
                    conn.execute("SELECT 1 FROM kb_pointer WHERE name = 'default' FOR UPDATE")
                    conn.execute("UPDATE kb_pointer SET active = %s, previous = %s, switched_at = now() "
                                 "WHERE name = 'default'", (prev, cur))
                    conn.execute("UPDATE kb_generations SET status = 'active', activated_at = now() WHERE id = %s",
                                 (prev,))
                    if cur:
                        conn.execute("UPDATE kb_generations SET status = 'previous' WHERE id = %s", (cur,))
            self.lexical.activate(prev)
            return {"active": prev, "previous": cur, "chunks": dense_n}

    def sync(self, source: str | Path, *, docs: Sequence[Document] | None = None) -> dict[str, Any]:
        """Apply adds, updates and deletes (by content hash, per document) to the active generation in place.

        With no active generation this is a rebuild. Only changed documents are touched; their
        vectors come from the cache when the text is already known.
        """
        t0 = time.perf_counter()
        with self.lock():
            generation = self.active()
            docs = list(docs) if docs is not None else load_documents(Path(source))
            if generation is None:
                self._cleanup_leftovers()
                summary = self.build(docs, source=str(source), purpose="serve")
                summary.update(self._switch(summary["generation"]))
                summary["mode"] = "rebuild"
                return summary
            chunks = self.chunk(docs)
            existing = self.dense.chunk_hashes(generation)
            old_by_doc: dict[str, dict[str, str]] = {}
            for cid, (doc_id, h) in existing.items():
                old_by_doc.setdefault(doc_id, {})[cid] = h
            new_by_doc: dict[str, list[Chunk]] = {}
            for c in chunks:
                new_by_doc.setdefault(c.doc_id, []).append(c)
            added = [d for d in new_by_doc if d not in old_by_doc]
            deleted = [d for d in old_by_doc if d not in new_by_doc]
            updated = [d for d in new_by_doc if d in old_by_doc
                       and {c.chunk_id: c.content_hash for c in new_by_doc[d]} != old_by_doc[d]]
            to_delete = [cid for d in (*deleted, *updated) for cid in old_by_doc[d]]
            to_add = [c for d in (*added, *updated) for c in new_by_doc[d]]
            encoded, reused = self.dense.embed_missing(
                self.encoder, self.encoder_name, to_add, embed_text, batch_size=self.embed_batch_size,
                progress=self.progress)
            self.dense.delete_chunks(generation, to_delete)
            self.lexical.delete(generation, to_delete)
            for part in _batched(to_add, 20000):
                self.dense.load_chunks(generation, self.encoder_name, part)
            for part in _batched(to_add, 5000):
                self.lexical.add(generation, part)
            dense_n, lexical_n = self.dense.count(generation), self.lexical.count(generation)
            if not (dense_n == lexical_n == len(chunks)):
                raise GenerationError(f"after sync generation {generation} holds {dense_n} chunks in pgvector and "
                                      f"{lexical_n} in {self.lexical.name}, expected {len(chunks)}")
            self._set(generation, docs=len(new_by_doc), chunks=len(chunks))
            seconds = time.perf_counter() - t0
            return {
                "mode": "sync", "generation": generation, "docs": len(new_by_doc), "chunks": len(chunks),
                "added_docs": len(added), "updated_docs": len(updated), "deleted_docs": len(deleted),
                "unchanged_docs": len(new_by_doc) - len(added) - len(updated),
                "chunks_added": len(to_add), "chunks_deleted": len(to_delete), "encoded": encoded, "reused": reused,
                "seconds": round(seconds, 3),
            }

    def drop(self, generation: str) -> None:
        """Remove a generation that is not serving (eval generations, failed builds)."""
        ptr = self.pointer()
        if generation in (ptr["active"], ptr["previous"]):
            raise GenerationError(f"generation {generation} is {('active' if generation == ptr['active'] else 'previous')}")
        self._drop(generation)
        self._set(generation, status="retired")


# -- read functions for the gateway's operations views (metrics, trace) --------------------------


def last_rebuild(conn: psycopg.Connection) -> dict[str, Any] | None:
    """The latest finished serving rebuild: ``{chunks, seconds}``, or None before the first one."""
    return conn.execute(
        """
        SELECT chunks, EXTRACT(EPOCH FROM finished_at - created_at)::float8 AS seconds
        FROM kb_generations
        WHERE purpose = 'serve' AND finished_at IS NOT NULL AND status <> 'failed'
        ORDER BY finished_at DESC LIMIT 1
        """
    ).fetchone()


def chunk_metadata(conn: psycopg.Connection, chunk_ids: set[str]) -> dict[str, dict[str, Any]]:
    """Title, section, document and language of chunks by id, from any generation that still has them
    (the active one first), so a trace can name what an old answer cited."""
    if not chunk_ids:
        return {}
    rows = conn.execute(
        """
        SELECT DISTINCT ON (c.chunk_id) c.chunk_id, c.doc_id, c.title, c.section, c.lang
        FROM kb_chunks c LEFT JOIN kb_generations g ON g.id = c.generation
        WHERE c.chunk_id = ANY(%s)
        ORDER BY c.chunk_id, (g.status = 'active') DESC NULLS LAST, g.created_at DESC NULLS LAST
        """,
        (sorted(chunk_ids),),
    ).fetchall()
    return {r["chunk_id"]: r for r in rows}
