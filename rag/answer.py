"""Grounded answers: text taken from the retrieved passages, with citations, or no answer at all.

The extractive answer is the best passage's sentences that share the most query keywords (a
matched FAQ question brings its answer line along). An optional generator (any OpenAI-compatible
chat endpoint; off by default) may rephrase, but each sentence it writes must be supported by a
cited passage (its content words and every number appear there), otherwise the generated text
is discarded and the extractive answer is sent instead: nothing is said that the knowledge base
does not say.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from rag.chunk import join_units, sentence_units, split_sentences, unfinished
from rag.rewrite import EN_STOPWORDS, ZH_STOPWORDS, SearchTokenizer
from rag.types import Hit

_QUESTION_END = re.compile(r"[?？]\s*[”’\"']?$")
_QA_PREFIX = re.compile(r"^(?:q|a|问|答)\s*[:：]\s*", re.I)
_FAQ_QUESTION = re.compile(r"^(?:q|问)\s*[:：]", re.I)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def citation(hit: Hit) -> dict[str, Any]:
    c = hit.chunk
    return {
        "doc_id": c.doc_id if c else None,
        "chunk_id": hit.chunk_id,
        "title": c.title if c else "",
        "section": c.section if c else "",
        "source": c.source if c else "",
        "score": round(float(hit.score), 6),
    }


def _content(tokens: Sequence[str]) -> list[str]:
    return [t for t in tokens if t not in ZH_STOPWORDS and t not in EN_STOPWORDS]


def extract(passage: str, keywords: Sequence[str], tokenizer: SearchTokenizer, *, max_sentences: int = 3,
            max_chars: int = 420) -> str:
    """The passage's most relevant sentences, in passage order, within ``max_chars``.

    Each sentence scores the summed length of the query keywords it contains (longer words are
    the more telling ones, in both languages). A matched question (``Q: ...?``) takes its answer
    sentence along. With no keyword in common (a paraphrase found only by the encoder) the answer
    is the passage's opening.
    """
    units = sentence_units(passage)
    sentences = [u for u, _ in units]
    if not sentences:
        return ""
    wanted = set(keywords)
    scores = []
    for s in sentences:
        toks = set(_content(tokenizer.words_of(s)))
        scores.append(sum(len(t) for t in toks & wanted))
    chosen: set[int] = set()
    if max(scores) > 0:
        best = max(range(len(sentences)), key=lambda i: (scores[i], -i))
        chosen.add(best)
        if _QUESTION_END.search(sentences[best]) and best + 1 < len(sentences):
            chosen.add(best + 1)        # a matched FAQ question: its answer is the next sentence, and only that
        else:
            for i in sorted(range(len(sentences)), key=lambda i: (-scores[i], i)):
                if len(chosen) >= max_sentences or scores[i] < max(1, scores[best] // 2):
                    break
                if not _QUESTION_END.search(sentences[i]):
                    chosen.add(i)
    else:
        chosen = {0, 1} if len(sentences) > 1 else {0}
    # a sentence of an FAQ question line ("Q: I paid by card. When ...?") brings the whole question and the
    # answer's first sentence: a question is read whole, and what it asks is answered on the next line
    line_of: list[int] = []
    for i, (_, new_line) in enumerate(units):
        line_of.append(i if new_line or i == 0 else line_of[-1])
    for i in sorted(chosen):
        start = line_of[i]
        if not _FAQ_QUESTION.match(sentences[start]):
            continue
        line = [j for j in range(start, len(units)) if line_of[j] == start]
        chosen.update(line)
        after = line[-1] + 1
        if after < len(sentences) and not _FAQ_QUESTION.match(sentences[after]):
            chosen.add(after)
    # a sentence that introduces a list ("...as follows:") brings the list items after it
    for i in sorted(chosen):
        if not sentences[i].rstrip().endswith((":", "：")):
            continue
        j = i + 1
        while j < len(sentences) and j - i <= 5 and units[j][1]:     # the items: lines that follow
            chosen.add(j)
            if sentences[j].rstrip().endswith(("。", ".", "！", "!")):   # the list's last item ends the sentence
                break
            j += 1
    out: list[tuple[str, bool]] = []
    size = 0
    for i in sorted(chosen):
        s = sentences[i]
        if out and size + len(s) > max_chars:
            break
        # keep the passage's own line breaks, and mark a gap where sentences were skipped
        out.append((s, units[i][1] or bool(out and i - 1 not in chosen)))
        size += len(s)
    while out and unfinished(out[-1][0]):
        out.pop()          # a sentence the chunk cuts off at a comma (one too long for a chunk) is not said half
    text = join_units(out)
    return text.strip()


# --------------------------------------------------------------------------- generation (optional)


@runtime_checkable
class Generator(Protocol):
    """Rephrases an answer from passages. Must only restate what the passages say."""

    def generate(self, query: str, passages: Sequence[Hit]) -> str: ...


class OpenAIChatGenerator:
    """An OpenAI-compatible ``/chat/completions`` endpoint (base URL, model and key from settings)."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 10.0,
                 max_tokens: int = 300):
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)
        self.model = model
        self.max_tokens = max_tokens

    def generate(self, query: str, passages: Sequence[Hit]) -> str:
        context = "\n\n".join(f"[{i}] {h.chunk.text if h.chunk else ''}" for i, h in enumerate(passages, 1))
        messages = [
            {"role": "system", "content": (
                "Answer the customer's question using only the numbered passages. Do not add facts, numbers or "
                "advice that the passages do not contain. Answer in the language of the question, briefly.")},
            {"role": "user", "content": f"Passages:\n{context}\n\nQuestion: {query}"},
        ]
        resp = self._client.post("/chat/completions", json={
            "model": self.model, "messages": messages, "temperature": 0, "max_tokens": self.max_tokens})
        resp.raise_for_status()
        return str(resp.json()["choices"][0]["message"]["content"]).strip()

    def close(self) -> None:
        self._client.close()


