"""Answer composition: the lines of the knowledge base that answer the question, whole, in the article's order.

The retrieved passages say which articles hold the answer; the reply is composed from those articles read
whole (every chunk, overlaps removed), so an answer never starts in the middle of a list or stops at a chunk
break. Each line (a paragraph, a list item or table row, an FAQ entry) is scored against the question with
the encoder already loaded (symmetric ``query:`` vectors, cached per text, so a warm article costs nothing),
and the best one is taken with what it needs to be read alone:

- an FAQ entry gives its answer, without the ``Q:`` / ``A:`` / ``问：`` / ``答：`` framing and without its question
  (a yes or a no is said as the statement the question asks about: ``answer_alone``);
- a list item or table row comes with the line that introduces its list (or its label, "Gold"), and a
  how-to question, or a question that matches the introduction itself, gets the whole list;
- a paragraph comes whole, with the lines of its section that score as well.

An opening that defers to cases ("who pays depends on why you return it") goes on with the article's cases, each
briefly (``cases_after``). Numbered steps keep their numbers and are said whole, in order, with the options a step
introduces under it; other lists are said as bullets.

When the chosen entry names none of the specific words the question asks about and another line of the same
article does, that line's entry answers instead (``Composer._in_words``). A word of a title that joins two
subjects ("保修与维修服务") singles out the lines about its subject when the entry is about the other one
("维修要多久" and the entry "保修期多久？"), and a customer's word no line holds ("amex") is read as the glossary's
term for it ("American Express"): an entry that does not name that term gives way to the line that does.

An FAQ entry about one of the cases its article lists ("a refund to Alipay", "买的袜子") answers less than a
question that names none of them ("how long does a refund take?", "衣服不合适能退吗"): it gives way to the article's
general rule (``Composer.narrower``).

A question of several parts ("PayPal or Apple Pay?", "when does it ship, and how many days to arrive?")
gets one entry per part, each citing its article. Everything is taken from articles in one language: the
customer's when the knowledge base has it, else the reply says which language the article is in. The text
always ends where a sentence ends, and neither asks the article's rhetorical questions nor says a fact twice
(``Composer.said_once``).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rag.answer_type import asked, asking_word, holds
from rag.chunk import _CJK, content_hash, join_units, sentence_units, split_sentences, unfinished, whole_sentences
from rag.rewrite import EN_STOPWORDS, ZH_STOPWORDS, fold
from rag.types import Chunk, Hit

_FAQ_Q = re.compile(r"^(?:q|问)\s*[:：]\s*", re.I)
_FAQ_A = re.compile(r"^(?:a|答)\s*[:：]\s*", re.I)
_TERMINAL = ("。", ".", "!", "！", "?", "？", "”", "」", ")", "）", '"')
_SOFT_END = re.compile(r"[;；,，、:：\s]+$")
_NUMBERED = re.compile(r"^(\d{1,3})[.)]\s+(?=\S)")      # a step of an ordered list ("1. Open My Orders")
# a list item that ends on a joining word runs on into the next one ("one store-wide coupon, plus" / "one shipping
# coupon, plus" / "points."): closing it with a full stop would cut the sentence
SHORT_LIST = 3     # a list of at most this many items, announced by its introduction, is never cut short
_RUNS_ON = re.compile(r"(?:\b(?:and|or|plus)|以及|或者|和|或|及)\s*$", re.I)
_WHOLE_LIST = re.compile(r"\b(?:how (?:do|can|to|should)|how's|steps?|what do i (?:do|need)|where do i)\b|怎么|怎样|如何|"
                    r"步骤|流程|办理|操作|\bwhich\b|\bwhat (?:are|kinds?|types?|options?)\b|哪些|哪几|有什么|有哪", re.I)
# where a question of several parts is cut: sentence ends, commas, and the words that join two questions
_PART_CUT = re.compile(r"[?？。!！;；]+|[,，]\s*(?:and|or|also|plus)?\s*|\s+(?:and also|and|or|also|plus)\s+|"
                       r"还有|另外|以及|或者|还是|顺便问一下|顺便问", re.I)
MAX_LIST = 8               # list lines shown at most when a whole list is the answer
MAX_CHARS = 700            # a reply longer than this drops its weakest extra entries
NEAR = 0.02                # a line this close to the best one's score belongs to the answer too
SWITCH = 0.02             # a passage of the anchor's article whose lines match this much better anchors instead
PART_FLOOR = 0.80          # a question part's best line below this adds nothing
ANSWER_TYPE_LEAD = 0.03    # added to a line's score when it states the quantity asked for (rag/answer_type.py)
WORDS_LEAD = 0.03          # weight of the question's specific words a line holds, against its cosine (see _in_words)
NARROWER = 0.03           # taken from an FAQ entry about one case the article lists when the question names none of them
TITLE_LEAD = 0.03          # a question this much closer to an article's title than to any of its passages asks for its opening
OPENING_LEAD = 0.0         # the same for an article that opens with a paragraph, which leads the entry instead of replacing it
CASES = 3                  # a list names cases when at least this many of its items (or one item's terms) name one
MAX_CLAUSE = 16             # a Chinese list item this short and of one clause names its case in its own words
STOPWORDS = frozenset(EN_STOPWORDS) | frozenset(ZH_STOPWORDS)
COMMON_SHARE = 2 / 3       # a word held by more than this share of an article's lines does not single out a line
REPEAT = 0.75              # a sentence whose words a line already said holds this share of is said twice


@dataclass
class Line:
    """One line of an article: a paragraph, a list item / table row, or an FAQ question / answer."""

    doc: int                     # index of the article among the candidates
    idx: int                     # position in the article
    text: str
    section: str
    kind: str = "para"           # para | item | intro | label | faq_q | faq_a | case (a case's heading)
    group: int = -1              # the list or FAQ entry it belongs to
    label: int = -1              # the item's label line ("Gold") or the list's introduction
    chunks: tuple[str, ...] = ()  # the chunks the line was read from


@dataclass
class Composition:
    text: str
    docs: list[str]                                    # cited articles, in the order they appear
    lang: str
    scores: dict[str, float] = field(default_factory=dict)
    parts: int = 1


def _ends(text: str) -> bool:
    return text.rstrip().endswith(_TERMINAL)


def _is_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


def close_sentence(text: str) -> str:
    """End a list item or table row where a sentence ends (";" / "；" / no mark -> "." / "。")."""
    text = text.rstrip()
    if not text or _ends(text):
        return text
    stripped = _SOFT_END.sub("", text)
    return stripped + ("。" if _is_cjk(stripped) else ".")


def number_of(text: str) -> int:
    """The number of an ordered list's step ("2. Tap Apply for after-sales" is 2), or 0."""
    m = _NUMBERED.match(text.strip())
    return int(m.group(1)) if m else 0


def _ends_colon(ln: Line) -> bool:
    return ln.text.rstrip().endswith((":", "："))


def strip_framing(text: str) -> str:
    return _FAQ_A.sub("", _FAQ_Q.sub("", text.strip())).strip()


def article_lines(chunks: Sequence[Chunk], doc: int = 0) -> list[Line]:
    """An article's lines from its chunks in order, the overlap repeated between chunks removed."""
    lines: list[Line] = []
    prev_section: str | None = None
    prev_units: list[str] = []
    current: list[tuple[str, bool]] = []
    section = ""

    owners: list[str] = []

    def flush() -> None:
        if current:
            lines.append(Line(doc, len(lines), join_units([(s, False) for s, _ in current]), section,
                              chunks=tuple(dict.fromkeys(owners))))
            current.clear()
            owners.clear()

    for c in chunks:
        units = sentence_units(c.text or "")
        if c.section == prev_section and prev_units:
            k = min(len(prev_units), len(units))
            while k and [u for u, _ in units[:k]] != prev_units[-k:]:
                k -= 1
            units = units[k:]
            if k and current:
                owners.append(c.chunk_id)  # the repeated sentences end the line being read
        else:
            flush()
        if c.section != prev_section:
            prev_units = []
        section = c.section or ""
        # a sentence too long for one chunk was cut at a comma (rag.chunk.pack): the chunk that follows goes on
        # with it, so its first line is the rest of the line left open, never a line of its own
        goes_on = c.section == prev_section and bool(current) and unfinished(current[-1][0])
        for n, (s, new_line) in enumerate(units):
            if new_line and not (n == 0 and goes_on):
                flush()
            current.append((s, new_line))
            owners.append(c.chunk_id)
        prev_units = (prev_units + [u for u, _ in sentence_units(c.text or "")])[-50:]
        prev_section = c.section
    flush()
    _structure(lines)
    return lines


