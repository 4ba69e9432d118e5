"""One text normalisation for every package: NFKC, width and case folding, traditional -> simplified
Chinese, whitespace squashing, optionally with a map back to the original string.

Guards, rules, entities and retrieval's query rewrite all match on folded text; they used to fold in
four slightly different ways. The differences that were deliberate are options here:

- ``case``: ``"lower"`` (guards, retrieval's tokens), ``"casefold"`` (rules: also folds "ß" -> "ss"),
  ``"keep"`` (entities, the dense query: the encoder is cased).
- ``simplify``: ``"cjk"`` converts only when the text holds a CJK character (cheap for Latin text),
  ``"always"`` runs the converter on every text (rules), ``"never"`` (entities: digits and currency only).
- ``spaces``: ``"squash"`` (runs of whitespace -> one space, ends stripped) or ``"keep"``.

:func:`normalise_mapped` returns the same text plus, for every character of it, the span of the
original it came from, so a match found on folded text (a phone number typed full-width, a card
written with ideographic spaces) can be cut out of, or masked in, the text the customer wrote.
opencc is used for traditional -> simplified because its dictionaries are maintained (phrases and
characters, not a hand-kept table).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

Case = Literal["lower", "casefold", "keep"]
Simplify = Literal["cjk", "always", "never"]
Spaces = Literal["squash", "keep"]

# Han (basic, extension A, compatibility) and kana: a text without any needs no conversion.
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_SPACE_RUN = re.compile(r"\s+")


@lru_cache(maxsize=1)
def _t2s():
    try:
        import opencc

        return opencc.OpenCC("t2s").convert
    except Exception:  # pragma: no cover - opencc is a dependency; matching still works without it
        return None


def to_simplified(text: str) -> str:
    conv = _t2s()
    return conv(text) if conv is not None else text


def normalise(text: str | None, *, case: Case = "lower", simplify: Simplify = "cjk",
              spaces: Spaces = "squash") -> str:
    """The folded form of ``text`` (``None`` -> ``""``)."""
    text = unicodedata.normalize("NFKC", text or "")
    if simplify == "always" or (simplify == "cjk" and CJK.search(text)):
        text = to_simplified(text)
    if case == "lower":
        text = text.lower()
    elif case == "casefold":
        text = text.casefold()
    if spaces == "squash":
        text = _SPACE_RUN.sub(" ", text).strip()
    return text


@dataclass(frozen=True, slots=True)
class Mapped:
    """Folded text plus, per character, the ``[start, end)`` of the original it came from."""

    text: str
    original: str
    starts: tuple[int, ...]
    ends: tuple[int, ...]

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span behind ``text[start:end]`` (a mask over it covers the whole value)."""
        if start >= end:
            pos = self.starts[start] if start < len(self.starts) else len(self.original)
            return pos, pos
        return self.starts[start], self.ends[end - 1]


@lru_cache(maxsize=8192)
def _nfkc_char(ch: str) -> str:
    return unicodedata.normalize("NFKC", ch)


def normalise_mapped(text: str | None, *, case: Case = "lower", simplify: Simplify = "cjk",
                     spaces: Spaces = "squash") -> Mapped:
    """:func:`normalise` with the offset map back to ``text``.

    NFKC is applied character by character, so the folded text equals ``normalise(text, ...)`` except
    where NFKC composes a base character with a following combining mark (e + U+0301): there the two
    stay two characters. Detection does not care; matching uses :func:`normalise`.
    """
    original = text or ""
    if original.isascii():
        chars = list(original)
        starts = list(range(len(original)))
    else:
        folded = [_nfkc_char(c) if not c.isascii() else c for c in original]
        if all(len(f) == 1 for f in folded):
            chars, starts = folded, list(range(len(original)))
        else:
            chars, starts = [], []
            for i, f in enumerate(folded):
                for ch in f:
                    chars.append(ch)
                    starts.append(i)
    ends = [s + 1 for s in starts]
    joined = "".join(chars)
    if simplify == "always" or (simplify == "cjk" and CJK.search(joined)):
        conv = to_simplified(joined)
        if len(conv) == len(joined):
            chars = list(conv)
        else:   # a phrase changed length: convert character by character to keep the map
            new_chars, new_starts, new_ends = [], [], []
            for ch, s, e in zip(chars, starts, ends):
                for c in to_simplified(ch):
                    new_chars.append(c)
                    new_starts.append(s)
                    new_ends.append(e)
            chars, starts, ends = new_chars, new_starts, new_ends
        joined = "".join(chars)
    if case != "keep":
        whole = joined.lower() if case == "lower" else joined.casefold()
        if len(whole) == len(joined):
            chars = list(whole)
        else:
            fold = str.lower if case == "lower" else str.casefold
            new_chars, new_starts, new_ends = [], [], []
            for ch, s, e in zip(chars, starts, ends):
                for c in fold(ch):
                    new_chars.append(c)
                    new_starts.append(s)
                    new_ends.append(e)
            chars, starts, ends = new_chars, new_starts, new_ends
    if spaces == "squash":
        new_chars, new_starts, new_ends = [], [], []
        for ch, s, e in zip(chars, starts, ends):
            if ch.isspace():
                if new_chars and new_chars[-1] == " ":
                    new_ends[-1] = e
                    continue
                ch = " "
            new_chars.append(ch)
            new_starts.append(s)
            new_ends.append(e)
        while new_chars and new_chars[-1] == " ":
            new_chars.pop(), new_starts.pop(), new_ends.pop()
        k = 0
        while k < len(new_chars) and new_chars[k] == " ":
            k += 1
        chars, starts, ends = new_chars[k:], new_starts[k:], new_ends[k:]
    return Mapped("".join(chars), original, tuple(starts), tuple(ends))
