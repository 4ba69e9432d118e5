"""Cutting a reply that is longer than its channel allows into ordered parts.

Each channel measures length its own way (Telegram and WhatsApp count UTF-16 code units, Twilio
characters of the encoded SMS, WeChat bytes), so a limit is a number with a unit. Cuts fall on
the widest boundary that works: paragraphs, then lines, then sentence ends (。！？ . ? !), then
spaces; a hard cut only when one sentence alone is over the limit, and never between a character
and the combining marks / joiners that follow it. The split is a pure function of the text, so a
retry cuts the same parts and can skip the ones already delivered.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_CLOSERS = re.escape("”’\"'）)」』】》]")      # closing quotes and brackets stay with their sentence
_LEVELS = (
    re.compile(r"\n[ \t]*\n\s*"),                                      # paragraphs
    re.compile(r"\n\s*"),                                              # lines
    re.compile(rf"[。！？；…]+[{_CLOSERS}]*\s*|[.!?;]+[{_CLOSERS}]*\s+"),  # sentences (ASCII: before a space)
    re.compile(r"[，、,:：]\s*|\s+"),                                    # clauses, then words
)
_JOINERS = {"\u200d", "\ufe0f", "\ufe0e"}


@dataclass(frozen=True)
class TextLimit:
    """At most ``size`` units per part; ``unit`` is ``chars``, ``utf16`` or ``utf8``."""

    size: int
    unit: str = "chars"

    def measure(self, text: str) -> int:
        if self.unit == "utf16":
            return len(text.encode("utf-16-le")) // 2
        if self.unit == "utf8":
            return len(text.encode("utf-8"))
        return len(text)

    def fits(self, text: str) -> bool:
        return self.measure(text) <= self.size


def split_text(text: str, limit: TextLimit) -> list[str]:
    """Ordered parts, each within ``limit``; joined they give ``text`` less the whitespace at the cuts."""
    if limit.fits(text):
        return [text]
    if limit.size < 8:
        raise ValueError("a text limit below 8 units cannot hold a character safely")
    parts = [p.strip() for p in _pack(text, 0, limit)]
    return [p for p in parts if p]


def _pieces(text: str, level: int) -> list[str]:
    """``text`` cut after every boundary of ``level``; the pieces concatenate back to ``text``."""
    out, start = [], 0
    for m in _LEVELS[level].finditer(text):
        if m.end() > start:
            out.append(text[start:m.end()])
            start = m.end()
    if start < len(text):
        out.append(text[start:])
    return out


def _pack(text: str, level: int, limit: TextLimit) -> list[str]:
    """Greedily fill parts with this level's pieces; a piece too long alone is cut at the next level."""
    if level >= len(_LEVELS):
        return _hard_cut(text, limit)
    parts: list[str] = []
    current, size = "", 0
    for piece in _pieces(text, level):
        # whitespace at the end of a part is dropped, so it does not count against the limit
        n = limit.measure(piece.rstrip())
        if size + n <= limit.size:
            current, size = current + piece, size + limit.measure(piece)
            continue
        if current:
            parts.append(current)
        if n <= limit.size:
            current, size = piece, limit.measure(piece)
            continue
        sub = _pack(piece, level + 1, limit)
        parts.extend(sub[:-1])
        current = sub[-1]
        size = limit.measure(current)
    if current:
        parts.append(current)
    return parts


def _hard_cut(text: str, limit: TextLimit) -> list[str]:
    parts: list[str] = []
    start, size = 0, 0
    for i, ch in enumerate(text):
        n = limit.measure(ch)
        if size + n > limit.size and i > start:
            cut = i
            # keep a base character with its combining marks, variation selectors and ZWJ sequence
            # (unless the whole cluster is over the limit: then it has to be cut somewhere)
            while cut > start and (unicodedata.combining(text[cut]) or text[cut] in _JOINERS
                                   or text[cut - 1] == "\u200d"):
                cut -= 1
            if cut == start or limit.measure(text[cut:i]) + n > limit.size:
                cut = i             # the cluster alone is over the limit
            parts.append(text[start:cut])
            start = cut
            size = limit.measure(text[start:i])
        size += n
    parts.append(text[start:])
    return parts