_INFLECTION = re.compile(r"(?:ing|ed|es|s|e)$")   # "update", "updated", "updates", "updating": one word
_NOT = re.compile(r"\b(?:not|no|never|cannot|can't|don't|doesn't|won't|isn't|aren't|without|none)\b|[不没无未别勿非]",
                  re.I)
_ZH_DIGITS = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_ZH_QUANTITY = re.compile(r"([一两二三四五六七八九十])(个|天|次|年|周|小时|工作日|分钟)")


def _asks(sentence: str) -> bool:
    """Whether a sentence asks (ends with a question mark that no quote closes: "Can't receive the code?" in
    quotes names a button)."""
    return sentence.rstrip().endswith(("?", "？"))


def _label_like(text: str) -> bool:
    t = text.strip()
    return (not _ends(t) and not _SOFT_END.search(t) and len(t) <= 24
            and (t[:1].isupper() or (_is_cjk(t) and len(t) <= 8)) and ":" not in t and "：" not in t)


def _structure(lines: list[Line]) -> None:
    """Kinds and groups: FAQ entries, lists (runs of short lines in a section) with their introduction."""
    group = 0
    i = 0
    while i < len(lines):
        ln = lines[i]
        if _FAQ_Q.match(ln.text):
            group += 1
            ln.kind, ln.group = "faq_q", group
            j = i + 1
            while j < len(lines) and lines[j].section == ln.section and not _FAQ_Q.match(lines[j].text):
                lines[j].kind, lines[j].group = "faq_a", group
                j += 1
            i = j
            continue
        # a run of short lines in one section is a list (items, steps, table rows); a line ending in ":"
        # introduces the run after it. Numbered steps are one list: a step ending in ":" introduces the lines
        # up to the next step (its sub-items, which take it as their label), and a line after a step that
        # introduces nothing ends the list
        intro = ln if _ends_colon(ln) and not number_of(ln.text) else None
        first = j = i + 1 if intro else i
        step: Line | None = None
        while (j < len(lines) and lines[j].section == ln.section and len(lines[j].text) <= 260
               and not _FAQ_Q.match(lines[j].text)):
            k = number_of(lines[j].text)
            if k and j > first and (step is None or k != number_of(step.text) + 1):
                break             # another list starts
            if not k and (_ends_colon(lines[j]) or (step is not None and not _ends_colon(step))):
                break
            step = lines[j] if k else step
            j += 1
        items = lines[first:j]
        if len(items) >= 2:
            group += 1
            label = intro.idx if intro else -1
            if intro:
                intro.kind, intro.group, intro.label = "intro", group, -1
            if step is not None:           # an ordered list: its steps, and each sub-item under its step
                head = label
                for it in items:
                    it.kind, it.group, it.label = "item", group, head if not number_of(it.text) else label
                    if number_of(it.text) and _ends_colon(it):
                        head = it.idx
                    elif number_of(it.text):
                        head = label
                i = j
                continue
            for it in items:
                if _label_like(it.text) and it is not items[-1]:
                    it.kind, it.group, it.label = "label", group, label
                    label = it.idx
                else:
                    it.kind, it.group, it.label = "item", group, label
            i = j
            continue
        i += 1


_JOINED = re.compile(r"\s+(?:and|or|&)\s+|[与和及或、/&]", re.I)
_CASE_SEP = re.compile(r"\s+[–—-]\s+|[:：|]")
_ASIDE = re.compile(r"\s*[(（][^)）]*[)）]")
_CASE_LIST = re.compile(r"[,，、;；]|\s+(?:and|or)\s+")


# a line that defers to cases: a question it embeds ("who pays", "whether you can cancel", "由谁承担") that
# depends on something, or a bare "it depends"
_DEFERS_EN = re.compile(r"\b(?:who|whether|how|what|which|when|where|if)\b[^.!?]*\b(?:depends?|depending|vary|varies|"
                        r"differs?|is decided|is determined)\b|^(?:it|that|this)\s+(?:all\s+)?depends\b", re.I)
_DEFERS_ZH = re.compile(r"(?:谁|能否|是否|能不能|可不可以|多快|多久|多少|怎么|怎样|如何|哪|什么)[^。！？]*(?:取决于|视[^。！？]*而定|"
                        r"因[^。！？]*而异|要看|由[^。！？]*决定|[^。！？]*不同而)|^(?:这|那)?(?:要看|得看|视情况而定|看情况)")
MAX_CASES = 4              # case sections an opening that defers goes on with at most
CASE_CHARS = 120           # about what one of them says at most (Chinese characters; 2.5 times as many in English)


def defers(text: str) -> bool:
    """Whether a line leaves its answer to the cases that follow it (by its form: an embedded question that
    depends on something, :data:`_DEFERS_EN` / :data:`_DEFERS_ZH`), not a fact about what something depends on
    ("your tier depends only on how much you spend")."""
    text = strip_framing(text)
    return bool((_DEFERS_ZH if _is_cjk(text) else _DEFERS_EN).search(text))


def _states(heading: str) -> bool:
    """A heading that names a case and its outcome ("Quality problems: free return shipping")."""
    return bool(re.search(r"\S\s*[:：]\s*\S", heading))


def cases_after(ln: Line, doc: Sequence[Line]) -> list[Line]:
    """The cases an opening that defers leaves its answer to, each briefly: the sections after it (not an FAQ),
    each as its heading and its first line (with as much of the list it introduces as CASE_CHARS allows). Headings that state a case and its
    outcome ("Quality problems: free return shipping", "无理由退货：买家承担运费") are the cases when at least two
    follow in a row; else the next MAX_CASES sections are. Nothing when fewer than two cases follow."""
    sections: list[list[Line]] = []
    for x in doc:
        if x.idx <= ln.idx or x.section == ln.section or not x.section:
            continue
        if sections and sections[-1][0].section == x.section:
            sections[-1].append(x)
        else:
            sections.append([x])
    sections = [sec for sec in sections if all(x.kind not in ("faq_q", "faq_a") for x in sec)]
    heads = [sec[0].section.split(" > ")[-1] for sec in sections]
    stating = 0
    while stating < len(heads) and _states(heads[stating]):
        stating += 1
    sections = sections[:stating] if stating >= 2 else sections[:MAX_CASES]
    if len(sections) < 2:
        return []
    out: list[Line] = []
    for sec, head in zip(sections, heads, strict=False):
        first = sec[0]
        out.append(Line(first.doc, first.idx, head, first.section, "case", -1, -1, first.chunks))
        run = [x for x in sec if x.group == first.group][:MAX_LIST + 1] if first.group >= 0 else []
        budget = CASE_CHARS if _is_cjk(first.text) else 2.5 * CASE_CHARS
        told = [first]
        for x in run[1:]:        # the list its first line introduces, as far as a brief case goes
            if sum(len(y.text) for y in told) + len(x.text) > budget and not ordered(run) and not (
                    first.kind == "intro" and len(run) <= SHORT_LIST + 1):
                break            # a short list announced ("You have two options:") or steps are said whole
            told.append(x)
        out += told
    return out


def ordered(lines: Sequence[Line]) -> bool:
    """Whether list lines are an ordered list's (numbered steps)."""
    return any(x.kind == "item" and number_of(x.text) for x in lines)


def case_terms(text: str) -> list[str]:
    """What a list item or table row is about: first the term before its first separator ("**Alipay** – ...",
    "贴身衣物：...", a row's first cell; "" when that is long or a quantity, "签收1–7天"), then the short terms it
    enumerates after it ("underwear, swimwear, socks", "内衣、内裤、袜子等")."""
    text = _NUMBERED.sub("", strip_framing(text).replace("**", "").strip())
    m = _CASE_SEP.search(text)
    if m is None:
        return [text] if _short_term(text) else []
    head = _ASIDE.sub("", text[: m.start()]).strip()       # "UnionPay cards (debit and credit)" names UnionPay cards
    terms = [head if _short_term(head) else ""]
    terms += [t.strip() for t in _CASE_LIST.split(text[m.end():]) if t and _short_term(t.strip())]
    return terms


def clause_item(text: str) -> bool:
    """A Chinese list item said as one short clause ("商品在运输中破损；"): a case named by its own words (jieba's
    words, which no separator sets apart as a term)."""
    t = _SOFT_END.sub("", strip_framing(text).replace("**", "")).rstrip("。.")
    return _is_cjk(t) and 0 < len(t) <= MAX_CLAUSE and not re.search(r"[，,。；;：:！!？?]", t)


def _short_term(text: str) -> bool:
    """A name rather than a sentence or a quantity."""
    if any(c.isdigit() for c in text):
        return False
    return 0 < len(text) <= 6 if _is_cjk(text) else 0 < len(text.split()) <= 3


