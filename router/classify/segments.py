"""Several requests in one message: "cancel 100235 and tell me your return policy", "查订单100251的物流，另外退货运费谁出？".

The message is cut where customers join requests (sentence ends, "and also", "by the way", "另外", "还有",
"顺便"), and each part is classified on its own; the turn serves them all, in order, in one reply. A part
that is not a request of its own ("it's 100234") makes no plan: the whole message is routed as one.

Two requests that each name their own order are cut where they join ("refund 100241 and an invoice for 100240",
"帮我取消订单100236，再给订单100230开个发票"): an "and" / "，再" / "然后" with an order number on each side and words of
a request after it ("cancel 100235 and 100236" is one request about two orders). Whether the words after it ask for
something is ``asks``'s to say when given (the router passes its classifier: "the lamp one", "台灯那个" place no
intent): a part that only names another order ("refund order 100241 and the lamp one 100240", "退款订单100236，还有
台灯那个100230") stays with the request before it, one task about two orders.

A part of a few characters is no request of its own ("hi!", "ok, and ..."), except one that the task waiting for an
answer takes (``answers``, the router asks the waiting flow): "yes, and how long will it take to reach my card?" at a
refund's confirmation is the yes (the flow's) and the question (answered beside it).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from text.form import read_form

MAX_PARTS = 4
MIN_PART_CHARS = 4

_JOINS = re.compile(
    r"[?？!！。;；]+\s*"
    r"|\s*[,，]?\s*\b(?:and\s+also|and\s+then|and\s+tell\s+me|and\s+can\s+you|and\s+could\s+you|and\s+please|and\s+(?=(?:what|how|when|where|why)\b)"
    r"|also|plus|another\s+thing|by\s+the\s+way|btw)\b[,，]?\s*"
    r"|\s*[,，]?\s*(?:另外|还有|顺便问一下|顺便问下|顺便|再问一下|再问下|还想问一下|还想问|以及|同时)[,，]?\s*", re.I)


# where two requests about two orders join: "and", "，再" / "，然后" / "并且", or "再" / "然后" right after a number
_ORDER_JOINS = re.compile(r"\s*[,，]?\s*\band\b\s*|\s*[,，;；]\s*(?:再|然后|并且|并|还要)\s*|(?<=\d)\s*(?:再|然后)\s*", re.I)
_ORDER_NUMBER = re.compile(r"(?<![A-Za-z0-9])\d{5,12}(?![A-Za-z0-9])")
# what is left of a part once its order numbers and the words around them go: a request's own words, or nothing
_ORDER_FILLER = re.compile(r"\b(?:orders?|numbers?|no|the|a|an|for|of|my|and|too|also|with)\b|订单|单号|号|的|和|跟"
                           r"|[\s,，.。:：;；!！?？#]", re.I)


def _has_own_words(part: str) -> bool:
    rest = _ORDER_FILLER.sub("", _ORDER_NUMBER.sub(" ", part))
    return len(re.findall(r"[A-Za-z]", rest)) >= 3 or len(re.findall(r"[\u4e00-\u9fff]", rest)) >= 2


def _asks(part: str, asks: Callable[[str], bool] | None) -> bool:
    """Whether ``part`` asks for something of its own besides the orders it names."""
    if not _has_own_words(part):
        return False
    if asks is None or read_form(part) is not None:   # "where is order 100241": a question or a request of its own
        return True
    return asks(" ".join(_ORDER_FILLER.sub(" ", _ORDER_NUMBER.sub(" ", part)).split()))


def _by_order(part: str, asks: Callable[[str], bool] | None = None) -> list[str]:
    """``part`` cut where a request about one order joins a request about another (see the module's note)."""
    if len(set(_ORDER_NUMBER.findall(part))) < 2:
        return [part]
    for m in _ORDER_JOINS.finditer(part):
        left, right = part[:m.start()].strip(" ,，"), part[m.end():].strip(" ,，")
        mine, theirs = set(_ORDER_NUMBER.findall(left)), set(_ORDER_NUMBER.findall(right))
        if mine and theirs and not mine & theirs and _has_own_words(left) and _asks(right, asks):
            return [left, *_by_order(right, asks)]
    return [part]


def split_requests(text: str, asks: Callable[[str], bool] | None = None,
                   answers: Callable[[str], bool] | None = None) -> list[str]:
    """The parts of ``text`` that may each be a request (one part when nothing joins two). ``asks``: whether some
    words ask for something (a task, a question); a part that names an order and asks nothing else ("the lamp one
    100240") is another order of the part before it and stays in it. ``answers``: whether a part too short to be a
    request of its own answers the question a waiting task asked ("yes", "好", "50"); such a part is kept ("yes, and
    how long will it take to reach my card?" at a refund's confirmation: the yes and the question)."""
    text = (text or "").strip()
    if len(text) > 500:
        return [text]
    parts = [q for p in _JOINS.split(text) for q in _by_order(p.strip(" ,，"), asks)]
    parts = [p for p in parts if len(p) >= MIN_PART_CHARS or re.search(r"[\u4e00-\u9fff]{2,}", p)
             or (answers is not None and bool(p.strip(" ,，.。!！~")) and answers(p))]
    if asks is not None:
        parts = _with_their_orders(text, parts, asks)
    if len(parts) < 2 or len(parts) > MAX_PARTS:
        return [text]
    return parts


def _with_their_orders(text: str, parts: list[str], asks: Callable[[str], bool]) -> list[str]:
    """Each part that only names another order joined to the part before it, as the message says them."""
    spans: list[tuple[int, int]] = []
    at = 0
    for p in parts:
        start = text.find(p, at)
        if start < 0:
            return parts
        spans.append((start, start + len(p)))
        at = start + len(p)
    out: list[tuple[int, int]] = []
    for (start, end), p in zip(spans, parts):
        if out and _ORDER_NUMBER.search(p) and not _asks(p, asks):
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return [text[a:b] for a, b in out]
