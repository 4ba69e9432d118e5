"""Chunking: heading-aware, sentence-aware pieces of a target size with overlap, for zh and en.

A chunk never crosses a section (heading) boundary, so its section path says exactly where it
came from, and it only breaks between sentences (。！？；!? and `.` before a space or end) unless
one sentence alone is longer than the target. The last sentences of a chunk are repeated at
the start of the next one (``overlap_chars``) so an answer that straddles a break is still
found whole in one chunk. An FAQ entry (a ``Q:`` / ``问：`` line and the answer up to the next one)
is a chunk of its own: packed together, the entries of a section share one vector and one
extract, and a question about one payment method was answered with the line of another.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from rag.types import Chunk

DEFAULT_TARGET_CHARS = 450
DEFAULT_OVERLAP_CHARS = 80
DEFAULT_MAX_CHARS = 1200

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")
# Sentence ends: CJK terminators (optionally followed by closing quotes/brackets), or ASCII
# terminators followed by whitespace or end of text (so "3.5" and "v1.2" stay whole).
_SENT_END = re.compile(
    r"(?:(?:[。！？；!?]|…+)[”’」』）)\"']*)"          # zh / fullwidth ends, and ! ? anywhere
    r"|(?:(?<!\b[A-Za-z])(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\bMr)(?<!\bDr)(?<!\bNo)\.[”’\"')\]]*(?=\s|$))"
)
# an ordered list item's number ("1. Open My Orders"): it begins the item's sentence, it does not end one
_ITEM_NUMBER = re.compile(r"\d{1,3}[.)]\s+(?=\S)")
_SOFT_BREAK = re.compile(r"[，,、：:）)]\s*|\s+")
_FAQ_QUESTION = re.compile(r"^(?:q|问)\s*[:：]", re.I)
_CLAUSE_MARKS = (",", "，", "、")    # where _hard_split cuts a sentence too long for one chunk


@dataclass
class Section:
    """A run of text under one heading path (``path`` is the headings below the title)."""

    path: list[str]
    text: str


@dataclass
class Document:
    """One knowledge document as ingested: metadata plus its sections in reading order."""

    doc_id: str
    title: str = ""
    sections: list[Section] = field(default_factory=list)
    lang: str = ""
    category: str = ""
    source: str = ""
    updated_at: str | None = None
    path: str = ""                                   # file it came from (for error messages)
    keywords: tuple[str, ...] = ()                   # what customers call the article, in their words

    @property
    def text(self) -> str:
        return "\n".join(s.text for s in self.sections if s.text)


def detect_lang(text: str) -> str:
    """'zh' when CJK characters make up a real share of the letters, else 'en'."""
    if not text:
        return ""
    cjk = len(_CJK.findall(text))
    letters = sum(1 for ch in text if ch.isalpha())
    return "zh" if cjk and cjk >= 0.2 * max(letters, 1) else "en"


def sentence_units(text: str) -> list[tuple[str, bool]]:
    """(sentence, starts a new line) pairs: line breaks (list items, table rows) also end a sentence."""
    out: list[tuple[str, bool]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        first = True
        start = 0
        number = _ITEM_NUMBER.match(line)
        for m in _SENT_END.finditer(line, number.end() if number else 0):
            end = m.end()
            piece = line[start:end].strip()
            if piece:
                out.append((piece, first))
                first = False
            start = end
        rest = line[start:].strip()
        if rest:
            out.append((rest, first))
    return out


def split_sentences(text: str) -> list[str]:
    """Sentences of zh/en text, in order."""
    return [s for s, _ in sentence_units(text)]


def unfinished(text: str) -> bool:
    """Whether a text stops inside a sentence, on a comma or an enumeration mark (a clause cut off its sentence;
    a list item's ";" or an introduction's ":" ends where it should)."""
    return text.rstrip().endswith(_CLAUSE_MARKS)


def whole_sentences(text: str) -> str:
    """``text`` without an unfinished last sentence ("... For a special VAT invoice,"): a sentence is said whole
    or not at all. Empty when no sentence of it is finished."""
    if not unfinished(text):
        return text
    units = sentence_units(text)
    while units and unfinished(units[-1][0]):
        units.pop()
    return join_units(units)



def _hard_split(sentence: str, limit: int) -> list[str]:
    """Split one over-long sentence at commas/spaces, or every ``limit`` characters as a last resort."""
    pieces: list[str] = []
    while len(sentence) > limit:
        window = sentence[:limit]
        cut = 0
        for m in _SOFT_BREAK.finditer(window):
            if m.end() >= limit // 2:
                cut = m.end()
        if cut == 0:
            cut = limit
        pieces.append(sentence[:cut].strip())
        sentence = sentence[cut:].strip()
    if sentence:
        pieces.append(sentence)
    return [p for p in pieces if p]


def join_units(parts: list[tuple[str, bool]]) -> str:
    """Join sentences: a line break where the source had one, a space between Latin sentences, nothing between CJK ones."""
    out = ""
    for i, (p, new_line) in enumerate(parts):
        if i and new_line:
            out += "\n"
        elif out and not (_CJK.match(out[-1]) or _CJK.match(p[0])):
            out += " "
        out += p
    return out


def pack(units_in: list[tuple[str, bool]], target_chars: int, overlap_chars: int, max_chars: int) -> list[str]:
    """Greedy packing of sentences into pieces of about ``target_chars``, repeating the last
    sentences (up to ``overlap_chars``) at the start of the next piece."""
    units: list[tuple[str, bool]] = []
    for s, new_line in units_in:
        if len(s) > max_chars:
            parts = _hard_split(s, max_chars)
            units.extend((p, new_line and i == 0) for i, p in enumerate(parts))
        else:
            units.append((s, new_line))
    pieces: list[str] = []
    current: list[tuple[str, bool]] = []
    size = 0
    fresh = 0                              # sentences in `current` not carried over from the previous piece
    for u in units:
        if current and fresh and size + len(u[0]) > target_chars:
            pieces.append(join_units(current))
            carry: list[tuple[str, bool]] = []
            carried = 0
            for prev in reversed(current):
                if carried + len(prev[0]) + 1 > overlap_chars:
                    break
                carry.insert(0, prev)
                carried += len(prev[0]) + 1
            if carry and carried + len(u[0]) > max_chars:
                carry, carried = [], 0
            current, size, fresh = carry, carried, 0
        current.append(u)
        size += len(u[0]) + 1
        fresh += 1
    if current and fresh:
        pieces.append(join_units(current))
    return pieces


def faq_entries(units: list[tuple[str, bool]]) -> list[list[tuple[str, bool]]]:
    """A section's sentences cut before each line that opens an FAQ question (``Q:``, ``问：``): the text
    before the first question, then one group per question with its answer. One group when there is none."""
    groups: list[list[tuple[str, bool]]] = [[]]
    for u in units:
        if u[1] and _FAQ_QUESTION.match(u[0]) and groups[-1]:
            groups.append([])
        groups[-1].append(u)
    return [g for g in groups if g]


def heading_line(title: str, section: str, keywords: Sequence[str] = ()) -> str:
    """The context line put in front of a chunk's text for embedding and BM25 ("Title (keywords) > Section").

    The article's keywords go beside its title: a help centre's titles use the shop's words ("7-day no-reason
    returns"), and the keywords the words customers search with ("return policy"), for every chunk alike."""
    named = title.strip()
    said = "; ".join(k.strip() for k in keywords if k.strip())
    if said:
        named = f"{named} ({said})" if named else said
    parts = [p for p in (named, section.strip()) if p]
    return " > ".join(parts)