def unit_text(ln: Line, lines: Sequence[Line]) -> str:
    """What a line is scored as: the line with what gives it meaning (its list's label or introduction,
    its section heading), and for an FAQ answer its question; a step without its number."""
    text = _NUMBERED.sub("", strip_framing(ln.text))
    if ln.kind in ("item", "label") and ln.label >= 0:
        head = _NUMBERED.sub("", strip_framing(lines[ln.label].text)).rstrip(":： ")
        return f"{head}: {text}"
    if ln.kind == "faq_a":
        q = next((x for x in lines if x.group == ln.group and x.kind == "faq_q"), None)
        return f"{strip_framing(q.text)} {text}" if q is not None else text
    if ln.kind in ("item", "para", "intro") and ln.section:
        return f"{ln.section.split(' > ')[-1]}: {text}"
    return text


def structured(lines: Sequence[Line]) -> bool:
    """Whether an article has entries (headings, FAQ entries, lists) rather than being one answer."""
    return any(ln.section or ln.kind != "para" for ln in lines)


def question_parts(query: str) -> list[str]:
    """The parts of a question that asks several things (each long enough to mean something alone). A part that
    only asks ("what can I do?", "怎么办？") asks about the part before it: it stays with that part, never a question
    of its own ("the lamp arrived broken, what can I do?" is one question, not a second one answered from any
    article that says what to do)."""
    parts = [p.strip() for p in _PART_CUT.split(query or "") if p and p.strip()]
    keep: list[str] = []
    for p in parts:
        if keep and only_asks(p):
            keep[-1] = f"{keep[-1]} {p}"
        elif len(p) >= 2 if _is_cjk(p) else len(p.split()) >= 2 or len(p) >= 6:
            keep.append(p)
    return keep if len(keep) >= 2 else []


def only_asks(part: str) -> bool:
    """Whether a part of a question names nothing: its words only ask or are stop words ("what can I do", "how
    so", "what are my options"), or it is a short Chinese asking phrase ("怎么办", "可以吗", "我该怎么办")."""
    if _is_cjk(part):
        core = _ZH_ASKER.sub("", re.sub(r"[\s?？!！。,，]", "", part))
        # what is left of it beside its asking words is at most a character ("办" of "怎么办"): "能注销吗" names what
        # is asked, "注销"
        return 0 < len(core) <= 4 and asking_word(core) and len(_ASKING_ZH_WORDS.sub("", core)) < 2
    words = re.findall(r"[a-z0-9]+", part.lower())
    return bool(words) and all(w in STOPWORDS or asking_word(w) or len(w) == 1 for w in words)


_ASKING_ZH_WORDS = re.compile(r"几|多少|多久|多长|什么|怎么|怎样|如何|哪|为什么|吗|呢|能否|是否|吧|呀|啊")
# who asks, before a Chinese asking phrase ("我该怎么办", "那我应该怎么办"): the phrase still names nothing
_ZH_ASKER = re.compile(r"^(?:那|那么)?(?:我们|我)?(?:现在)?(?:该|应该|应当|要|能|可以)?")
# what a question asks for when it asks a quantity, a time, a place, a reason or a choice: never a part to leave out
_ASKS_WHAT = re.compile(r"\b(?:when|where|why|which|who|long|much|many)\b|几|多少|多久|多长|什么时候|哪|为什么", re.I)


def asked_about(query: str) -> str:
    """The question without a last part that only asks what to do ("the lamp arrived broken, what are my
    options?" asks about "the lamp arrived broken"), else the question itself.

    Such a part names nothing an article says: its words ("options") are not words the answer must hold, so
    "..., what are my options?" scored lower than "..., what can I do?" (all stop words) on the same entry. A part
    that asks for a quantity, a time, a place or a reason ("..., how long?", "..., 为什么？") says what is asked
    and stays."""
    text = (query or "").strip().rstrip(" ?？!！。.")
    last = None
    for m in _PART_CUT.finditer(text):
        if m.end() < len(text) and m.end() > m.start():
            last = m
    if last is None:
        return query
    head, tail = text[:last.start()].strip(), text[last.end():].strip()
    if not head or not tail or not only_asks(tail) or only_asks(head) or _ASKS_WHAT.search(tail) or asked(tail):
        return query
    return head


