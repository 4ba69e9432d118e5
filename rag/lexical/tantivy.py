"""BM25 on an embedded tantivy index: the default lexical backend.

One index directory per generation under ``root`` (``$SWITCHBOARD_HOME/index/tantivy``), and
an ``ACTIVE`` file naming the generation searched by default (replaced atomically).

Chinese has no spaces, and tantivy-py cannot host a Python tokenizer, so text is cut with jieba
(search mode, through the shared :class:`rag.rewrite.SearchTokenizer`) *before* indexing and
stored space-joined in a field analysed by a whitespace analyzer we register (lower case,
English stemming). Queries are cut the same way, run through the same analyzer, and turned
into term queries: user text never reaches ``parse_query``, so ``title:x AND (`` is just words.
The analyzer is registered again after every open, because tantivy keeps custom analyzers per
``Index`` object, not in the index files.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import tantivy

from rag.chunk import heading_line
from rag.rewrite import EN_STOPWORDS, ZH_STOPWORDS, SearchTokenizer, get_tokenizer
from rag.types import Chunk, Hit

log = logging.getLogger(__name__)

ANALYZER = "sb_ws"
_GENERATION_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
MAX_QUERY_TERMS = 64
FINGERPRINT_FILE = "switchboard-tokenizer.txt"


class GenerationNotFound(LookupError):
    """The requested generation has no index here."""


def _analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> tantivy.Schema:
    b = tantivy.SchemaBuilder()
    b.add_text_field("chunk_id", stored=True, tokenizer_name="raw")
    b.add_text_field("doc_id", stored=True, tokenizer_name="raw")
    b.add_text_field("lang", stored=True, tokenizer_name="raw")
    b.add_text_field("body", stored=False, tokenizer_name=ANALYZER, index_option="freq")
    return b.build()


class TantivyIndex:
    """The LexicalIndex protocol on local tantivy directories.

    ``tokenizer`` must be the same one the query side uses (the composition root shares it).
    Writes to one generation are serialised by a lock here, and tantivy's own directory lock
    refuses a second writer from another process.
    """

    name = "tantivy"

    def __init__(self, root: str | Path, *, tokenizer: SearchTokenizer | None = None,
                 writer_heap_bytes: int = 64_000_000):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.tokenizer = tokenizer or get_tokenizer()
        self.writer_heap_bytes = writer_heap_bytes
        self._schema = _schema()
        self._analyzer = _analyzer()
        self._indexes: dict[str, tantivy.Index] = {}
        self._write_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ generations

    def _dir(self, generation: str) -> Path:
        if not _GENERATION_RE.match(generation or ""):
            raise ValueError(f"bad generation name {generation!r}")
        return self.root / generation

    def _open(self, generation: str, *, create: bool = False) -> tantivy.Index:
        with self._lock:
            idx = self._indexes.get(generation)
            if idx is not None:
                return idx
            path = self._dir(generation)
            if (path / "meta.json").exists():
                idx = tantivy.Index.open(str(path))
            elif create:
                path.mkdir(parents=True, exist_ok=True)
                idx = tantivy.Index(self._schema, path=str(path), reuse=True)
                (path / FINGERPRINT_FILE).write_text(self.tokenizer.fingerprint + "\n", encoding="utf-8")
            else:
                raise GenerationNotFound(f"no tantivy index for generation {generation!r} under {self.root}")
            idx.register_tokenizer(ANALYZER, self._analyzer)   # per Index object: again after every open
            self._indexes[generation] = idx
            self._write_locks.setdefault(generation, threading.Lock())
            return idx

    def create_generation(self, generation: str) -> None:
        self._open(generation, create=True)

    def generations(self) -> list[str]:
        found = [p for p in self.root.iterdir() if p.is_dir() and (p / "meta.json").exists()]
        return [p.name for p in sorted(found, key=lambda p: (p.stat().st_mtime, p.name))]

    def drop_generation(self, generation: str) -> None:
        with self._lock:
            self._indexes.pop(generation, None)
            self._write_locks.pop(generation, None)
        if self.active() == generation:
            (self.root / "ACTIVE").unlink(missing_ok=True)
        shutil.rmtree(self._dir(generation), ignore_errors=True)

    def clone_generation(self, source: str, target: str) -> bool:
        """Start ``target`` as a copy of ``source`` (same tokenizer only); False when that is not possible.

        A rebuild of mostly unchanged content then only deletes and adds the chunks that changed,
        instead of cutting every text with jieba again.
        """
        src, dst = self._dir(source), self._dir(target)
        if not (src / "meta.json").exists() or (dst / "meta.json").exists():
            return False
        try:
            if (src / FINGERPRINT_FILE).read_text(encoding="utf-8").strip() != self.tokenizer.fingerprint:
                return False
        except FileNotFoundError:
            return False
        with self._write_locks.setdefault(source, threading.Lock()):   # no commit of the source mid-copy
            tmp = self.root / f".{target}.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("*.lock", ".tantivy-*"))
            os.replace(tmp, dst)
        return True

    def activate(self, generation: str) -> None:
        if not (self._dir(generation) / "meta.json").exists():
            raise GenerationNotFound(f"cannot activate {generation!r}: no index under {self.root}")
        tmp = self.root / f".ACTIVE.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(generation + "\n", encoding="utf-8")
        os.replace(tmp, self.root / "ACTIVE")

    def active(self) -> str | None:
        try:
            name = (self.root / "ACTIVE").read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return name or None

    # ------------------------------------------------------------------ writes

    def body(self, chunk: Chunk) -> str:
        """What is indexed for a chunk: jieba tokens of its heading line and text, space-joined."""
        return " ".join(self.tokenizer.tokenize(heading_line(chunk.title, chunk.section, chunk.keywords) + "\n" + chunk.text))

    def add(self, generation: str, chunks: Iterable[Chunk]) -> int:
        idx = self._open(generation, create=True)
        n = 0
        with self._write_locks[generation]:
            writer = idx.writer(heap_size=self.writer_heap_bytes, num_threads=1)
            try:
                for c in chunks:
                    writer.add_document(tantivy.Document(
                        chunk_id=c.chunk_id, doc_id=c.doc_id, lang=c.lang or "", body=self.body(c)))
                    n += 1
                writer.commit()
            except BaseException:
                writer.rollback()
                raise
            finally:
                writer.wait_merging_threads()
            idx.reload()
        return n

    def delete(self, generation: str, chunk_ids: Iterable[str]) -> int:
        idx = self._open(generation)
        ids = list(dict.fromkeys(chunk_ids))
        if not ids:
            return 0
        with self._write_locks[generation]:
            before = idx.searcher().num_docs
            writer = idx.writer(heap_size=self.writer_heap_bytes, num_threads=1)
            try:
                for cid in ids:
                    writer.delete_documents_by_term("chunk_id", cid)
                writer.commit()
            finally:
                writer.wait_merging_threads()
            idx.reload()
            return before - idx.searcher().num_docs

    def count(self, generation: str) -> int:
        idx = self._open(generation)
        idx.reload()
        return idx.searcher().num_docs

    # ------------------------------------------------------------------ search

    def query_terms(self, query: str) -> Counter:
        """Index terms of a user query (same tokenizer, then our analyzer), with how often each occurs.

        Stop words and particles are dropped unless nothing else is left; they cost time and
        barely move BM25.
        """
        tokens = self.tokenizer.tokenize(query)
        content = [t for t in tokens if t not in ZH_STOPWORDS and t not in EN_STOPWORDS]
        tokens = content or tokens
        terms = self._analyzer.analyze(" ".join(tokens)) if tokens else []
        return Counter(terms[: MAX_QUERY_TERMS * 4])

    def search(self, query: str, k: int = 100, *, generation: str | None = None,
               lang: str | None = None) -> list[Hit]:
        generation = generation or self.active()
        if generation is None:
            raise GenerationNotFound("no active tantivy generation")
        idx = self._open(generation)
        terms = self.query_terms(query)
        if not terms or k <= 0:
            return []
        should = []
        for term, n in terms.most_common(MAX_QUERY_TERMS):
            q = tantivy.Query.term_query(self._schema, "body", term, index_option="freq")
            should.append((tantivy.Occur.Should, tantivy.Query.boost_query(q, float(n)) if n > 1 else q))
        query_obj = tantivy.Query.boolean_query(should)
        if lang:
            query_obj = tantivy.Query.boolean_query([
                (tantivy.Occur.Must, query_obj),
                (tantivy.Occur.Must, tantivy.Query.term_query(self._schema, "lang", lang)),
            ])
        searcher = idx.searcher()
        result = searcher.search(query_obj, limit=k, count=False)
        hits: list[Hit] = []
        for rank, (score, address) in enumerate(result.hits, 1):
            doc = searcher.doc(address)
            cid = doc.get_first("chunk_id")
            hits.append(Hit(chunk_id=cid, score=float(score), rank=rank, scores={"bm25": float(score)}))
        return hits

    def close(self) -> None:
        with self._lock:
            self._indexes.clear()