def embed_text(chunk: Chunk) -> str:
    """Exactly what is embedded (and hashed) for a chunk: its heading line, then its text."""
    head = heading_line(chunk.title, chunk.section, chunk.keywords)
    return f"{head}\n{chunk.text}" if head else chunk.text


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def chunk_document(
    doc: Document,
    *,
    target_chars: int = DEFAULT_TARGET_CHARS,
    overlap_chars: int = DEFAULT_OVERLAP_CHARS,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> list[Chunk]:
    """Chunks of one document; ids are ``<doc_id>#<n>`` in reading order."""
    if target_chars <= 0 or overlap_chars < 0 or max_chars < target_chars:
        raise ValueError("need 0 < target_chars <= max_chars and overlap_chars >= 0")
    doc_lang = doc.lang or detect_lang(doc.title + "\n" + doc.text)
    chunks: list[Chunk] = []
    for section in doc.sections:
        sentences = sentence_units(section.text)
        if not sentences:
            continue
        section_path = " > ".join(p for p in section.path if p)
        pieces = [p for entry in faq_entries(sentences) for p in pack(entry, target_chars, overlap_chars, max_chars)]
        for piece in pieces:
            c = Chunk(
                chunk_id=f"{doc.doc_id}#{len(chunks)}",
                doc_id=doc.doc_id,
                text=piece,
                title=doc.title,
                section=section_path,
                lang=doc_lang,
                category=doc.category,
                source=doc.source,
                updated_at=doc.updated_at,
                keywords=tuple(doc.keywords),
            )
            c.content_hash = content_hash(embed_text(c))
            chunks.append(c)
    return chunks


def chunk_documents(docs: Iterable[Document], **kwargs) -> Iterator[Chunk]:
    for doc in docs:
        yield from chunk_document(doc, **kwargs)
