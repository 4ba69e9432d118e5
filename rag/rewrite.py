"""Query rewriting and the search tokenizer shared by indexing and querying.

Customers type full-width digits, traditional characters, greetings and colloquial words;
articles use canonical terms. Rewriting folds width and case (NFKC + lower), traditional to
simplified Chinese (OpenCC t2s), drops fillers ("请问", "hi, can you tell me"), cuts Chinese with
jieba (search mode) and adds the canonical term of every glossary variant found in the query.
The dense retriever gets the folded text (e5 reads whole sentences); BM25 gets the keywords
plus glossary terms.

The same :class:`SearchTokenizer` (jieba dictionary + glossary words) must cut both the
indexed text and the queries, so the composition root builds one and hands it to both.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rag.chunk import detect_lang
from text.normalise import normalise as _normalise

_CJK_CHAR = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAS_WORD = re.compile(rf"[0-9A-Za-z{_CJK_CHAR}\u3040-\u30ff\uac00-\ud7af]")
_SPACES = re.compile(r"\s+")
_CJK_RUN = re.compile(f"[{_CJK_CHAR}]+")
_OTHER_WORD = re.compile(r"[0-9a-z\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff\u3040-\u30ff\uac00-\ud7af]+")

# Particles and function words that never decide which article answers (query side only).
ZH_STOPWORDS = frozenset("的 了 吗 呢 吧 啊 呀 哦 嘛 么 哈 嗯 噢 喔 啦 哇 呗 之 与 及 或 和 跟 被 把 给 是 在 我 你 您 我们 他 她 它 这 那 这个 那个 就 都 也 还 又 很 请 下 "
                         "可以 能 能否 可否 帮".split())
EN_STOPWORDS = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being am do does did "
    "i me my we our you your he she it its they them their this that these those there here what which who whom "
    "can could would should will shall may might must have has had not no so than then too very just "
    "please hi hello hey thanks thank possible".split()
)
# Greetings and politeness that carry no topic (removed before keyword extraction).
FILLERS_ZH = ("请问一下", "请问", "麻烦问一下", "麻烦问下", "我想问一下", "我想问下", "想问一下", "想问下", "问一下",
              "你好", "您好", "在吗", "谢谢你", "谢谢", "麻烦你", "麻烦了", "麻烦", "亲亲", "亲，", "客服，", "哈喽")
FILLERS_EN = ("can you tell me", "could you tell me", "can you please tell me", "i would like to know", "i'd like to know",
              "i want to know", "i wanted to ask", "i have a question", "quick question", "excuse me",
              "thank you", "thanks", "please", "hello", "hi there", "hi", "hey", "good morning", "good afternoon")


def fold(text: str) -> str:
    """Width (NFKC), traditional -> simplified, whitespace; case is kept (the encoder is cased)."""
    return _normalise(text, case="keep", simplify="cjk", spaces="squash")


def normalize(text: str) -> str:
    """:func:`fold` plus lower case: the form glossary matching and tokenizing work on."""
    return fold(text).lower()


class SearchTokenizer:
    """jieba (search mode) over normalised text, plus Chinese character n-grams.

    Extra words (glossary terms) join a private ``jieba.Tokenizer`` dictionary, kept out of the
    process-wide default one. Character unigrams and bigrams of every Chinese run are added
    because jieba's words alone miss paraphrases that share characters but not segmentation:
    measured on oppo_zh, BM25 nDCG@10 0.54 with jieba words, 0.67 with words + 1/2-grams.
    Use :func:`get_tokenizer` to share one per word set: building one reads jieba's dictionary
    (about a second).
    """

    def __init__(self, words: Iterable[str] = (), ngrams: tuple[int, ...] = (1, 2)):
        import jieba

        jieba.setLogLevel(logging.WARNING)
        self._words = frozenset(w for w in words if w and w.strip())
        self.ngrams = tuple(ngrams)
        self._jieba = jieba.Tokenizer()
        self._jieba.initialize()
        self._lock = threading.Lock()
        for w in sorted(self._words):
            w = normalize(w)
            if re.search(f"[{_CJK_CHAR}]", w) and " " not in w:
                self._jieba.add_word(w, freq=max(self._jieba.suggest_freq(w, tune=False), 50))

    def words_of(self, text: str) -> list[str]:
        """Words of normalised text, in order: jieba (search mode) on Chinese runs, letters/digits elsewhere.

        Only Chinese goes through jieba (twice as fast as feeding it everything, same tokens).
        """
        text = normalize(text)
        if not text:
            return []
        out: list[str] = []
        pos = 0
        with self._lock:  # jieba's lazy structures are not safe to race
            for m in _CJK_RUN.finditer(text):
                out.extend(_OTHER_WORD.findall(text, pos, m.start()))
                out.extend(self._jieba.cut_for_search(m.group(0)))
                pos = m.end()
        out.extend(_OTHER_WORD.findall(text, pos))
        return out

    def tokenize(self, text: str) -> list[str]:
        """Index/query tokens: :meth:`words_of` plus the character n-grams of each Chinese run."""
        tokens = self.words_of(text)
        if self.ngrams:
            for run in _CJK_RUN.findall(normalize(text)):
                for n in self.ngrams:
                    tokens.extend(run[i:i + n] for i in range(len(run) - n + 1))
        return tokens

    @property
    def words(self) -> frozenset[str]:
        return self._words

    @property
    def fingerprint(self) -> str:
        """Identifies the tokenization: an index built with another one must be rebuilt, not copied."""
        import hashlib

        import jieba

        raw = "\n".join([f"v1 jieba {jieba.__version__} ngrams {self.ngrams}", *sorted(self._words)])
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


@functools.lru_cache(maxsize=8)
def _cached_tokenizer(words: frozenset[str]) -> SearchTokenizer:
    return SearchTokenizer(words)


def get_tokenizer(words: Iterable[str] = ()) -> SearchTokenizer:
    """The shared tokenizer for this word set (index and query side must use the same one)."""
    return _cached_tokenizer(frozenset(w for w in words if w and w.strip()))


# --------------------------------------------------------------------------- glossary


@dataclass
class Glossary:
    """Canonical term -> variants. Matching is on normalised text; Latin variants match whole words."""

    terms: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_variant: dict[str, str] = {}
        for canonical, variants in self.terms.items():
            for v in [canonical, *variants]:
                key = normalize(v)
                if key and key not in self._by_variant:
                    self._by_variant[key] = canonical
        keys = sorted(self._by_variant, key=len, reverse=True)
        parts = [re.escape(k) if re.search(f"[{_CJK_CHAR}]", k) else rf"(?<![0-9a-z]){re.escape(k)}(?![0-9a-z])"
                 for k in keys]
        self._pattern = re.compile("|".join(parts)) if parts else None

    def __len__(self) -> int:
        return len(self.terms)

    def words(self) -> set[str]:
        return {w for c, vs in self.terms.items() for w in (c, *vs)}

    def expand(self, normalized_query: str) -> list[str]:
        """Canonical terms of the variants found in the query that the query does not already say."""
        found: list[str] = []
        for _, canonical in self.matches(normalized_query):
            if canonical not in found:
                found.append(canonical)
        return found

    def in_terms(self, text: str, article: str = "", only: Callable[[str], bool] | None = None) -> str:
        """``text`` (folded) with each variant it says replaced by its canonical term, the articles' own wording
        ("how do I use a discount code?" -> "how do I use a coupon?"); a variant ``article`` says itself stays, and
        so does one ``only`` (given the variant, normalised) refuses."""
        folded = fold(text)
        norm = folded.lower()
        if self._pattern is None or len(norm) != len(folded):
            return folded
        said = normalize(article)
        out, pos = [], 0
        for m in self._pattern.finditer(norm):
            term = self._by_variant[m.group(0)]
            if normalize(term) in norm:      # (a variant that holds its term, "开发票", says it already)
                continue
            if only is not None and not only(m.group(0)):
                continue
            if re.search(m.group(0) if re.search(f"[{_CJK_CHAR}]", m.group(0))
                         else rf"(?<![0-9a-z]){re.escape(m.group(0))}(?![0-9a-z])", said):
                continue
            out += [folded[pos:m.start()], term]
            pos = m.end()
        return "".join(out) + folded[pos:]

    def terms_said(self, text: str) -> set[str]:
        """The canonical terms ``text`` says, itself or in a variant (the longest one where they overlap)."""
        if self._pattern is None:
            return set()
        return {self._by_variant[m.group(0)] for m in self._pattern.finditer(normalize(text))}

    def narrower(self, question: str, text: str) -> bool:
        """Whether ``text`` says a term that holds one ``question`` says, and the question does not say it: "重开发票"
        (reissue an invoice) holds "发票", so an entry asking about reissuing answers less than "可以开发票吗" asks."""
        q = normalize(question)
        asked = {normalize(t) for t in self.terms_said(question)}
        said = {normalize(t) for t in self.terms_said(text)} - asked

        def adds(t: str, a: str) -> bool:
            """Whether ``t`` holds ``a`` and says more than the question does ("失败" of "支付失败" is in "付款一直失败")."""
            cjk = re.search(f"[{_CJK_CHAR}]", a) is not None
            if a == t or (a not in t if cjk else re.search(rf"(?<![0-9a-z]){re.escape(a)}(?![0-9a-z])", t) is None):
                return False
            rest = [w for w in re.split(r"[\s\-]+", t.replace(a, " ", 1)) if w]
            return not all(w in q if re.search(f"[{_CJK_CHAR}]", w)
                           else re.search(rf"(?<![0-9a-z]){re.escape(w)}(?![0-9a-z])", q) for w in rest)

        return any(adds(t, a) for t in said for a in asked)

    def with_heads(self, text: str) -> tuple[str, list[str]]:
        """``text`` (folded) with each bare head noun of a term said as the term, and the terms: "I didn't get the
        code" -> "I didn't get the verification code". A head is the last word of exactly one of the glossary's
        terms of several English words, itself no term or variant, said after a determiner ("the code", "my
        code") and in no variant the text says ("promo code" is a coupon). What the customer meant by the bare
        word is for the caller to weigh (KnowledgeBase.read_heads)."""
        folded = fold(text)
        norm = folded.lower()
        if self._pattern is None or len(norm) != len(folded) or not norm.isascii():
            return folded, []
        owners: dict[str, list[str]] = {}
        for term in self.terms:
            words = term.split()
            if term.isascii() and len(words) > 1:
                owners.setdefault(normalize(words[-1]), []).append(term)
        heads = {h: ts[0] for h, ts in owners.items() if len(ts) == 1 and h not in self._by_variant}
        if not heads:
            return folded, []
        taken = [m.span() for m in self._pattern.finditer(norm)]
        out, pos, said = [], 0, []
        for m in re.finditer(r"(?<![0-9a-z])(?:the|my|a|an|this|that|your|our)\s+([a-z]+)(?![0-9a-z-])", norm):
            head = m.group(1)
            if head not in heads or any(a < m.end(1) and m.start(1) < b for a, b in taken):
                continue
            out += [folded[pos:m.start(1)], heads[head]]
            pos = m.end(1)
            said.append(heads[head])
        return "".join(out) + folded[pos:], said

    def narrower_article(self, question: str, title: str) -> bool:
        """Whether an article's ``title`` names only narrower subjects than ``question`` asks about, in the glossary's
        terms: "发票修改与重开" (reissuing) for "能开发票吗", "Return shipping costs" for "how do I return an item?". A
        title that also names what is asked ("Delivery times, carriers and shipping fees" for "how much is shipping")
        is about it."""
        return self.narrower(question, title) and not (self.terms_said(title) & self.terms_said(question))

    def matches(self, normalized_query: str) -> list[tuple[str, str]]:
        """(variant, canonical term) for each variant found in the query whose term the query does not say."""
        if self._pattern is None:
            return []
        return [(m.group(0), self._by_variant[m.group(0)]) for m in self._pattern.finditer(normalized_query)
                if normalize(self._by_variant[m.group(0)]) not in normalized_query]


def parse_glossary(data: Any) -> Glossary:
    """Accepts ``{canonical: [variants]}``, ``{canonical: "a, b"}``, ``{terms: ...}`` or ``[{term, synonyms}]``."""
    if isinstance(data, Mapping) and isinstance(data.get("terms"), (Mapping, list)):
        data = data["terms"]
    terms: dict[str, list[str]] = {}
    if isinstance(data, Mapping):
        items = data.items()
    elif isinstance(data, list):
        items = [(e.get("term") or e.get("canonical"), e.get("synonyms") or e.get("variants") or [])
                 for e in data if isinstance(e, Mapping)]
    elif data is None:
        items = []
    else:
        raise ValueError("a glossary is a mapping of canonical term to a list of variants")
    for canonical, variants in items:
        if canonical is None or str(canonical).strip() == "":
            continue
        if isinstance(variants, str):
            variants = [v.strip() for v in re.split(r"[,，、]", variants)]
        elif not isinstance(variants, list):
            variants = []
        terms[str(canonical).strip()] = [str(v).strip() for v in variants if v is not None and str(v).strip()]
    return Glossary(terms)


def load_glossary(path: str | Path | None) -> Glossary:
    """The glossary file (or ``glossary.yaml``/``glossary.yml`` inside a knowledge folder); empty if none."""
    if path is None:
        return Glossary()
    path = Path(path)
    if path.is_dir():
        candidates = [path / "glossary.yaml", path / "glossary.yml"]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            return Glossary()
    try:
        with open(path, encoding="utf-8") as fh:
            return parse_glossary(yaml.safe_load(fh))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text") from exc


# --------------------------------------------------------------------------- rewriting


@dataclass
class RewrittenQuery:
    original: str
    dense: str                 # folded text for the encoder
    lexical: str               # the query without fillers, plus glossary terms, for BM25
    keywords: list[str]        # content words of the query (jieba; fillers and stop words removed)
    expansions: list[str]      # canonical glossary terms added
    lang: str

    def to_dict(self) -> dict[str, Any]:
        return {"dense": self.dense, "lexical": self.lexical, "keywords": self.keywords,
                "expansions": self.expansions, "lang": self.lang}


# English contractions said whole: cut at the apostrophe they leave stubs ("doesn", "isn", "t", "s") that no
# article says as words of their own, so a question said with "isn't" looked less covered by its answer than
# the same question said with "is not"
_NOT_CONTRACTED = {"can": "can", "won": "will", "shan": "shall"}
_NEGATION_CLITIC = re.compile(r"(?<![0-9a-z])([a-z]+)n['’]t(?![0-9a-z])")
_OTHER_CLITIC = re.compile(r"(?<=[a-z])['’](?:s|re|m|ve|ll|d)(?![0-9a-z])")


def uncontracted(text: str) -> str:
    """``text`` (lower case) with English contractions said whole: "isn't" -> "is not", "can't" -> "can not",
    "what's" -> "what" (the clitic is a function word, or a possessive: "the shop's" -> "the shop")."""
    if "'" not in text and "’" not in text:
        return text
    # "isn't" cuts as "is" + "n't"; "can't", "won't", "shan't" as "ca", "wo", "sha" + "n't"
    text = _NEGATION_CLITIC.sub(lambda m: f"{_NOT_CONTRACTED.get(m.group(1) + 'n', m.group(1))} not", text)
    return _OTHER_CLITIC.sub("", text)


# How a message turns to something beside what is going on ("wait, where does the refund go?", "对了，运费多少"):
# at its start only, where it names nothing asked ("等一下" cut as "等" + "一下" drew "退货地址在哪里看" for "等一下，退款
# 会退到哪里"; "wait" later in a question may be what is asked: "how long do I wait for a refund?")
_ASIDE = re.compile(
    r"^(?:(?:oh|ok|okay|sorry|and|also|actually|hmm|um)[,，\s]+)*"
    r"(?:wait(?:\s+a\s+(?:sec(?:ond)?|minute|moment))?|hold\s+on|hang\s+on|one\s+more\s+thing|by\s+the\s+way|btw"
    r"|等一下|等一等|等下|等等|稍等一下|稍等|对了|顺便问一?下|顺便问|顺便说一?下|顺便)"
    r"(?:[,，.。!！:：;；\s]+|(?=[\u4e00-\u9fff]))")


def _strip_fillers(text: str) -> str:
    for f in FILLERS_ZH:
        text = text.replace(f, " ")
    for f in FILLERS_EN:
        text = re.sub(rf"(?<![0-9a-z]){re.escape(f)}(?![0-9a-z])", " ", text)
    return _SPACES.sub(" ", text).strip(" ,，。.!！?？")


class QueryRewriter:
    def __init__(self, tokenizer: SearchTokenizer | None = None, glossary: Glossary | None = None,
                 *, remove_fillers: bool = True):
        self.glossary = glossary or Glossary()
        self.tokenizer = tokenizer or get_tokenizer(self.glossary.words())
        self.remove_fillers = remove_fillers

    def rewrite(self, query: str) -> RewrittenQuery:
        folded = fold(query)
        lowered = folded.lower()
        aside = _ASIDE.match(lowered) if self.remove_fillers and len(lowered) == len(folded) else None
        if aside is not None and aside.end() < len(folded):
            folded = folded[aside.end():]     # the encoder reads what is asked, not the turn to it
        norm = folded.lower()
        core = _strip_fillers(norm) if self.remove_fillers else norm
        if not core:          # a query that is only a greeting keeps its words
            core = norm
        tokens = self.tokenizer.words_of(uncontracted(core))
        keywords: list[str] = []
        for t in tokens:
            if t in ZH_STOPWORDS or t in EN_STOPWORDS or t in keywords:
                continue
            keywords.append(t)
        if not keywords:      # all stop words ("what is it"): BM25 still gets something
            keywords = list(dict.fromkeys(tokens))
        expansions = self.glossary.expand(norm)
        lexical = " ".join([core, *expansions])
        return RewrittenQuery(original=query, dense=folded, lexical=lexical, keywords=keywords,
                              expansions=expansions, lang=detect_lang(folded))