class VectorCache:
    """Symmetric (``query:``) vectors of article lines, by text (LRU): an article is encoded once."""

    def __init__(self, encoder: Any, size: int = 20000, store: Any = None, store_key: str = ""):
        self.encoder = encoder
        self.size = size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        # the knowledge base's embedding cache (rag.dense.DenseStore: kb_embeddings by encoder and text hash):
        # a line encoded once, by any process, is never encoded again, so a restart warms from the database
        self.store = store
        self.store_key = store_key

    def _stored(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        if self.store is None or not texts:
            return {}
        hashes = {content_hash(t): t for t in texts}
        found = self.store.cached_vectors(self.store_key, list(hashes))
        return {hashes[h]: v for h, v in found.items()}

    def _store(self, texts: Sequence[str], vecs: np.ndarray) -> None:
        if self.store is not None and texts:
            self.store.cache_vectors(self.store_key, [content_hash(t) for t in texts], vecs)

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        out: dict[int, np.ndarray] = {}
        with self._lock:
            for i, t in enumerate(texts):
                v = self._vectors.get(t)
                if v is not None:
                    self._vectors.move_to_end(t)
                    out[i] = v
        missing = sorted({t for i, t in enumerate(texts) if i not in out})
        if missing:
            new = self._stored(missing)
            todo = [t for t in missing if t not in new]
            if todo:
                vecs = np.asarray(self.encoder.encode_queries(todo), dtype=np.float32)
                self._store(todo, vecs)
                new.update(zip(todo, vecs, strict=True))
            with self._lock:
                for t in missing:
                    self._vectors[t] = np.asarray(new[t], dtype=np.float32)
                    while len(self._vectors) > self.size:
                        self._vectors.popitem(last=False)
            for i, t in enumerate(texts):
                if i not in out:
                    out[i] = new[t]
        dim = int(getattr(self.encoder, "dim", 384))
        return np.stack([out[i] for i in range(len(texts))]) if texts else np.empty((0, dim), np.float32)


LANG_NOTE = {
    ("en", "zh"): "This is answered in our Chinese help article:",
    ("zh", "en"): "这个问题我们的帮助文章只有英文版：",
}


class Composer:
    """Composes answers from whole articles; ``articles(doc_ids)`` returns each article's chunks in order."""

    def __init__(self, encoder: Any, *, cache_size: int = 20000, store: Any = None, store_key: str = "",
                 queries: Any = None):
        self.cache = VectorCache(encoder, cache_size, store, store_key)
        self.encoder = encoder
        self.queries = queries      # a VectorCache of the questions' vectors, shared with retrieval
        self._lines: OrderedDict[tuple[str, str, str], list[Line]] = OrderedDict()
        self._lock = threading.Lock()
        # the words of a text (the knowledge base's tokenizer, stemmed), set by the service; without it the
        # answer is chosen by the encoder alone
        self.words: Callable[[str], frozenset[str]] | None = None
        # the words of the glossary's terms a text says in other words ("坏了" says "破损"), set by the service
        self.terms: Callable[[str], frozenset[str]] | None = None
        # whether a text asks about a narrower subject than a question, in the glossary's terms, set by the service
        self.narrows: Callable[[str, str], bool] | None = None
        self._words: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._cases: OrderedDict[tuple[tuple[str, str], ...], frozenset[str]] = OrderedDict()   # per article
        self._df: dict[str, tuple[int, dict[str, int]]] = {}    # per generation: lines, lines holding each word

    def words_in(self, text: str) -> frozenset[str]:
        if self.words is None:
            return frozenset()
        with self._lock:
            found = self._words.get(text)
        if found is None:
            found = frozenset(self.words(text))
            with self._lock:
                self._words[text] = found
                while len(self._words) > 20000:
                    self._words.popitem(last=False)
        return found

    def named_in(self, text: str) -> frozenset[str]:
        """The words of a text with those of the glossary terms it says in other words: an FAQ question about a
        broken item ("商品坏了") names the case its article lists as damage ("商品在运输中破损")."""
        return self.words_in(text) | (self.terms(text) if self.terms is not None else frozenset())

    def cases(self, doc: Sequence[Line]) -> frozenset[str]:
        """The words that name one case among several an article lists: in the terms of a list or table that
        names at least CASES of them (:func:`case_terms`: "Alipay", "socks"), in one or two of its items, in
        none of its headings, not stop words."""
        ident = tuple((x.text, x.kind) for x in doc)
        with self._lock:
            known = self._cases.get(ident)
        if known is not None:
            return known
        heads = frozenset().union(*(self.words_in(h) for h in {x.section.split(" > ")[-1] for x in doc if x.section}))
        counts: dict[str, int] = {}
        lists: dict[int, list[Line]] = {}
        for x in doc:
            if x.kind == "item":
                lists.setdefault(x.group, []).append(x)
        for items in lists.values():
            named = [case_terms(x.text) for x in items]
            terms = [t[0] for t in named if t and t[0]] if sum(1 for t in named if t and t[0]) >= CASES else []
            for t in named:        # an item that enumerates cases itself ("underwear, swimwear, socks")
                terms += t[1:] if len(t) > CASES else []
            words = set().union(*(self.words_in(t) for t in terms))
            clauses = [self.words_in(strip_framing(x.text)) for x in items if clause_item(x.text)]
            if not terms and len(clauses) >= CASES:
                # cases said as whole clauses ("商品在运输中破损", "发错商品、尺码或颜色"): the words that set one
                # apart, not those most of them share ("商品")
                words |= {w for c in clauses for w in c if sum(w in o for o in clauses) <= 2}
            for w in words:
                counts[w] = counts.get(w, 0) + 1
        found = frozenset(w for w, n in counts.items() if n <= 2 and w not in heads and w not in STOPWORDS
                          and not (_is_cjk(w) and len(w) < 2) and not w.isdigit())
        with self._lock:
            self._cases[ident] = found
            while len(self._cases) > 512:
                self._cases.popitem(last=False)
        return found

    def unheard(self, key: str, words: Sequence[str]) -> bool:
        """Whether no line of the knowledge base warmed under ``key`` holds any of ``words``."""
        counted = self._df.get(key)
        return counted is not None and bool(words) and not any(counted[1].get(w) for w in words)

    def narrower(self, ln: Line, doc: Sequence[Line], asked_words: frozenset[str], query: str = "") -> bool:
        """Whether ``ln`` belongs to an FAQ entry that asks about one of the cases its article lists ("a refund
        to Alipay", "买的袜子") while the question names none of them, or about a narrower subject than the
        question's in the glossary's terms (``self.narrows``: "可以开公司抬头吗" asks about an invoice's title for
        "可以开发票吗"): the entry answers less than was asked, and the article's general rule answers it
        (NARROWER)."""
        if ln.kind not in ("faq_q", "faq_a") or self.words is None:
            return False
        q = next((x for x in doc if x.group == ln.group and x.kind == "faq_q"), None)
        if q is None:
            return False
        if query and self.narrows is not None and self.narrows(query, strip_framing(q.text)):
            return True
        cases = self.cases(doc)
        named = self.named_in(strip_framing(q.text)) & cases
        return bool(named) and not (asked_words & cases)

    def _count_words(self, key: str, lines: Sequence[Sequence[Line]]) -> tuple[int, dict[str, int]]:
        df: dict[str, int] = {}
        n = 0
        for doc in lines:
            for ln in doc:
                n += 1
                for w in self.words_in(unit_text(ln, doc)):
                    df[w] = df.get(w, 0) + 1
        return n, df

    def lines_of(self, key: str, doc: int, chunks: Sequence[Chunk]) -> list[Line]:
        ident = (key, chunks[0].doc_id if chunks else "", "".join(c.content_hash for c in chunks))
        with self._lock:
            cached = self._lines.get(ident)
        if cached is None:
            cached = article_lines(chunks, 0)
            with self._lock:
                self._lines[ident] = cached
                while len(self._lines) > 512:
                    self._lines.popitem(last=False)
        return [Line(doc, x.idx, x.text, x.section, x.kind, x.group, x.label, x.chunks) for x in cached]

    def warm(self, key: str, articles: dict[str, list[Chunk]],
             progress: Callable[[int, int], None] | None = None) -> int:
        """Encode every line of ``articles`` ahead of the first question (texts already cached cost nothing);
        ``progress(done, total)`` hears of each batch (texts found cached count as done)."""
        texts: list[str] = []
        for i, (_, chunks) in enumerate(sorted(articles.items())):
            lines = self.lines_of(key, i, chunks)
            texts += [unit_text(ln, lines) for ln in lines]
            texts += sorted({ln.section.split(" > ")[-1] for ln in lines if ln.section})
        texts = list(dict.fromkeys(texts))
        if self.words is not None:      # how many lines of the knowledge base hold each word
            self._df = {key: self._count_words(key, [self.lines_of(key, i, chunks)
                                                     for i, (_, chunks) in enumerate(sorted(articles.items()))])}
        stored = self.cache._stored(texts)             # what any process encoded before costs a read
        with self.cache._lock:
            for t, v in stored.items():
                self.cache._vectors[t] = v
        # by length: a batch pads every text to its longest, so lines of like length go together (the knowledge
        # base's lines run from a 3-token heading to a 100-token paragraph: taken in article order, a batch
        # computed twice the tokens it holds)
        todo = sorted((t for t in texts if t not in stored), key=len)
        done = len(texts) - len(todo)
        if progress is not None:
            progress(done, len(texts))
        for start in range(0, len(todo), 16):        # small batches: a turn never waits long for the encoder
            batch = todo[start:start + 16]
            self.cache.vectors(batch)
            done += len(batch)
            if progress is not None:
                progress(done, len(texts))
        return len(texts)

    def compose(self, query: str, passages: Sequence[Hit], articles: Callable[[Sequence[str]], dict[str, list[Chunk]]],
                *, lang: str | None = None, key: str = "", candidates: int = 5,
                keywords: Sequence[str] = (), focus: Sequence[str] = (),
                in_terms: Callable[[str], str] | None = None) -> Composition | None:
        """The composed answer from the articles of ``passages`` (best first), or None without evidence.

        The best passage (retrieval's choice, in the answer's language) anchors the answer: its lines are
        scored against the question and the best of them is taken with its context. Each further part of
        the question takes the best line among the candidate passages' lines when it adds a new entry.
        """
        hits = [h for h in passages if h.chunk is not None]
        if not hits:
            return None
        langs = [h.chunk.lang for h in hits]
        answer_lang = lang if lang and lang in langs else langs[0]
        cands = [h for h in hits if h.chunk.lang == answer_lang][:candidates]
        doc_ids = list(dict.fromkeys(h.chunk.doc_id for h in cands))
        chunks = articles(doc_ids)
        doc_ids = [d for d in doc_ids if chunks.get(d)]
        if not doc_ids:
            return None
        per_doc = [self.lines_of(key, i, chunks[d]) for i, d in enumerate(doc_ids)]
        doc_of = {d: i for i, d in enumerate(doc_ids)}
        # the lines each candidate passage holds (anchor first)
        pools: list[list[Line]] = []
        for h in cands:
            i = doc_of.get(h.chunk.doc_id)
            if i is None:
                continue
            pools.append([ln for ln in per_doc[i] if h.chunk_id in ln.chunks])
        pools = [p for p in pools if p]
        if not pools:
            return None
        asked_words = self.named_in(query)
        # a passage whose FAQ entries all ask about one case its article lists, which the question does not name
        # ("买的袜子尺码不合适能退吗" for "衣服不合适能退吗"), gives way to its article's passages that answer
        # more generally
        narrow = [bool(fq) and all(self.narrower(ln, per_doc[ln.doc], asked_words, query) for ln in fq)
                  for fq in ([ln for ln in p if ln.kind == "faq_q"] for p in pools)]
        general = [p for p, n in zip(pools, narrow, strict=True) if not n and p[0].doc == pools[0][0].doc]
        if narrow[0] and general:
            pools = general + [p for p in pools if not any(p is g for g in general)]
        pool = list({(ln.doc, ln.idx): ln for p in pools for ln in p}.values())
        parts = question_parts(query)
        if self.queries is not None:      # a part was retrieved alone already: its vector is remembered
            qvecs = self.queries.vectors([query, *parts])
        else:
            qvecs = np.asarray(self.encoder.encode_queries([query, *parts]), dtype=np.float32)
        heads = sorted({ln.section.split(" > ")[-1] for ln in pool if ln.section})
        vecs = self.cache.vectors([unit_text(ln, per_doc[ln.doc]) for ln in pool] + heads)
        sims = vecs[: len(pool)] @ qvecs.T
        for col, asked_text in enumerate([query, *parts]):
            kind = asked(asked_text)       # a line stating the kind of quantity asked for leads its neighbours
            if kind is not None:
                sims[:, col] += np.array([ANSWER_TYPE_LEAD if holds(ln.text, kind) else 0.0 for ln in pool])
        for i, ln in enumerate(pool):
            if self.narrower(ln, per_doc[ln.doc], asked_words, query):
                sims[i, 0] -= NARROWER
        score_of = {(ln.doc, ln.idx): sims[i] for i, ln in enumerate(pool)}
        head_sim = dict(zip(heads, (vecs[len(pool):] @ qvecs[0]).tolist(), strict=True))

        def strength(pl: list[Line]) -> float:
            """How well a passage's own words (its lines, its heading) match the question."""
            best = max(float(score_of[(ln.doc, ln.idx)][0]) for ln in pl)
            return max([best] + [head_sim.get(ln.section.split(" > ")[-1], -1.0) for ln in pl if ln.section])

        # retrieval's best passage anchors the answer, unless another passage of the same article says it
        # clearly better in its own words (an FAQ entry about a neighbouring question ranks high on shared words)
        anchor = pools[0]
        first = strength(anchor)
        rival = max((pl for pl in pools[1:] if pl[0].doc == anchor[0].doc), key=strength, default=None)
        if rival is not None and strength(rival) >= first + SWITCH:
            anchor = rival
            pools = [rival] + [pl for pl in pools if pl is not rival]
        readings = [(qvecs[0], strength)]
        anchored = chunks[doc_ids[anchor[0].doc]]
        termed = in_terms("\n".join(c.said() for c in anchored)) if in_terms is not None else query
        if termed != fold(query):
            # the question in the glossary's terms for the words the article never says ("discount code" is
            # "coupon") may name the article where the customer's words do not; it is weighed against the
            # passages read the same way
            tvec = (self.queries.vectors([termed]) if self.queries is not None
                    else np.asarray(self.encoder.encode_queries([termed]), dtype=np.float32))[0]
            t_line = dict(zip(((ln.doc, ln.idx) for ln in pool), (vecs[: len(pool)] @ tvec).tolist(), strict=True))
            t_head = dict(zip(heads, (vecs[len(pool):] @ tvec).tolist(), strict=True))

            def t_strength(pl: list[Line]) -> float:
                return max([max(t_line[(ln.doc, ln.idx)] for ln in pl)]
                           + [t_head.get(ln.section.split(" > ")[-1], -1.0) for ln in pl if ln.section])

            readings.append((tvec, t_strength))
        whole = self._whole_article(anchor, pools, per_doc, anchored, qvecs, score_of, head_sim, readings)
        # an opening paragraph says what the article is about; the entry the question finds follows it
        opening = whole if whole and whole[0].kind == "para" else None
        if opening:
            whole = None
        main = self._entry(whole or anchor, per_doc, score_of, 0, query, head_sim=head_sim)
        if keywords and self.words is not None and not parts:
            # (a question of several parts: its words belong to different entries, each part finds its own)
            names = [n for c in chunks[doc_ids[main[0].doc]][:1] for n in (c.title, *c.keywords)]
            main = self._in_words(main, per_doc, score_of, qvecs, keywords, key, query, head_sim, names, focus)
        if _WHOLE_LIST.search(query):
            main = self._fuller(main, per_doc, score_of, qvecs)
        if sum(len(x.text) for x in main) < (60 if _is_cjk(query) else 110) and main[0].kind == "para":
            # a short lead ("who pays depends on why you return it") says little alone: the next
            # passage of the same article completes it
            for pl in pools[1:]:
                if pl[0].doc == main[0].doc and not any((x.doc, x.idx) in {(m.doc, m.idx) for m in main} for x in pl):
                    main = main + self._entry(pl, per_doc, score_of, 0, query)
                    break
        if opening:
            follows = [x for x in main if (x.doc, x.idx) not in {(o.doc, o.idx) for o in opening}]
            # an FAQ entry about one case the article lists, which the question does not name ("Can I return a
            # gift card?" for "can I return the boots?"), says nothing the opening's general rule does not
            if follows and all(x.kind in ("faq_q", "faq_a") and self.narrower(x, per_doc[x.doc], asked_words, query)
                               for x in follows):
                follows = []
            main = opening + self._asked_kind(follows, opening, per_doc, score_of, qvecs, query, head_sim)
        lead = [x for x in main if x.kind == "para" and x.section == main[0].section and x.doc == main[0].doc]
        if lead and main[0].kind == "para" and defers(lead[-1].text):
            # an opening that defers to cases ("who pays depends on why you return it") goes on with the cases
            told = cases_after(lead[-1], per_doc[lead[-1].doc])
            if told:
                main = lead + told
        chosen: list[tuple[float, list[Line]]] = [(1.0, main)]
        taken = {(ln.doc, ln.idx) for ln in main}
        for p in range(len(parts)):
            def part_score(ln: Line, col: int = 1 + p) -> float:
                return float(score_of[(ln.doc, ln.idx)][col])

            best = max(pool, key=part_score)
            sc = part_score(best)
            if sc < PART_FLOOR or (best.doc, best.idx) in taken:
                continue
            # a part the entries already chosen say in its own words, about as well as any line, adds nothing
            # ("when does my order ship" after the dispatch times: not the courier entry beside them; "Apple Pay"
            # after the PayPal entry is not said)
            if (max((float(score_of[k][1 + p]) for k in taken if k in score_of), default=-1.0) >= sc - NEAR
                    and self._says(parts[p], [x for _, e in chosen for x in e])):
                continue
            # an article already cited answers a further part when one of its lines says it about as well: the
            # parts of one question are mostly about one subject ("how long until it arrives" after the dispatch
            # times: the delivery times, not a refund's 48 hours)
            cited = {x.doc for _, e in chosen for x in e}
            own = [ln for ln in pool if ln.doc in cited and (ln.doc, ln.idx) not in taken]
            if best.doc not in cited and own and part_score(alt := max(own, key=part_score)) >= sc - NEAR:
                best, sc = alt, part_score(alt)
            home = next(pl for pl in pools if best in pl)
            entry = self._entry(home, per_doc, score_of, 1 + p, parts[p], only=best)
            if best.doc not in cited:
                entry = self._answering(entry, best, per_doc, score_of, qvecs, 1 + p)
            if any((ln.doc, ln.idx) in taken for ln in entry if ln.kind not in ("intro", "label")):
                continue
            chosen.append((sc, entry))
            taken |= {(ln.doc, ln.idx) for ln in entry}
        while len(chosen) > 1 and sum(len(ln.text) for _, e in chosen for ln in e) > MAX_CHARS:
            chosen.pop(min(range(1, len(chosen)), key=lambda i: chosen[i][0]))
        # entries in the article's order (the main entry's article first)
        order = sorted(range(len(chosen)), key=lambda i: (chosen[i][1][0].doc != main[0].doc, chosen[i][1][0].doc,
                                                           min(x.idx for x in chosen[i][1])))
        # (a case's heading comes before its first line, which has its position)
        said = self.said_once([sorted(chosen[i][1], key=lambda x: (x.idx, x.kind != "case")) for i in order])
        text = "\n".join(b for b in (render(e) for e in said) if b)
        # (an entry said already by another says nothing of its article: that article is not cited)
        used = list(dict.fromkeys(doc_ids[e[0].doc] for e in said if e)) or [doc_ids[main[0].doc]]
        if lang and answer_lang and lang != answer_lang and (lang, answer_lang) in LANG_NOTE:
            text = f"{LANG_NOTE[(lang, answer_lang)]}\n{text}"
        top = max((float(score_of[(ln.doc, ln.idx)][0]) for ln in main if (ln.doc, ln.idx) in score_of), default=0.0)
        return Composition(text=text, docs=used, lang=answer_lang, parts=len(chosen), scores={"line": round(top, 4)})

    def _answering(self, entry: list[Line], best: Line, per_doc: list[list[Line]], score_of: dict,
                   qvecs: np.ndarray, col: int) -> list[Line]:
        """A further article's entry for a part of the question without the bullets that do not answer it.

        A part said as a how-to ("收到说账号要注销的短信怎么办？") is given its best line's whole list or section, and
        a section of warnings carries one on refunds ("退款都会自动原路退回") beside the one asked about. Of a
        further article only the bullets that score about as well as the best for the part (NEAR) stay, unless
        the part asks what the section itself is about (its heading scores as well: "要防范哪些诈骗？"); steps
        are said whole."""
        items = [x for x in entry if x.kind == "item"]
        if len(items) < 2 or ordered(items) or best.kind != "item":
            return entry
        doc = per_doc[best.doc]
        missing = [x for x in items if (x.doc, x.idx) not in score_of]
        if missing:
            for x, row in zip(missing, self.cache.vectors([unit_text(x, doc) for x in missing]) @ qvecs.T,
                              strict=True):
                score_of[(x.doc, x.idx)] = row
        top = float(score_of[(best.doc, best.idx)][col])
        heading = best.section.split(" > ")[-1]
        if heading and float(self.cache.vectors([heading])[0] @ qvecs[col]) >= top:
            return entry
        kept = {(x.doc, x.idx) for x in items if x is best or float(score_of[(x.doc, x.idx)][col]) >= top - NEAR}
        return [x for x in entry if x.kind != "item" or (x.doc, x.idx) in kept]

    def _fuller(self, main: list[Line], per_doc: list[list[Line]], score_of: dict, qvecs: np.ndarray) -> list[Line]:
        """For a how-to question, the paragraph of the article that says an FAQ answer whole, and where.

        An FAQ answer is often the shorthand of a section ("Use "Can't receive the code?" and complete identity
        verification"): it names a button without the page it is on and stops before what the steps lead to
        ("after which you can link your new phone number"). A paragraph of the same article that holds REPEAT of
        the answer's words and all its numbers, and says more, is the answer to "how do I ...": it answers
        instead, the best such paragraph by its score."""
        if not main or any(x.kind not in ("faq_q", "faq_a") for x in main) or len({x.group for x in main}) != 1:
            return main
        doc = per_doc[main[0].doc]
        answer = " ".join(strip_framing(x.text) for x in main if x.kind == "faq_a")
        words = self._content(answer)
        numbers = {w for w in words if w.isdigit()}
        if len(words - numbers) < 2:
            return main
        fuller = []
        for x in doc:
            if x.kind != "para":
                continue
            said = self._content(x.text)
            if numbers <= said and len(words & said) >= REPEAT * len(words) and len(said - words) >= 2:
                fuller.append(x)
        if not fuller:
            return main
        missing = [x for x in fuller if (x.doc, x.idx) not in score_of]
        if missing:
            for x, row in zip(missing, self.cache.vectors([unit_text(x, doc) for x in missing]) @ qvecs.T,
                              strict=True):
                score_of[(x.doc, x.idx)] = row
        best = max(fuller, key=lambda x: float(score_of[(x.doc, x.idx)][0]))
        return self._entry(doc, per_doc, score_of, 0, "", only=best)

    def _content(self, text: str) -> frozenset[str]:
        """The words of a sentence that say something (no stop words, no single Chinese character), and its
        numbers (Chinese numerals of a quantity as digits: "七天" says 7)."""
        plain = _ZH_QUANTITY.sub(lambda m: str(_ZH_DIGITS[m.group(1)]) + m.group(2), text)
        words = self.words_in(plain) if self.words is not None else frozenset(re.findall(r"\w+", plain.casefold()))
        # an inflection says the same ("signed for" / "sign for"); a negation is said only by a line that negates
        said = {_INFLECTION.sub("", w) if w.isascii() and len(w) > 4 else w for w in words
                if w not in STOPWORDS and not (_is_cjk(w) and len(w) < 2)}
        return frozenset(said | set(re.findall(r"\d+", plain)) | ({"<not>"} if _NOT.search(plain) else set()))

    def said_once(self, entries: Sequence[Sequence[Line]]) -> list[list[Line]]:
        """The entries in the order said, without what would make the reply ask or read twice.

        A paragraph's rhetorical question ("Changed your mind?") and a heading that asks ("退货运费由谁承担？")
        go: a reply answers, it does not ask (a quoted button name, "Can't receive the code?", is no question, nor
        is a step's condition, "No backup codes left?"). A sentence of a paragraph or an FAQ answer that an
        earlier line or list already says (REPEAT of its words, all its numbers, its negation) goes: the
        opening's "the 7 days start on the day after the parcel is signed for" and the FAQ answer "7 days, counted
        from the day after you sign for the parcel" are one fact, said once, the first time. An FAQ question
        whose answer goes (or keeps only its yes or no) goes too; an entry left with nothing is not said, and a
        reply that would be left with nothing is said whole."""
        told: list[frozenset[str]] = []          # what each line (each list, as a whole) said
        lists: dict[tuple[int, int], int] = {}
        out: list[list[Line]] = []
        for entry in entries:
            kept: list[Line] = []
            for ln in entry:
                if ln.kind == "case" and _asks(ln.text):
                    continue
                if ln.kind not in ("para", "intro", "faq_a"):
                    kept.append(ln)
                    words = self._content(strip_framing(ln.text))
                    if ln.group >= 0 and (ln.doc, ln.group) in lists:
                        at = lists[(ln.doc, ln.group)]
                        told[at] = told[at] | words
                    else:
                        lists[(ln.doc, ln.group)] = len(told)
                        told.append(words)
                    continue
                units = sentence_units(ln.text)
                keep: list[tuple[str, bool]] = []
                for k, (sent, new_line) in enumerate(units):
                    if ln.kind != "faq_a" and _asks(sent) and not (
                            k + 1 < len(units) and units[k + 1][0][:1].islower()):
                        continue
                    words = self._content(_FAQ_A.sub("", sent))
                    numbers = {w for w in words if w.isdigit()}
                    if told and len(words - numbers) >= 2 and any(
                            numbers <= t and ("<not>" not in words or "<not>" in t)
                            and len(words & t) >= REPEAT * len(words) for t in told):
                        continue
                    keep.append((sent, new_line or not keep))
                if len(keep) < len(units) and ln.kind == "faq_a":
                    # a bare yes or no left of an answer the reply already says answers nothing
                    rest = strip_framing(join_units(keep))
                    bare = _YES.match(rest) or _NO.match(rest)
                    keep = [] if bare and not rest[bare.end():].strip(" ,，.。!！") else keep
                if not keep:
                    continue
                kept.append(replace(ln, text=join_units(keep)) if len(keep) < len(units) else ln)
                told.append(self._content(_FAQ_A.sub("", join_units(keep))))
            answered = {x.group for x in kept if x.kind == "faq_a"}
            kept = [x for x in kept if x.kind != "faq_q" or x.group in answered]
            out.append(kept)
        return out if any(out) else [list(e) for e in entries]

    def _in_words(self, main: list[Line], per_doc: list[list[Line]], score_of: dict, qvecs: np.ndarray,
                  keywords: Sequence[str], key: str, query: str, head_sim: dict[str, float],
                  names: Sequence[str] = (), focus: Sequence[str] = ()) -> list[Line]:
        """The entry of the anchor's article that says what is asked in the question's own specific words.

        The encoder scores a line by its meaning as a whole, and an FAQ question of the same form ("can I
        return X?") or on a neighbouring subject outscores the line that names what the customer asked about.
        When the anchor's entry holds none of the question's words that single out a line (not a single
        Chinese character, not a word most of the article's lines hold), the article's lines that hold some
        are scored by their cosine plus WORDS_LEAD times the share of those words they hold, each word weighted
        by how rare it is among the knowledge base's lines; the best one's entry replaces the anchor's when it
        scores higher. An entry that names something asked always stands (a paraphrase of the question in
        other words is left to the encoder). A word of the article's ``names`` (its title and keywords: "快递" of
        "快递几天能到") names the whole article, so it singles out none of its lines.
        """
        doc = per_doc[main[0].doc]
        asked_words = self.named_in(query)
        n, df = self._df.get(key) or self._count_words(key, per_doc)
        # a single Chinese character is mostly a function word ("到", "要", "能"): it names nothing
        # a word of the article's title or keywords names the article, not one of its entries
        naming_article = set().union(*(self.words_in(x) for x in names)) if names else set()
        naming_article -= self._other_subject(main, names[0] if names else "", keywords)
        idf = {w: float(np.log((n + 1) / (df.get(w, 0) + 0.5))) for w in {*keywords, *focus}
               if not (_is_cjk(w) and len(w) < 2) and w not in naming_article}
        if not idf:
            return main
        held = [self.words_in(unit_text(ln, doc)) & idf.keys() for ln in doc]
        # a word most of the article's lines hold names the article, not one of its entries
        common = {w for w in idf if sum(w in h for h in held) > COMMON_SHARE * len(doc)}
        held = [h - common for h in held]
        total = sum(idf[w] for w in set().union(*held)) if held else 0.0
        if total <= 0:
            return main
        missing = [i for i, ln in enumerate(doc) if (ln.doc, ln.idx) not in score_of]
        if missing:
            sims = self.cache.vectors([unit_text(doc[i], doc) for i in missing]) @ qvecs.T
            kind = asked(query)
            for row, i in zip(sims, missing, strict=True):
                row = row.copy()
                if kind is not None and holds(doc[i].text, kind):
                    row[0] += ANSWER_TYPE_LEAD
                if self.narrower(doc[i], doc, asked_words, query):
                    row[0] -= NARROWER
                score_of[(doc[i].doc, doc[i].idx)] = row

        def score(lines: Sequence[Line]) -> float:
            words = set().union(*(held[x.idx] for x in lines))
            return (max(float(score_of[(x.doc, x.idx)][0]) for x in lines)
                    + WORDS_LEAD * sum(idf[w] for w in words) / total)

        own = [x for x in main if x.doc == main[0].doc]
        said = set().union(*(held[x.idx] for x in own))
        # an entry that names something the customer asked about stands; when it names nothing asked, a
        # line that does can take its place
        naming = [ln for ln in doc if held[ln.idx] and not self.narrower(ln, doc, asked_words, query)]
        # a case the article lists that the question names ("内衣" of "内衣不喜欢可以退吗") and the entry does not
        # (its FAQ question shares "不喜欢"): the line that names the case says what holds for it
        named_cases = idf.keys() & self.cases(doc)
        if said and named_cases and not said & named_cases:
            about = [ln for ln in naming if held[ln.idx] & named_cases]
            if about:
                return self._entry(doc, per_doc, score_of, 0, query, only=max(about, key=lambda ln: score([ln])),
                                   head_sim=head_sim)
        # a word the knowledge base never uses, said in its own words by the glossary ("American Express" for
        # "amex"), is what the question is about: an entry that does not name it (the entry on cash on delivery,
        # which shares "accept") gives way to the line that does
        meant = frozenset(focus) & idf.keys()
        if meant and not said & meant and any(held[ln.idx] & meant for ln in naming):
            best = max((ln for ln in naming if held[ln.idx] & meant), key=lambda ln: score([ln]))
            return self._entry(doc, per_doc, score_of, 0, query, only=best, head_sim=head_sim)
        if said or not naming:
            return main
        best = max(naming, key=lambda ln: score([ln]))
        if score([best]) <= score(own):
            return main
        return self._entry(doc, per_doc, score_of, 0, query, only=best, head_sim=head_sim)

    def _other_subject(self, main: Sequence[Line], title: str, keywords: Sequence[str]) -> frozenset[str]:
        """The words of the title's subject the question asks about when the entry is about its other one.

        A title that joins subjects ("保修与维修服务", "Warranty and repairs") names the article by each; "维修要多久"
        names repairs only, and the entry "保修期多久？" the warranty only: there "维修" singles out the lines about
        repairs as any specific word would."""
        subjects = [self.words_in(p) for p in _JOINED.split(title) if p.strip()]
        if len(subjects) < 2:
            return frozenset()
        own = [s - frozenset().union(*(o for j, o in enumerate(subjects) if j != i)) for i, s in enumerate(subjects)]
        asked = [s & set(keywords) for s in own]
        if sum(bool(a) for a in asked) != 1:
            return frozenset()
        said = frozenset().union(*(self.words_in(strip_framing(x.text)) for x in main))
        wanted = next(a for a in asked if a)
        others = frozenset().union(*(s for s, a in zip(own, asked, strict=True) if not a))
        return wanted if not said & wanted and said & others else frozenset()

    def _says(self, part: str, lines: Sequence[Line]) -> bool:
        """Whether ``lines`` hold every word of ``part`` that is not a stop word or a word that only asks (a
        single Chinese character counts: "算" of "积分怎么算" is what is asked about points)."""
        # stop words go before stemming ("does" would stay as "doe")
        said = " ".join(w for w in part.split() if w.casefold().strip("?？,.!") not in STOPWORDS)
        named = {w for w in self.words_in(said) if w not in STOPWORDS and not asking_word(w)}
        return bool(named) and named <= frozenset().union(*(self.words_in(x.text) for x in lines))

    def _asked_kind(self, follows: list[Line], opening: list[Line], per_doc: list[list[Line]], score_of: dict,
                    qvecs: np.ndarray, query: str, head_sim: dict[str, float]) -> list[Line]:
        """The entry that follows an article's opening, when the question asks for a quantity (rag/answer_type.py):
        it must state one. An FAQ entry of the same form ("Is shipping free?" for "how long does shipping take?")
        follows the opening on shared words while the article's line that says how long is elsewhere: that line's
        entry follows instead, or nothing does when no line of the article states the quantity."""
        kind = asked(query)
        if kind is None or not follows or any(holds(x.text, kind) for x in opening + follows):
            return follows
        doc = per_doc[opening[0].doc]
        shown = {(x.doc, x.idx) for x in opening}
        stating = [x for x in doc if (x.doc, x.idx) not in shown and holds(x.text, kind)]
        missing = [x for x in stating if (x.doc, x.idx) not in score_of]
        if missing:
            for x, row in zip(missing, self.cache.vectors([unit_text(x, doc) for x in missing]) @ qvecs.T,
                              strict=True):
                row = row.copy()
                row[0] += ANSWER_TYPE_LEAD      # each of them states the quantity asked for
                score_of[(x.doc, x.idx)] = row
        if not stating:
            return []
        for heading in {x.section.split(" > ")[-1] for x in stating if x.section} - head_sim.keys():
            head_sim[heading] = float(self.cache.vectors([heading])[0] @ qvecs[0])
        best = max(stating, key=lambda x: float(score_of[(x.doc, x.idx)][0]))
        if float(score_of[(best.doc, best.idx)][0]) < PART_FLOOR:
            return []
        return self._entry(doc, per_doc, score_of, 0, query, only=best, head_sim=head_sim)

    def _whole_article(self, anchor: list[Line], pools: list[list[Line]], per_doc: list[list[Line]],
                       chunks: Sequence[Chunk], qvecs: np.ndarray, score_of: dict, head_sim: dict[str, float],
                       readings: Sequence[tuple[np.ndarray, Callable[[list[Line]], float]]]) -> list[Line] | None:
        """The article's first section when the question says the article's title or one of its keywords in other
        words, closer to it than to any of its passages' own lines and headings ("what payment methods do you
        accept?" for "Accepted payment methods", "how do I use a coupon code?" for "Using coupons", "what is your
        return policy?" for the keyword "return policy"): it asks what the article is about,
        which its opening says, rather than what its best-matching section or FAQ entry is about. An article that
        opens with its list must be clearly closer (TITLE_LEAD): the list replaces the entry. One that opens with
        a paragraph (an introduction) needs only be closer (OPENING_LEAD): the paragraph leads the entry, which
        still follows it (see compose). ``readings``: the question's vectors, each with how well a passage's own
        words match it (``strength``). Else None."""
        title = (chunks[0].title if chunks else "").strip()
        doc = per_doc[anchor[0].doc]
        if not title or not doc:
            return None
        names = [title, *(k for k in chunks[0].keywords if k.strip())]    # what customers call it names it too
        lead = OPENING_LEAD if doc[0].kind == "para" else TITLE_LEAD
        if doc[0].kind not in ("intro", "item", "label", "para"):
            return None
        mine = [pl for pl in pools if pl[0].doc == anchor[0].doc]
        name_vecs = self.cache.vectors(names)
        if all(float(max(name_vecs @ vec)) < max(strength(pl) for pl in mine) + lead for vec, strength in readings):
            return None
        first = [x for x in doc if x.section == doc[0].section]
        missing = [x for x in first if (x.doc, x.idx) not in score_of]
        if missing:
            for x, row in zip(missing, self.cache.vectors([unit_text(x, doc) for x in missing]) @ qvecs.T,
                              strict=True):
                score_of[(x.doc, x.idx)] = row
        heading = doc[0].section.split(" > ")[-1]
        if heading and heading not in head_sim:
            head_sim[heading] = float(self.cache.vectors([heading])[0] @ qvecs[0])
        return first

    def _entry(self, pool: list[Line], per_doc: list[list[Line]], score_of: dict, col: int, question: str,
               only: Line | None = None, head_sim: dict[str, float] | None = None) -> list[Line]:
        """The best line of ``pool`` for the question with what it needs to be read alone (module docstring)."""
        def sc(x: Line) -> float:
            v = score_of.get((x.doc, x.idx))
            return float(v[col]) if v is not None else -1.0

        faq = [x for x in pool if x.kind in ("faq_q", "faq_a")]
        ln = only or (max(faq, key=sc) if faq else max(pool, key=sc))
        doc = per_doc[ln.doc]
        top = sc(ln)
        if ln.kind in ("faq_q", "faq_a"):      # the entry: its question (rendered when the answer needs it) and answer
            return [x for x in doc if x.group == ln.group and x.kind in ("faq_q", "faq_a")] or [ln]
        if ln.kind in ("item", "label", "intro"):
            section = [x for x in doc if x.section == ln.section]
            heading = ln.section.split(" > ")[-1]
            if (head_sim and heading in head_sim and head_sim[heading] >= top or _WHOLE_LIST.search(question)) \
                    and len(section) <= MAX_LIST + 2 and all(x.kind != "faq_q" for x in section):
                return section        # the question asks what the section is about: the section, whole
            members = [x for x in doc if x.group == ln.group]
            intro = next((x for x in members if x.kind == "intro"), None)
            if ordered(members):             # steps are said in order and whole, never from the middle
                return members
            if ln.kind == "intro" or _WHOLE_LIST.search(question):
                body = [x for x in members if x.kind != "intro"][:MAX_LIST]
                return ([intro] if intro else []) + body
            if ln.kind == "label":
                near = [ln] + [x for x in members if x.kind == "item" and x.label == ln.idx][:MAX_LIST]
            else:
                near = [x for x in members if x.kind == "item" and (x is ln or sc(x) >= top - NEAR)][:MAX_LIST]
            heads = {x.label for x in near if x.label >= 0}
            heads |= {doc[h].label for h in list(heads) if doc[h].label >= 0}
            out = [doc[h] for h in heads] + near
            return sorted({x.idx: x for x in out}.values(), key=lambda x: x.idx)
        same = [x for x in pool if x.section == ln.section and x.kind == "para" and (x is ln or sc(x) >= top - NEAR)]
        return same or [ln]


_YES = re.compile(r"^(?:yes|yeah|sure)\b|^(?:是的|是|可以|能|会|需要|要|对)(?=[，,。.！!]|$)", re.I)
_NO = re.compile(r"^(?:no|nope)\b|^(?:不可以|不能|不行|不会|不需要|不用|不要|不是)(?=[，,。.！!]|$)", re.I)
# an English yes/no question and the statement it asks about: (pattern, yes, no); {x} is the rest, said to the customer
_STATEMENTS = (
    (re.compile(r"^(?:can|could|may) (?:i|we) (.+)$", re.I), "You can {x}", "You cannot {x}"),
    (re.compile(r"^do (?:i|we) (have to|need to) (.+)$", re.I), "You {v} {x}", "You do not {v} {x}"),
    (re.compile(r"^do you (.+)$", re.I), "We {x}", "We do not {x}"),
    (re.compile(r"^will (?:i|we) (.+)$", re.I), "You will {x}", "You will not {x}"),
    (re.compile(r"^is there (.+)$", re.I), "There is {x}", "There is no {x}"),
    (re.compile(r"^are there (.+)$", re.I), "There are {x}", "There are no {x}"),
)
# the words with which what follows a yes or no goes on the statement it stands for ("Yes, if ...", "Yes, for ...")
_GOES_ON = re.compile(r"(?:if|as long as|when|once|unless|provided|for|within|after|before|but|except|only|up to|"
                      r"while|from|on|in|at|by|with|as|until|during|even)\b")
_TO_CUSTOMER = {"i": "you", "me": "you", "my": "your", "mine": "yours", "myself": "yourself"}
_ZH_ASKS = re.compile(r"(?:吗|嘛|么)?\s*[?？]*$")


def statement(question: str, yes: bool, no_word: str = "") -> str | None:
    """The statement a yes / no question asks about, said to the customer ("Can I pay with PayPal?" and a no:
    "You cannot pay with PayPal"; "能用PayPal付款吗？" and a yes: "能用PayPal付款"), or None for a form it
    cannot say."""
    q = question.strip()
    if _is_cjk(q):
        if not re.search(r"(?:吗|嘛|么)\s*[?？]*$", q):
            return None          # "怎么…？" asks for something else than a yes or a no
        stem = _ZH_ASKS.sub("", q).strip()
        if yes:
            return stem or None
        # the answer's own negation takes the place of the word it negates ("不需要" for "要" or "需要")
        word = no_word.removeprefix("不")
        for k in range(len(word)):
            at = stem.find(word[k:])
            if word[k:] and at >= 0 and not stem[:at].endswith("不"):
                return stem[:at] + no_word + stem[at + len(word[k:]):]
        return None
    # "I typed the wrong address. Can I still fix it?" asks its last sentence
    q = split_sentences(q)[-1].rstrip("?？ ").strip()
    for pattern, said, unsaid in _STATEMENTS:
        m = pattern.match(q)
        if m:
            v, x = (m.group(1), m.group(2)) if m.lastindex == 2 else ("", m.group(1))
            x = re.sub(r"\b(?:i|me|my|mine|myself)\b", lambda w: _TO_CUSTOMER[w.group(0).lower()], x, flags=re.I)
            if not yes and unsaid.endswith("no {x}"):
                x = re.sub(r"^(?:a|an|any)\s+", "", x, flags=re.I)       # "is there a fee?": "There is no fee"
            return (said if yes else unsaid).format(v=v, x=x)
    return None


def answer_alone(question: str, answer: str) -> str | None:
    """An FAQ answer as a reply of its own, without the entry's question, or None when it cannot be said alone.

    An answer that opens with a yes or a no answers the entry's question, which the customer may have put
    otherwise: the yes or the no is said as the statement the question asks about ("Can I pay with PayPal?" and
    "Yes, if ...": "You can pay with PayPal if ..."), else the answer's own words that follow it stand alone
    when they are a sentence ("No. All tiers are free."). Any other answer says what it is about."""
    a = answer.strip()
    m = _YES.match(a) or _NO.match(a)
    if m is None:
        return a
    yes = _YES.match(a) is not None
    rest = a[m.end():]
    mark = rest[:1]
    rest = rest.lstrip(",，.。!！ ").strip()
    said = statement(question, yes, "" if yes else m.group(0))
    if said is not None:
        if not rest:
            return close_sentence(said)
        if _is_cjk(said):
            return f"{said}{'，' if mark in ',，' else '。'}{rest}"
        if mark in ".!":
            return f"{close_sentence(said)} {rest}"
        if _GOES_ON.match(rest):
            return f"{said} {rest}"               # "Yes, if ...": the condition goes on the statement
        if rest[:1].islower():                    # "Yes, the full amount goes back ...": a sentence of its own
            return f"{close_sentence(said)} {rest[:1].upper()}{rest[1:]}"
        return f"{said}, {rest}"
    if rest and (mark in ".。!！" or (_is_cjk(rest) and mark in ",，" and not yes)) and not rest[:1].islower():
        return rest
    return None


def render(lines: Sequence[Line]) -> str:
    """Lines in the article's order, framing removed, each list line closed as a sentence; two or more items of one
    list are said as a list ("• it arrived damaged."), never as loose lower-case sentences."""
    out: list[str] = []
    alone: dict[int, str] = {}         # an FAQ answer said without its question (answer_alone), by line
    items: dict[tuple[int, int], int] = {}
    for ln in lines:
        if ln.kind == "item":
            items[(ln.doc, ln.group)] = items.get((ln.doc, ln.group), 0) + 1
    steps = {(ln.doc, ln.group) for ln in lines if ln.kind == "item" and number_of(ln.text)}
    bullet = "• "
    for i, ln in enumerate(lines):
        text = strip_framing(ln.text)
        if i in alone:
            text = alone[i]
        if ln.kind in ("para", "faq_a"):
            text = whole_sentences(text)      # (a list item that ends on a comma runs on into the next one)
        if not text:
            continue
        if ln.kind == "faq_q":
            j = next((j for j in range(i + 1, len(lines)) if lines[j].kind == "faq_a" and lines[j].group == ln.group),
                     None)
            said = answer_alone(text, strip_framing(lines[j].text)) if j is not None else None
            if j is not None and said is not None:
                alone[j] = said        # the answer is said alone: the entry's question is not repeated
                continue
            out.append(text)
            continue
        if (ln.doc, ln.group) in steps and ln.kind == "item":
            # a step keeps its number ("1. Open My Orders."); a step that runs on into the next is not closed,
            # and the lines a step introduces are its sub-items
            runs_on = ((_RUNS_ON.search(text) is not None or text.rstrip().endswith((":", "：")))
                       and i + 1 < len(lines) and lines[i + 1].kind == "item" and lines[i + 1].group == ln.group)
            said = text.rstrip() if runs_on else close_sentence(text)
            out.append(said if number_of(text) else "  • " + said)
            bullet = "• "
            continue
        if ln.kind == "case" and _states(text):
            out.append(close_sentence(text))   # "无理由退货：买家承担运费。"
        elif ln.kind in ("label", "intro", "case"):
            out.append(text if text.rstrip().endswith((":", "：")) else text + ("：" if _is_cjk(text) else ":"))
        elif (ln.kind == "item" and _RUNS_ON.search(text) and i + 1 < len(lines)
              and lines[i + 1].kind == "item" and lines[i + 1].group == ln.group):
            out.append(bullet + text.rstrip())
            bullet = ""                # the next item goes on this one's sentence
            continue
        elif ln.kind == "item" and items.get((ln.doc, ln.group), 0) > 1:
            out.append(bullet + close_sentence(text))
        else:
            out.append(close_sentence(text))
        bullet = "• "
    while out and out[-1].rstrip().endswith((":", "：")):        # never end on an introduction
        out.pop()
    return "\n".join(out).strip()