_NEGATION = re.compile(r"\b(?:not|no|never|cannot|can't|don't|doesn't|won't|isn't|aren't|without|none)\b|"
                       r"[不没无未别勿非]", re.I)
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][A-Za-z0-9&-]*[A-Za-z0-9](?:\s+[A-Z][A-Za-z0-9&-]*)*")


def unsupported_sentences(text: str, passages: Sequence[Hit], tokenizer: SearchTokenizer, *,
                          min_overlap: float = 0.8) -> list[str]:
    """Sentences of ``text`` that no single passage supports.

    Supported = at least ``min_overlap`` of the sentence's content words occur in one passage, and every
    number and every name (a capitalised word inside the sentence: PayPal, SF Express) occurs in that
    passage too, and a sentence that negates is supported only by a passage that negates as well (a
    rephrasing must not turn "cannot be returned" into "can be returned", nor the other way round with
    the same words).
    """
    sources = []
    for h in passages:
        body = (h.chunk.title + "\n" + h.chunk.section + "\n" + h.chunk.text) if h.chunk else ""
        negating = {s for s in split_sentences(body) if _NEGATION.search(s)}
        sources.append((set(tokenizer.words_of(body)), set(_NUMBER.findall(body)), body, negating))
    bad = []
    for sentence in split_sentences(text):
        plain = _QA_PREFIX.sub("", sentence)
        words = set(_content(tokenizer.words_of(plain)))
        numbers = set(_NUMBER.findall(sentence))
        names = {n for n in _NAME.findall(plain) if n.lower() not in EN_STOPWORDS}
        negates = bool(_NEGATION.search(plain))
        if not words and not numbers:
            continue
        ok = False
        for toks, nums, body, negating in sources:
            overlap = len(words & toks) / len(words) if words else 1.0
            if overlap < min_overlap or not numbers <= nums or any(n not in body for n in names):
                continue
            # the negation must be the evidence's: a negating sentence of the passage shares its words
            close = [s for s in negating if len(words & set(tokenizer.words_of(s))) >= max(1, len(words) // 2)]
            if negates != bool(close):
                continue
            ok = True
            break
        if not ok:
            bad.append(sentence)
    return bad
