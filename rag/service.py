"""The knowledge base as L1 sees it: search, grounded answers, readiness, and its generations.

Everything it needs is passed in (pool, encoder, lexical backend, reranker, generator); it
imports nothing from the router. The generation searched is read from the Postgres pointer on
every query, so a rebuild or rollback in another process takes effect at once, and a query in
flight keeps the generation it started with.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from psycopg_pool import ConnectionPool

from rag.answer import Generator, citation, unsupported_sentences
from rag.chunk import split_sentences
from rag.answer_type import asked, asking_word, holds
from rag.compose import (ANSWER_TYPE_LEAD, NARROWER, Composer, VectorCache, asked_about, question_parts, strip_framing,
                          structured, unit_text)
from rag.confidence import model_of
from rag.confidence import confidence as confidence_of
from rag.config import RetrievalConfig
from rag.dense import DenseStore
from rag.fusion import fuse
from rag.generations import Generations
from rag.lexical.base import LexicalIndex
from rag.rewrite import (EN_STOPWORDS, ZH_STOPWORDS, Glossary, QueryRewriter, RewrittenQuery, fold, get_tokenizer,
                         normalize)
from rag.types import Answer, Chunk, Hit
from text.form import tells_something_failing
from text.places import abroad_in, asks_destination, elsewhere_in, places_in

log = logging.getLogger(__name__)


def _stem(word: str) -> str:
    """Plural-insensitive comparison for Latin words (parcel / parcels)."""
    return word[:-1] if len(word) > 3 and word.isascii() and word.endswith("s") else word

_QA_PREFIX = re.compile(r"^(?:q|问)\s*[:：]\s*", re.I)
# an answer that only points to another article ("See *Delayed or lost parcels*." / "请参考《快递延误或丢件怎么办》。")
_POINTER = re.compile(r"^(?:(?:please\s+)?(?:see|refer\s+to)|请参考|请参阅|请查看|详见|参见)\s*"
                      r"[*_《「“\"']*(?P<title>[^*_》」”\"'\n]+?)[*_》」”\"']*\s*[.。]?$", re.I)
# the words that open a noun phrase naming one thing ("the boots", "my lamp"): see KnowledgeBase.things_named
_DETERMINERS = frozenset("the a an my our your his her their this these those".split())   # not "that": "a shirt that ..."
# a quotation a sentence reports as someone's claim, or warns of, is what the passage warns against, not what it
# says: the scam text quoted in "声称“账号即将被注销”的短信链接都是钓鱼网站" answers no "怎么注销账号" (a label to click,
# "点击“忘记密码”", is said by the passage itself)
_QUOTATION = re.compile(r"“[^”\n]*”|\"[^\"\n]*\"|「[^」\n]*」|‘[^’\n]*’")
_REPORTED = re.compile(r"声称|谎称|号称|自称|冒充|钓鱼|诈骗|骗子|骗局|(?<![a-z])(?:claim(?:s|ed|ing)?|pretend(?:s|ed|ing)?|"
                       r"phishing|scam(?:s|mers?)?|fraud(?:ulent|sters?)?|fake)(?![a-z])", re.I)
# what text.form.tells_a_problem does not hear as a failure yet: a thing that will not open or start, or crashes
# ("the app won't open", "the app freezes on the home screen", "App一直闪退")
_FAILS = re.compile(r"\b(?:won'?t|will\s+not|wouldn'?t|doesn'?t|does\s+not|can'?t|cannot|isn'?t|is\s+not|not)\s+"
                    r"(?:open|opening|start|starting|launch|launching|respond|responding)\b"
                    r"|\b(?:crash(?:es|ed|ing)?|freez(?:es|ing)|froze|hangs|stuck\s+on)\b"
                    r"|闪退|崩溃|卡死|卡住|白屏|黑屏|打不开|没反应|进不去|点不动", re.I)
QUESTION_UNITS = 4          # question sentences of a passage compared with the query, at most
ENTRY_CANDIDATES = 8        # hits of an article with entries that the entry score may reorder
ENTRY_BLEND = 0.15          # weight of the fused retrieval score beside the entry score (a cosine)
# How far (dense cosine) a preferred article's passage may trail the best and still lead (preferred_first): the
# compensation for a broken delivery trails the warranty's accidental damage by 0.036 for "the screen is cracked
# on arrival"; a question's ten hits on the bundled pack span about 0.07 (0.787-0.858 for it).
PREFERRED_MARGIN = 0.04
NAME_BLEND = 0.3            # weight of the query's cosine to an article's names (title, keywords) in the entry score
PART_HITS = 3              # hits retrieved for each part of a question of several parts
HEAD_LEAD = 0.02            # how much closer (dense cosine) a bare head noun read as its term must bring the best passage
SHORT_PASSAGE = 160         # a passage this short (a one-line FAQ entry) is itself a question unit


def own_words(text: str) -> str:
    """``text`` without the quotations of its sentences that report them as a claim or warn of them (_REPORTED)."""
    if not _QUOTATION.search(text) or not _REPORTED.search(text):
        return text
    return "\n".join(" ".join(_QUOTATION.sub(" ", s) if _REPORTED.search(s) else s for s in split_sentences(line))
                     if _QUOTATION.search(line) and _REPORTED.search(line) else line for line in text.splitlines())


def question_units(chunk: Chunk, *, named: bool = True) -> list[str]:
    """What a passage says it answers: its title, its article's keywords (what customers call it) and its
    section, its FAQ questions (a ``Q:`` line whole, else the sentences ending in a question mark), or the whole
    text when short. ``named=False`` leaves the keywords out: they name every passage of the article alike, so
    they cannot tell its passages apart.

    An FAQ answer is found by what is asked, so the query is compared with these (both encoded as
    queries: question against question) rather than with the passage's answer text.
    """
    units: list[str] = []
    for head in (chunk.title, *(chunk.keywords if named else ()), chunk.section):
        head = (head or "").strip()
        if head and head not in units:
            units.append(head)
    questions = []
    for line in (chunk.text or "").splitlines():
        if _QA_PREFIX.match(line.strip()):          # an FAQ question line, whole ("I paid by card. When ...?")
            questions.append(_QA_PREFIX.sub("", line.strip()).strip())
        else:
            questions.extend(q.strip() for q in split_sentences(line) if q.rstrip().endswith(("?", "？")))
    units.extend(q for q in questions[:QUESTION_UNITS] if q and q not in units)
    text = (chunk.text or "").strip()
    if text and len(text) <= SHORT_PASSAGE and text not in units:
        units.append(text)
    return units




SAMPLE_KB = Path(__file__).resolve().parent / "samples" / "kb"
MODES = ("bm25", "dense", "hybrid", "rerank")


class RerankerMissing(RuntimeError):
    """``mode='rerank'`` was asked for but no reranker is configured (never a silent fallback)."""


class KnowledgeBaseEmpty(LookupError):
    """No generation is active yet."""


class KnowledgeBase:
    def __init__(self, pool: ConnectionPool, encoder: Any, lexical: LexicalIndex, *,
                 config: RetrievalConfig | None = None, glossary: Glossary | None = None,
                 reranker: Any = None, generator: Generator | None = None, encoder_name: str | None = None,
                 sample_dir: Path | None = None, progress: bool = False):
        self.pool = pool
        self.encoder = encoder
        self.lexical = lexical
        self.config = config or RetrievalConfig()
        self.glossary = glossary if glossary is not None else Glossary()
        tokenizer = getattr(lexical, "tokenizer", None) or get_tokenizer(self.glossary.words())
        self.rewriter = QueryRewriter(tokenizer, self.glossary)
        self.tokenizer = tokenizer
        self.reranker = reranker
        self.generator = generator
        self.sample_dir = Path(sample_dir) if sample_dir else SAMPLE_KB
        self._articles: dict[tuple[str, str], list[Any]] = {}
        self._vocabulary: dict[str, dict[str, tuple[set[str], str]]] = {}
        self._elsewhere: dict[str, dict[str, str]] = {}
        dim = int(getattr(encoder, "dim", 384))
        self.dense = DenseStore(pool, dim=dim, ef_search=self.config.ef_search)
        # answer lines are encoded as queries (symmetric scoring), under their own key in the embedding cache:
        # a line is encoded once, by any process, so a restart warms composition from the database
        key = f"{encoder_name or getattr(encoder, 'name', None) or 'encoder'}#query"
        # the questions' vectors, by text, in memory only (no store: a customer's words never go to the embedding
        # cache table): one answer needs its question for retrieval, the entry score, composition and its parts
        self.queries = VectorCache(encoder, 512)
        self.composer = Composer(encoder, store=self.dense, store_key=key, queries=self.queries)
        self.composer.words = lambda text: frozenset(_stem(w) for w in self.tokenizer.words_of(text))
        self.composer.terms = lambda text: frozenset(_stem(w) for _, term in self.glossary.matches(fold(text).lower())
                                                     for w in self.tokenizer.words_of(term))
        self.composer.narrows = self.glossary.narrower
        self.generations = Generations(pool, self.dense, lexical, encoder, encoder_name=encoder_name,
                                       target_chars=self.config.chunk_chars,
                                       overlap_chars=self.config.chunk_overlap, progress=progress,
                                       max_shrink=self.config.max_shrink)

    # ------------------------------------------------------------------ state

    def active_generation(self) -> str | None:
        return self.generations.active()

    def is_empty(self) -> bool:
        return self.active_generation() is None

    def ready(self) -> tuple[bool, str]:
        """Readiness: an active generation present in both stores (and whether rerank is configured)."""
        try:
            gen = self.active_generation()
            if gen is None:
                return False, "no knowledge generation is active (run `switchboard index rebuild`)"
            lexical_n = self.lexical.count(gen)
            dense_n = self.dense.count(gen)
        except Exception as exc:  # noqa: BLE001 - readiness reports, it does not raise
            return False, f"{type(exc).__name__}: {exc}"
        if lexical_n != dense_n or dense_n == 0:
            return False, f"generation {gen}: {dense_n} chunks in pgvector, {lexical_n} in {self.lexical.name}"
        rerank = "rerank on" if self.reranker is not None else "no reranker configured"
        return True, f"generation {gen}: {dense_n} chunks ({self.lexical.name} + pgvector), {rerank}"

    def load_sample_if_empty(self) -> dict[str, Any] | None:
        """Index the bundled sample knowledge base when nothing is active yet (first start)."""
        if not self.is_empty():
            return None
        try:
            return self.generations.rebuild(self.sample_dir)
        except Exception as exc:
            from rag.generations import RebuildInProgress

            if isinstance(exc, RebuildInProgress):   # another process is loading it right now
                return None
            raise

    def rebuild(self, source: str | Path, *, allow_shrink: bool = False) -> dict[str, Any]:
        return self.generations.rebuild(source, allow_shrink=allow_shrink)

    def sync(self, source: str | Path, *, allow_shrink: bool = False) -> dict[str, Any]:
        return self.generations.sync(source, allow_shrink=allow_shrink)

    def rollback(self) -> dict[str, Any]:
        return self.generations.rollback()

    # ------------------------------------------------------------------ retrieval

    def _hydrate(self, generation: str, hits: list[Hit]) -> list[Hit]:
        missing = [h.chunk_id for h in hits if h.chunk is None]
        if missing:
            rows = self.dense.fetch(generation, missing)
            for h in hits:
                if h.chunk is None:
                    h.chunk = rows.get(h.chunk_id)
        return [h for h in hits if h.chunk is not None]

    def retrieve(self, query: str, k: int = 10, mode: str = "hybrid", *, generation: str | None = None,
                 lang: str | None = None, rewritten: RewrittenQuery | None = None,
                 timings: dict[str, float] | None = None) -> list[Hit]:
        """Top-k hits (chunks attached) for one query; ``timings`` collects seconds per stage."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if mode == "rerank" and self.reranker is None:
            raise RerankerMissing("mode 'rerank' needs a reranker (set SWITCHBOARD_RERANKER_MODEL)")
        timings = timings if timings is not None else {}
        generation = generation or self.active_generation()
        if generation is None:
            raise KnowledgeBaseEmpty("no knowledge generation is active")
        t = time.perf_counter()
        rw = rewritten or self.rewriter.rewrite(query)
        timings["rewrite"] = time.perf_counter() - t
        cfg = self.config
        n = max(k, cfg.candidates) if mode in ("hybrid", "rerank") else k
        top_n = int(getattr(self.reranker, "top_n", cfg.rerank_top_n) or cfg.rerank_top_n)
        if mode == "rerank":
            n = max(n, top_n)
        rankings: dict[str, list[Hit]] = {}
        if mode in ("bm25", "hybrid", "rerank"):
            t = time.perf_counter()
            rankings["bm25"] = self.lexical.search(rw.lexical, n, generation=generation, lang=lang)
            timings["bm25"] = time.perf_counter() - t
        if mode in ("dense", "hybrid", "rerank"):
            t = time.perf_counter()
            vec = self.query_vector(rw.dense)
            timings["encode"] = time.perf_counter() - t
            t = time.perf_counter()
            rankings["dense"] = self.dense.search(generation, vec, n, lang=lang, ef_search=cfg.ef_search)
            timings["dense"] = time.perf_counter() - t
        if len(rankings) == 1:
            hits = next(iter(rankings.values()))
        else:
            t = time.perf_counter()
            hits = fuse(rankings, method=cfg.fusion, weights={"bm25": cfg.weights[0], "dense": cfg.weights[1]},
                        k=cfg.rrf_k, norm=cfg.norm)
            timings["fuse"] = time.perf_counter() - t
        if mode == "rerank":
            t = time.perf_counter()
            top = self._hydrate(generation, hits[:top_n])
            # the customer's words, as the reranker was trained; below the reranked head the first
            # stage's order continues, so a deeper k (recall@100) loses nothing to rerank
            hits = self.reranker.rerank(query, top) + hits[top_n:]
            timings["rerank"] = time.perf_counter() - t
        t = time.perf_counter()
        hits = self._hydrate(generation, hits[:k])
        timings["fetch"] = time.perf_counter() - t
        for rank, h in enumerate(hits, 1):
            h.rank = rank
        return hits

    def search(self, query: str, k: int = 10, mode: str = "hybrid", *, lang: str | None = None) -> list[Hit]:
        return self.retrieve(query, k, mode, lang=lang)

    def warm_query(self, query: str) -> None:
        """Encode the query as retrieval will (its rewritten form), so a caching encoder has it ready."""
        self.query_vector(self.rewriter.rewrite(query).dense)

    def query_vector(self, text: str) -> np.ndarray:
        """The question's vector, encoded once (the query cache) for retrieval, the entry score and composition."""
        return self.queries.vectors([text])[0]

    # ------------------------------------------------------------------ answers

    def coverage(self, keywords: Sequence[str], hit: Hit, phrases: Sequence[tuple[str, str]] = ()) -> float:
        """Share of the query's content words that the passage (title, its article's keywords, section, text)
        contains. ``phrases``: the glossary's (variant, term) pairs said whole in the query; a passage that says
        the term says the variant's words too ("discount code" is "coupon": an article on coupons says "code"),
        except the words that only ask ("where" of "where is my parcel": saying "tracking" tells no place)."""
        if not keywords or hit.chunk is None:
            return 0.0
        said = own_words(hit.chunk.said())
        words = {_stem(w) for w in self.tokenizer.words_of(said)}
        wanted = {_stem(w) for w in keywords}
        said = said.lower()
        phrased = [variant for variant, term in phrases if self._says(term, words, said)]
        in_terms = {_stem(w) for variant in phrased for w in self.tokenizer.words_of(variant) if not asking_word(w)}
        return len({w for w in wanted if w in words or w in in_terms or self._said_as(w, words, said)
                    or (not w.isascii() and not asking_word(w) and any(w in v for v in phrased))}) / len(wanted)

    def _said_as(self, word: str, words: set[str], said: str) -> bool:
        """Whether a passage (its ``words``, its text ``said``) says ``word`` in the glossary's term for it: the
        glossary declares "deliver" a variant of "shipping" and "寄到" one of "寄往", so a passage that says "shipping"
        or "寄往" contains it."""
        return any(self._says(term, words, said) for variant, term in self.glossary.matches(word.lower())
                   if variant == word.lower())

    def _says(self, term: str, words: set[str], said: str) -> bool:
        """Whether a passage (its ``words``, its text ``said``) says the glossary ``term``."""
        if not term.isascii():
            return term.lower() in said
        return all(_stem(t) in words for t in self.tokenizer.words_of(term))

    def vocabulary(self, generation: str) -> dict[str, tuple[set[str], str]]:
        """Per language, the words of every article of ``generation`` and of the glossary, and their whole text
        (lower-cased), built once per generation: what the knowledge base talks about at all."""
        known = self._vocabulary.get(generation)
        if known is None:
            known = self._learn_vocabulary(generation, self.dense.fetch_documents(generation, None))
        return known

    def _learn_vocabulary(self, generation: str,
                          articles: dict[str, list[Chunk]]) -> dict[str, tuple[set[str], str]]:
        texts: dict[str, list[str]] = {}
        for chunks in articles.values():
            for c in chunks:
                texts.setdefault(c.lang or "", []).append(own_words(c.said()).lower())
        # the glossary's terms and variants are the shop's own words too ("package" for "parcel")
        declared = sorted(w.lower() for w in self.glossary.words())
        known = {lang: ({_stem(w) for t in [*parts, *declared] for w in self.tokenizer.words_of(t)},
                        "\n".join([*parts, *declared])) for lang, parts in texts.items()}
        self._vocabulary = {generation: known}       # only the serving generation is kept
        # the lines that speak of the places they do not name ("other countries or regions"), per language
        elsewhere: dict[str, list[str]] = {}
        for chunks in articles.values():
            for c in chunks:
                elsewhere.setdefault(c.lang or "", []).extend(
                    line.lower() for line in (c.text or "").splitlines() if elsewhere_in(line))
        self._elsewhere = {generation: {lang: "\n".join(parts) for lang, parts in elsewhere.items() if parts}}
        return known

    def unknown_share(self, rw: RewrittenQuery, generation: str | None) -> float | None:
        """Share of the query's content words that no article in its language contains (None: not known).

        A question about something the knowledge base never mentions (student discounts, renting, a job) cannot
        be answered from it, however close its other words come to an entry. The words that only ask ("几次",
        "多长时间", "how", "when") are not counted: no answer contains them. A Chinese word counts as known when it
        appears anywhere in the text (word segmentation of a question and of an article can cut differently), or
        when it holds a shorter known cut of the same question (search-mode cuts overlap: "最多能" holds "最多").
        The name of the thing a question is about (:meth:`things_named`) is not counted either, unless nothing
        else is asked: "can I return the boots?" asks what the returns article says of any item.
        """
        words = self._unknown_words(rw, generation)
        if words is None:
            return None
        asked_for, missing, named = words
        if not asked_for:
            return 0.0
        asked_for = [w for w in asked_for if w not in named]
        missing = [w for w in missing if w not in named]
        return round(len(missing) / len(asked_for), 4)

    def _unknown_words(self, rw: RewrittenQuery,
                       generation: str | None) -> tuple[list[str], list[str], set[str]] | None:
        """The query's content words, those no article in its language contains, and of these the name of the
        thing it is about when that name may be left out (None: not known)."""
        if not generation or not rw.keywords:
            return None
        known = self.vocabulary(generation).get(rw.lang or "")
        if known is None:
            return None
        words, text = known
        asked_for = [w for w in rw.keywords if not asking_word(w) and not (w.isascii() and len(w) == 1)]

        def is_known(w: str) -> bool:
            if w.isascii():
                return _stem(w.lower()) in words
            return w.lower() in text or any(o != w and len(o) >= 2 and o in w and o.lower() in text
                                            for o in asked_for)

        missing = [w for w in asked_for if not is_known(w)]
        named = self.things_named(rw, missing)
        # only beside something else the articles answer, and not when a quantity of the thing is asked for ("how
        # much does the lamp cost?" asks about the lamp itself)
        if len(named) >= len(asked_for) or asked(rw.original) is not None:
            named = set()
        return asked_for, missing, named

    def places_elsewhere(self, query: str, lang: str | None, generation: str | None) -> tuple[list[str], str]:
        """The places ``query`` asks to send to (text.places) that name a country or region the articles never name
        ("Canada", "美国"), or say abroad in a word ("internationally", "海外"), and the articles' own words for the
        places they do not name ("other countries", "其他国家"), when a line of theirs in ``lang`` speaks of them ("We
        do not ship to other countries or regions"): what is asked of such a place is what they say of every other
        place, as what is asked of a thing they never name is what they say of any item (:meth:`things_named`). A
        place such a line names (Hong Kong) stays as it is. ([], "") when none."""
        if not generation or not asks_destination(query):
            return [], ""
        self.vocabulary(generation)
        there = self._elsewhere.get(generation, {}).get(lang or "")
        if not there:
            return [], ""
        places = [p for p in [*places_in(query), *abroad_in(query)]
                  if not re.search(rf"(?<![a-z]){re.escape(p)}(?![a-z])", there)]
        return places, (elsewhere_in(there) if places else "")

    def elsewhere_words(self, rw: RewrittenQuery, places: Sequence[str]) -> set[str]:
        """The keywords of ``rw`` that are words of ``places``."""
        out: set[str] = set()
        for place in places:
            said = set(self.tokenizer.words_of(place))
            out |= {w for w in rw.keywords if w.lower() in said or (not w.isascii() and w in place)}
        return out

    def generic_question(self, query: str, rw: RewrittenQuery, generation: str | None) -> str:
        """``query`` with the name of the thing it is about (:meth:`things_named`, when the confidence leaves it
        out) said as the articles say it, "item": "can I cancel the boots?" is read as "can I cancel the item?" to
        choose the answer's lines. The encoder places a name it knows nothing of near whatever entry happens to
        name a thing in the same place ("Can I cancel a pre-sale deposit?"); the articles' rules are about items."""
        places, phrase = self.places_elsewhere(query, rw.lang, generation)
        if places:
            # "do you ship to Canada?" is read as "do you ship to other countries?": the line that says so is chosen
            out = fold(query)
            for p in sorted(places, key=len, reverse=True):
                # "ship internationally" -> "ship to other countries"; "ship to Canada" -> "ship to other countries"
                out = re.sub(rf"(\bto\s+(?:the\s+)?)?(?<![a-z]){re.escape(p)}(?![a-z])",
                             lambda m: (m.group(1) or ("to " if phrase.isascii() else "")) + phrase, out, flags=re.I)
            query = re.sub(r"\bthe\s+(other\s+)", r"\1", out, flags=re.I)
        words = self._unknown_words(rw, generation) if rw.lang == "en" else None
        if not words or not words[2]:
            return query
        out = query
        for w in sorted(words[2], key=len, reverse=True):
            out = re.sub(rf"(?<![\w-]){re.escape(w)}(?![\w-])", "item", out, flags=re.I)
        out = re.sub(r"\bitem(?:\s+item)+\b", "item", out)
        return re.sub(r"\b([Aa])(\s+item)\b", r"\1n\2", out)

    @staticmethod
    def things_named(rw: RewrittenQuery, unknown: Sequence[str]) -> set[str]:
        """The ``unknown`` words of an English question that name the thing it is about: a noun phrase opened by
        an article, a possessive or a demonstrative ("the boots", "my drone battery", "this lamp"), its words up
        to the first one the knowledge base knows.

        A shop's articles speak of "an item" or "a product", never of each thing it sells: the name of the thing
        is not what the knowledge base lacks when the rest of the question is what an article answers (returning
        it, it arriving broken, its delivery). What is asked of the thing itself (its price, size, stock, colour,
        material) is in words the articles do not use for it, which stay unknown; a question that asks for a
        quantity ("how much does the lamp cost?") asks about the thing and keeps its name unknown (the caller
        decides).
        """
        if not unknown or rw.lang != "en":
            return set()
        missing = {w.lower() for w in unknown if w.isascii()}
        named: set[str] = set()
        after = False
        for w in re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)*", (rw.dense or "").lower()):
            if after and w in missing:
                named.add(w)
                continue
            after = w in _DETERMINERS
        return named

    def question_similarity(self, rw: RewrittenQuery, hit: Hit) -> float | None:
        """The query's best cosine to what the passage says it answers (:func:`question_units`), or None."""
        units = question_units(hit.chunk) if hit.chunk is not None else []
        if not units or not rw.dense.strip():
            return None
        # the units are the articles' own words: their vectors are the composer's (warmed at start, see warm())
        return float(max(self.composer.cache.vectors(units) @ self.query_vector(rw.dense)))

    def signals(self, rw: RewrittenQuery, hits: Sequence[Hit], generation: str | None = None) -> dict[str, Any]:
        """What the confidence is computed from, for the best passage: its dense cosine, the query's
        cosine to the passage's own question, keyword coverage, the cosine margin to the next document, and
        the share of the query's words the knowledge base never uses."""
        if not hits:
            return {}
        top = hits[0]
        cos = top.scores.get("dense")
        doc = top.chunk.doc_id if top.chunk else None
        lang = top.chunk.lang if top.chunk else None
        # the next document in the same language: a translation of the same article is not a rival answer
        second = max((h.scores["dense"] for h in hits[1:]
                      if h.chunk and h.chunk.doc_id != doc and h.scores.get("dense") is not None
                      and (not lang or not h.chunk.lang or h.chunk.lang == lang)), default=None)
        question = self.question_similarity(rw, top) if cos is not None else None
        entry = top.scores.get("entry")
        if question is not None and entry is not None:
            # in an article with entries, what the passage answers is its entry read with its context
            question = max(question, float(entry))
        # the customer's own variants (the encoder may read the question in the glossary's terms: in_own_words)
        phrases = self.glossary.matches(normalize(rw.original or rw.dense))
        return {"cosine": cos, "question": question, "coverage": round(self.coverage(rw.keywords, top, phrases), 4),
                "margin": (cos - second) if cos is not None and second is not None else None,
                "unknown": self.unknown_share(rw, generation), "lang": rw.lang}

    def confidence(self, rw: RewrittenQuery, hits: Sequence[Hit], signals: dict[str, Any] | None = None) -> float:
        """How likely the best passage answers the query, in (0, 1).

        A logistic of signals that separate answerable from unanswerable questions in both languages:
        the encoder's cosine for the passage (relative to a per-language center), how much closer the
        query is to the passage's own question than to its text (a paraphrase of the FAQ question is
        the strongest evidence), how many of the query's words the passage contains, and how far the
        best document stands above the next one. A missing signal counts as neutral.
        """
        if not hits:
            return 0.0
        return confidence_of(signals if signals is not None else self.signals(rw, hits), model_of(self.config))

    def entry_rank(self, rw: RewrittenQuery, hits: list[Hit], generation: str) -> list[Hit]:
        """The head of ``hits`` reordered by how well each passage's own entry says what is asked, when the
        best hit is from an article with entries (sections, FAQ entries, lists).

        In such an article many passages share its words, and the fused score favours the one with the most
        of them (often a neighbouring FAQ entry, or another article's line on the same topic). The entry score
        is the query's best cosine to what the passage answers, read with its context: its FAQ question with
        the answer, a list line with its introduction, a paragraph with its heading (rag.compose, vectors
        cached per line), and its title and section (:func:`question_units`); it is kept in ``scores["entry"]``
        and is the confidence's "question" signal for such a passage. A document of one answer (no headings,
        no entries) is left in retrieval's order.
        """
        lang = hits[0].chunk.lang if hits and hits[0].chunk else None
        head = [h for h in hits[:ENTRY_CANDIDATES] if h.chunk is not None and h.chunk.lang == lang]
        if len(head) < 2 or not rw.dense.strip() or not generation:
            return hits
        first = head[0].chunk.doc_id if head[0].chunk else ""
        top = self.articles(generation, [first], fresh=head)[first]
        if not top or not structured(self.composer.lines_of(generation, 0, top)):
            return hits
        docs = list(dict.fromkeys(h.chunk.doc_id for h in head if h.chunk is not None))
        articles = self.articles(generation, docs)
        lines = {d: self.composer.lines_of(generation, 0, articles[d]) for d in docs if articles.get(d)}
        units: list[list[str]] = []
        # what a unit is about: its FAQ question, else its section's heading (the unit itself when it is one of
        # them); an article's title is what all its passages are about
        asks: dict[str, str] = {}
        for h in head:
            doc_lines = lines.get(h.chunk.doc_id if h.chunk else "", [])
            mine = [ln for ln in doc_lines if h.chunk_id in ln.chunks]
            own = [unit_text(ln, doc_lines) for ln in mine]
            for ln, u in zip(mine, own, strict=True):
                q = next((x for x in doc_lines if x.group == ln.group and x.kind == "faq_q"), None)
                about = strip_framing(q.text) if ln.kind in ("faq_q", "faq_a") and q is not None else ln.section
                asks.setdefault(u, about.split(" > ")[-1])
            for u in question_units(h.chunk, named=False):
                if u != h.chunk.title.strip():
                    asks.setdefault(u, u)
            units.append(list(dict.fromkeys(own + question_units(h.chunk, named=False))))
        flat = [u for us in units for u in us]
        if not flat:
            return hits
        query = self.query_vector(rw.dense)
        sims = self.composer.cache.vectors(flat) @ query
        # an FAQ entry or a section about a narrower subject than the question's, in the glossary's terms ("还能重开发票吗",
        # "如何换开？" for "可以开发票吗"), answers less than was asked, as in composition (Composer.narrower)
        sims = sims - np.array([NARROWER if u in asks and self.glossary.narrower(rw.dense, asks[u]) else 0.0
                                for u in flat])
        # so does every entry of an article whose title names only a narrower subject ("发票修改与重开" for "能开发票吗":
        # its FAQ answer that says "换开发票" is no answer to whether an invoice can be had)
        narrow_docs = {d for d in docs if articles.get(d)
                       and self.glossary.narrower_article(rw.dense, articles[d][0].title)}
        if narrow_docs:
            owner = [h.chunk.doc_id if h.chunk else "" for h, us in zip(head, units, strict=True) for _ in us]
            sims = sims - np.array([NARROWER if d in narrow_docs else 0.0 for d in owner])
        kind = asked(rw.original)
        if kind is not None:       # what states the quantity asked for leads (rag/answer_type.py)
            sims = sims + np.array([ANSWER_TYPE_LEAD if holds(u, kind) else 0.0 for u in flat])
        # what each article is called (its title and keywords): it cannot tell an article's passages apart, but
        # it tells articles apart ("快递一般几天到" is closer to the delivery times' "快递几天能到" than to lost parcels)
        names = {d: [n for n in (articles[d][0].title, *articles[d][0].keywords) if n.strip()]
                 for d in docs if articles.get(d)}
        named = {d: float(max(self.composer.cache.vectors(ns) @ query)) for d, ns in names.items() if ns}
        scores, i = [], 0
        for h, us in zip(head, units, strict=True):
            best = float(max(sims[i:i + len(us)])) if us else -1.0
            i += len(us)
            h.scores["entry"] = best
            scores.append(best + ENTRY_BLEND * float(h.score)
                          + NAME_BLEND * named.get(h.chunk.doc_id if h.chunk else "", 0.0))
        order = sorted(range(len(head)), key=lambda j: -scores[j])
        ranked = [head[j] for j in order]
        return ranked + [h for h in hits if h not in ranked]

    @staticmethod
    def preferred_first(hits: list[Hit], prefer: Callable[[str], bool], lang: str | None) -> list[Hit]:
        """``hits`` with the passages of the preferred articles first when the best passage is from another one and
        a preferred passage in the question's language is within PREFERRED_MARGIN of its dense cosine.

        The caller's knowledge of the topic (a confident classifier's intent and its articles) tells apart
        passages that retrieval scores alike: "快递到了盒子都压坏了" is as close to delayed parcels (0.896) as to the
        compensation for a broken delivery (0.900). A preferred passage farther behind is not evidence: the order
        stays retrieval's."""
        top = hits[0] if hits else None
        if top is None or top.chunk is None or prefer(top.chunk.doc_id) or top.scores.get("dense") is None:
            return hits
        floor = float(top.scores["dense"]) - PREFERRED_MARGIN
        mine = [h for h in hits if h.chunk is not None and prefer(h.chunk.doc_id)
                and (not lang or h.chunk.lang == lang) and h.scores.get("dense") is not None
                and float(h.scores["dense"]) >= floor]
        return mine + [h for h in hits if h not in mine] if mine else hits

    def articles(self, generation: str, doc_ids: Sequence[str], fresh: Sequence[Hit] = ()) -> dict[str, list[Any]]:
        """Whole articles (their chunks in order), remembered per generation. A sync changes a generation in
        place (from another process, the nightly job): an article one of the ``fresh`` hits (just retrieved)
        says differently from the one remembered is read again."""
        said = {(h.chunk.doc_id, h.chunk_id, h.chunk.content_hash) for h in fresh if h.chunk is not None}
        for doc, cid, content in said:
            kept = self._articles.get((generation, doc))
            if kept is not None and (cid, content) not in {(c.chunk_id, c.content_hash) for c in kept}:
                del self._articles[(generation, doc)]
        found = {d: self._articles[(generation, d)] for d in doc_ids if (generation, d) in self._articles}
        missing = [d for d in doc_ids if d not in found]
        if missing:
            fetched = self.dense.fetch_documents(generation, missing)
            if len(self._articles) > 2048:
                self._articles.clear()
            for d in missing:
                found[d] = self._articles[(generation, d)] = fetched.get(d, [])
        return {d: found[d] for d in doc_ids}

    def warm(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Encode the lines of every article of the active generation for answer composition (see
        rag/compose.py); run once after start-up so that no customer's question pays for it. ``progress(done,
        total)`` hears of each batch of lines (minutes on a new install's 2 cores; a restart reads them back)."""
        gen = self.active_generation()
        if gen is None:
            return 0
        articles = self.dense.fetch_documents(gen, None)
        for doc, chunks in articles.items():
            self._articles[(gen, doc)] = chunks
        # what the passages say they answer (titles, sections, FAQ questions), for the entry score
        units = list(dict.fromkeys(u for chunks in articles.values() for c in chunks for u in question_units(c)))
        units.sort(key=len)     # like lengths per batch pad less (see Composer.warm)
        lines = self.composer.warm(gen, articles, progress=None if progress is None else
                                   lambda done, total: progress(done, total + len(units)))
        self._learn_vocabulary(gen, articles)       # from the articles just fetched, not on the first question
        for start in range(0, len(units), 16):
            self.composer.cache.vectors(units[start:start + 16])
            if progress is not None:     # the lines (all of them, ``lines``), then the units
                progress(lines + min(start + 16, len(units)), lines + len(units))
        return lines

    def compose(self, query: str, rw: RewrittenQuery, passages: Sequence[Hit],
                generation: str | None) -> tuple[str, list[dict[str, Any]]]:
        """The composed answer (rag/compose.py) and one citation per article it uses."""
        gen = generation or self.active_generation() or ""
        query = self.generic_question(query, rw, gen)
        candidates = list(passages)
        for part in question_parts(query):
            # each part of a two-part question brings the passage it finds alone, so its entry can be cited
            # even when the whole question's passages are all about the other part
            try:
                found = self.retrieve(part, PART_HITS, "hybrid", generation=gen or None, lang=rw.lang)
            except Exception:  # noqa: BLE001 - the whole question's passages still answer
                log.warning("retrieval for a question part failed", exc_info=True)
                continue
            candidates += [h for h in found if h.chunk_id not in {c.chunk_id for c in candidates}][:1]
        keywords = sorted({_stem(w) for w in rw.keywords if not asking_word(w)})
        # a customer's word that no line of the knowledge base holds ("amex") is said in its own words by the
        # glossary's term for it ("American Express"): what the question is about (Composer._in_words)
        focus = sorted({_stem(w) for variant, term in self.glossary.matches(fold(query).lower())
                        if self.composer.unheard(gen, [_stem(w) for w in self.tokenizer.words_of(variant)])
                        for w in self.tokenizer.words_of(term) if w not in EN_STOPWORDS and w not in ZH_STOPWORDS})
        def in_terms(article: str) -> str:
            return self.glossary.in_terms(query, article)

        comp = self.composer.compose(query, candidates, lambda ids: self.articles(gen, ids, fresh=candidates),
                                     lang=rw.lang, key=gen, keywords=keywords, focus=focus, in_terms=in_terms)
        referred = self.referred(query, rw, comp.text if comp is not None else "", gen)
        if referred:
            # the entry only points to another article: the answer is composed from that article
            candidates = referred + [h for h in candidates if h.chunk_id not in {r.chunk_id for r in referred}]
            comp = self.composer.compose(query, candidates, lambda ids: self.articles(gen, ids), lang=rw.lang,
                                         key=gen, keywords=keywords, focus=focus, in_terms=in_terms) or comp
        if comp is None or not comp.text:
            best = passages[0]
            return (best.chunk.text if best.chunk else ""), [citation(best)]
        cites = []
        for doc in comp.docs:
            hit = next((h for h in candidates if h.chunk and h.chunk.doc_id == doc), passages[0])
            cites.append(citation(hit))
        return comp.text, cites

    def only_quoted(self, rw: RewrittenQuery, hit: Hit) -> bool:
        """Whether the passage holds some of the question's words only inside a quotation it reports as a claim or
        warns of (:func:`own_words`), and none of the words the reporting sentences say themselves: "我想注销账号" meets
        the phishing warning only in the scam text it quotes ("声称“账号即将被注销”的短信链接都是钓鱼网站"), while
        "收到短信说账号即将被注销是真的吗" asks about the text message the warning is about."""
        text = hit.chunk.text if hit.chunk is not None else ""
        if not text or not _QUOTATION.search(text) or not _REPORTED.search(text):
            return False
        own = own_words(text)
        if own == text:
            return False

        def holds(words: set[str], said: str, w: str) -> bool:
            return _stem(w.lower()) in words or (not w.isascii() and len(w) >= 2 and w.lower() in said.lower())

        every, mine = ({_stem(w) for w in self.tokenizer.words_of(t)} for t in (text, own))
        wanted = [w for w in rw.keywords if not asking_word(w) and w not in EN_STOPWORDS and w not in ZH_STOPWORDS]
        quoted = [w for w in wanted if holds(every, text, w) and not holds(mine, own, w)]
        if not quoted:
            return False
        reporting = " ".join(_QUOTATION.sub(" ", x) for x in split_sentences(text)
                             if _QUOTATION.search(x) and _REPORTED.search(x))
        said = {_stem(w) for w in self.tokenizer.words_of(reporting)}
        return not any(holds(said, reporting, w) for w in wanted if w not in quoted)

    def names_reported(self, query: str, rw: RewrittenQuery, hit: Hit) -> bool:
        """Whether the headings of a passage (its article's title and keywords, its section, its FAQ questions:
        :func:`question_units`) name what a message that reports a failure is about (text.form.tells_a_problem): one
        of its words, or a glossary term it says in any variant. A passage is about the failure its headings name: "支付失败或重复扣款 > 可以这样尝试" tells what to
        try when a payment fails, not when the app does not open, though its first step says "App"."""
        c = hit.chunk
        if c is None:
            return False
        # (a short passage is a question unit of its own: its text names no heading)
        heads = "\n".join(u for u in question_units(c) if u != (c.text or "").strip())
        words = {_stem(w) for w in self.tokenizer.words_of(heads)}
        low = heads.lower()
        for w in rw.keywords:
            if asking_word(w) or w in EN_STOPWORDS or w in ZH_STOPWORDS:
                continue
            if _stem(w.lower()) in words or (not w.isascii() and len(w) >= 2 and w.lower() in low):
                return True
        asked = self.glossary.terms_said(query)
        return bool(asked & self.glossary.terms_said(heads)) or any(self._says(term, words, low) for term in asked)

    def in_own_words(self, rw: RewrittenQuery, generation: str | None) -> RewrittenQuery:
        """``rw`` read by the encoder with each glossary variant that holds a word no line of the knowledge base says
        replaced by its term ("how do I use a promo code?" is read as "how do I use a coupon?"): the encoder places a
        word the articles never use near whatever shares its other words ("code": the verification code), while the
        glossary says what the shop calls it. A variant whose words the articles all say is left to the encoder."""
        if not generation or not self.glossary.matches(normalize(rw.dense)):
            return rw

        def unheard(variant: str) -> bool:
            return any(self.composer.unheard(generation, [_stem(w)]) for w in self.tokenizer.words_of(variant)
                       if w not in EN_STOPWORDS and w not in ZH_STOPWORDS)

        termed = self.glossary.in_terms(rw.dense, only=unheard)
        return rw if termed == fold(rw.dense) else replace(rw, dense=termed)

    def read_heads(self, rw: RewrittenQuery, generation: str | None) -> RewrittenQuery:
        """``rw`` with a bare head noun read as the one glossary term it heads ("I didn't get the code": the
        verification code) when that reading brings the question closer to the knowledge base's best passage by
        HEAD_LEAD (dense cosine): a code the customer was sent is what the verification code's passages speak of,
        while "my parcel is late" is as close to its passage without being read as a lost parcel."""
        read, terms = self.glossary.with_heads(rw.dense)
        if not terms or not generation or read == fold(rw.dense):
            return rw
        try:
            plain, termed = (self.dense.search(generation, self.query_vector(t), 1, lang=rw.lang,
                                               ef_search=self.config.ef_search) for t in (rw.dense, read))
        except Exception:  # noqa: BLE001 - the customer's own words still retrieve
            log.warning("reading a head noun as its term failed", exc_info=True)
            return rw
        if not termed or (plain and float(termed[0].score) < float(plain[0].score) + HEAD_LEAD):
            return rw
        said = [w for t in terms for w in self.tokenizer.words_of(t) if w not in EN_STOPWORDS]
        return replace(rw, dense=read, lexical=" ".join([rw.lexical, *terms]),
                       keywords=list(dict.fromkeys([*rw.keywords, *said])),
                       expansions=[*rw.expansions, *(t for t in terms if t not in rw.expansions)])

    def referred(self, query: str, rw: RewrittenQuery, text: str, generation: str) -> list[Hit]:
        """When ``text`` only points to another article by its title, that article's passages (the ones the
        question finds first), else []."""
        m = _POINTER.match(text.strip())
        if m is None or not generation:
            return []
        title = m.group("title").strip().casefold()
        try:
            found = self.retrieve(m.group("title"), PART_HITS, "hybrid", generation=generation, lang=rw.lang)
            doc = next((h.chunk.doc_id for h in found if h.chunk and h.chunk.title.strip().casefold() == title), None)
            if doc is None:
                return []
            asked = self.retrieve(query, 30, "hybrid", generation=generation, lang=rw.lang, rewritten=rw)
        except Exception:  # noqa: BLE001 - the pointer itself is still an answer
            log.warning("following a reference to another article failed", exc_info=True)
            return []
        return [h for h in asked if h.chunk and h.chunk.doc_id == doc] or [h for h in found if h.chunk
                                                                           and h.chunk.doc_id == doc]

    def answer(self, query: str, *, generation: str | None = None,
               prefer: Callable[[str], bool] | None = None) -> Answer:
        """A grounded extractive answer with citations, or (below the threshold) none and the evidence.
        ``prefer``: the articles (by doc id) the caller already knows the question is about; one of their passages
        close behind the best leads (:meth:`preferred_first`)."""
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        cfg = self.config
        rw = self.rewriter.rewrite(query)
        about = asked_about(query)
        if about != query:
            # a last part that only asks what to do ("..., what are my options?") names nothing an article must say:
            # its words are not the question's keywords (the encoder still reads the question whole)
            rw = replace(rw, keywords=self.rewriter.rewrite(about).keywords)
        elsewhere = self.elsewhere_words(rw, self.places_elsewhere(query, rw.lang,
                                                                   generation or self.active_generation())[0])
        if elsewhere and len(elsewhere) < len(rw.keywords):
            # a place the articles never name is no word they lack: its words are theirs for the places they do not
            # name ("do you ship to Canada?" asks for the words of "do you ship to other countries?")
            generic = self.rewriter.rewrite(self.generic_question(query, rw, generation or self.active_generation()))
            rw = replace(rw, keywords=[w for w in generic.keywords if w not in elsewhere],
                         lexical=generic.lexical)      # BM25 looks for those words too ("to the US" is no "us")
        if not rw.dense.strip():
            return Answer(answered=False, query=query, reason="empty query", rewritten_query=rw.lexical)
        rw = self.in_own_words(rw, generation or self.active_generation())
        rw = self.read_heads(rw, generation or self.active_generation())
        mode = "rerank" if self.reranker is not None else "hybrid"
        try:
            generation = generation or self.active_generation()
            hits = self.retrieve(query, max(cfg.answer_passages, 10), mode, rewritten=rw, timings=timings,
                                 generation=generation)
        except KnowledgeBaseEmpty:
            return Answer(answered=False, query=query, reason="knowledge base is empty", rewritten_query=rw.lexical)
        except Exception as exc:  # noqa: BLE001 - a broken index must send the customer to a human, not fail the turn
            log.exception("knowledge base retrieval failed")
            return Answer(answered=False, query=query, reason=f"retrieval failed: {type(exc).__name__}",
                          rewritten_query=rw.lexical, timings=timings)
        t = time.perf_counter()
        if cfg.same_language and rw.lang:
            same = [h for h in hits if h.chunk and h.chunk.lang == rw.lang]
            if same:
                hits = same + [h for h in hits if h not in same]
        hits = self.entry_rank(rw, hits, generation or "")
        if elsewhere:
            # a place the articles never name is answered by what they say of the places they do not name: that
            # passage leads, when retrieval found it among the first
            there = [h for h in hits[:ENTRY_CANDIDATES] if h.chunk is not None and h.chunk.lang == rw.lang
                     and elsewhere_in(h.chunk.text)]
            hits = there + [h for h in hits if h not in there]
        ranked = hits
        if prefer is not None:
            hits = self.preferred_first(hits, prefer, rw.lang)
        passages = hits[: cfg.answer_passages]
        signals = self.signals(rw, hits, generation) if passages else {}     # all hits: the margin looks past the passages
        confidence = self.confidence(rw, passages, signals)
        if hits is not ranked:
            # a preferred passage leads: the question is as answerable as retrieval's own best says, or its own
            # evidence says, whichever is surer (the two are within PREFERRED_MARGIN of each other)
            first = self.signals(rw, ranked, generation)
            if (surer := self.confidence(rw, ranked, first)) > confidence:
                signals, confidence = {**first, "preferred": passages[0].chunk_id}, surer
        # something failing, answered only from a passage whose headings name it ("app打不开" is not "支付失败"); a
        # message never received is named by what it carried, not by the customer's word for it ("短信" / 验证码)
        reports = tells_something_failing(query) or _FAILS.search(fold(query).replace("’", "'")) is not None
        if passages and reports and not self.names_reported(query, rw, passages[0]):
            # steps for another failure ("支付失败 > 可以这样尝试" for "app打不开") are no answer to this one
            signals, confidence = {**signals, "reported": False}, 0.0
        if passages and self.only_quoted(rw, passages[0]):
            # the passage says the question's words only in a scam text it warns of: no answer to it
            signals, confidence = {**signals, "quoted": True}, 0.0
        if not passages or confidence < cfg.answer_threshold:
            draft = self.compose(query, rw, passages, generation)[0] if passages else None
            timings["answer"] = time.perf_counter() - t
            timings["total"] = time.perf_counter() - t0
            return Answer(answered=False, query=query, confidence=confidence, passages=passages, signals=signals,
                          draft=draft,
                          citations=[citation(h) for h in passages], timings=timings, rewritten_query=rw.lexical,
                          reason=(f"confidence {confidence:.2f} below the answer threshold {cfg.answer_threshold:.2f}"
                                  if passages else "no passage found"))
        composed = self.compose(query, rw, passages, generation)
        text = composed[0]
        cited = composed[1]
        reason = None
        if self.generator is not None:
            try:
                generated = self.generator.generate(query, passages)
                bad = unsupported_sentences(generated, passages, self.tokenizer)
                if generated and not bad:
                    text = generated
                else:
                    reason = f"generated answer discarded: {len(bad)} unsupported sentence(s)"
            except Exception as exc:  # noqa: BLE001 - the extractive answer stands
                log.warning("generator failed: %s", exc)
                reason = f"generator failed: {type(exc).__name__}"
        timings["answer"] = time.perf_counter() - t
        timings["total"] = time.perf_counter() - t0
        return Answer(answered=True, query=query, text=text, draft=composed[0], citations=cited, confidence=confidence,
                      signals=signals,
                      passages=passages, timings=timings, rewritten_query=rw.lexical, reason=reason)
