"""Several requests in one message: "cancel 100235 and tell me your return policy", "查订单100251的物流，另外退货运费谁出？".

The message is cut where customers join requests (sentence ends, "and also", "by the way", "另外", "还有",
"顺便"), and each part is classified on its own; the turn serves them all, in order, in one reply. A part
that is not a request of its own ("it's 100234") makes no plan: the whole message is routed as one.
"""

from __future__ import annotations

import re

MAX_PARTS = 4
MIN_PART_CHARS = 4

_JOINS = re.compile(
    r"[?？!！。;；]+\s*"
    r"|\s*[,，]?\s*\b(?:and\s+also|and\s+then|and\s+tell\s+me|and\s+can\s+you|and\s+could\s+you|and\s+please|and\s+(?=(?:what|how|when|where|why)\b)"
    r"|also|plus|another\s+thing|by\s+the\s+way|btw)\b[,，]?\s*"
    r"|\s*[,，]?\s*(?:另外|还有|顺便问一下|顺便问下|顺便|再问一下|再问下|还想问一下|还想问|以及|同时)[,，]?\s*", re.I)


def split_requests(text: str) -> list[str]:
    """The parts of ``text`` that may each be a request (one part when nothing joins two)."""
    text = (text or "").strip()
    if len(text) > 500:
        return [text]
    parts = [p.strip(" ,，") for p in _JOINS.split(text)]
    parts = [p for p in parts if len(p) >= MIN_PART_CHARS or re.search(r"[\u4e00-\u9fff]{2,}", p)]
    if len(parts) < 2 or len(parts) > MAX_PARTS:
        return [text]
    return parts
