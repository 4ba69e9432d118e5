"""What kind of answer a question asks for (a count, a duration, an amount of money) and whether a line holds one.

"How many times can I change an invoice?" is answered by the line that says "up to 3 times", not by its
neighbour about the 180 days in which changes are possible, although the encoder scores both alike: they share
every word but the answer. Classic question answering matches the expected answer type; composition and the
entry score give a line that holds the asked kind of quantity a small lead (rag/compose.py, rag/service.py).
"""

from __future__ import annotations

import re

from text.places import asks_destination, elsewhere_in, places_in

_NUM = r"(?:\d+(?:[.,]\d+)?|[一二两三四五六七八九十百半]+)"
_RANGE = rf"{_NUM}(?:\s*(?:[–~\-至到]|to)\s*{_NUM})?"

# what a question asks for, by the words that ask it
_ASKS = {
    "count": re.compile(r"\bhow many times\b|\bhow often\b|\bhow many (?:changes|attempts|tries)\b|几次|多少次|几遍|"
                        r"几回", re.I),
    "duration": re.compile(r"\bhow long\b|\bhow many (?:business |working )?(?:days|hours|weeks|months)\b|"
                           r"\bwithin how\b|多久|多长时间|多少天|几天|几个工作日|几个小时|多长的?时间|多少小时", re.I),
    "money": re.compile(r"\bhow much\b|\bminimum (?:order|spend|amount|purchase)\b|\bworth\b|\bcost\b|多少钱|多少元|"
                        r"几块钱|最低消费|最低金额|起付|门槛|值多少|面额", re.I),
}
# what a line must hold to answer it
_HOLDS = {
    "count": re.compile(rf"{_NUM}\s*(?:times?\b|次)|\bonce\b|\btwice\b", re.I),
    "duration": re.compile(rf"{_RANGE}\s*(?:(?:business|working|calendar)\s+)?(?:days?|hours?|weeks?|months?|"
                           rf"minutes?|years?)\b|{_RANGE}\s*个?(?:工作日|自然日|天|小时|周|星期|个?月|分钟|年)", re.I),
    "money": re.compile(rf"[¥￥$€£]\s*{_NUM}|{_NUM}\s*(?:元|块|yuan|cny|usd|rmb)\b|{_NUM}\s*(?:元|块)", re.I),
}
KINDS = (*_ASKS, "place")
# the words that only ask (interrogatives, and the "long"/"much"/"many" of "how long/much/many"): no answer holds them
_ASKING_ZH = re.compile(r"几|多少|多久|多长|什么|怎么|怎样|如何|哪|为什么|吗|呢|能否|是否")
_ASKING_EN = frozenset({"how", "when", "where", "why", "long", "much", "many"})


def asked(question: str) -> str | None:
    """The kind of quantity ``question`` asks for (count, duration, money), or a place it asks to send to ("do you
    ship to Canada?", text.places: before any quantity of it), or None."""
    if asks_destination(question):    # "how much is shipping to Canada?": whether it ships there comes first
        return "place"
    for kind, pattern in _ASKS.items():
        if pattern.search(question or ""):
            return kind
    return None


# the words that say how often or how sure, never what about ("how much is shipping normally?", "一般几天到")
_HEDGES_EN = frozenset({"normally", "usually", "generally", "typically", "actually", "really", "currently",
                        "exactly", "approximately", "roughly", "basically", "just", "still", "ever", "even",
                        "please", "kindly", "possibly", "maybe", "perhaps", "anyway", "again", "also",
                        # what the customer wants done, never what about ("I want to close my account", "我想注销账号")
                        "want", "wants", "wanted", "wanna"})
_HEDGES_ZH = frozenset({"一般", "一般来说", "通常", "平时", "平常", "大概", "大约", "大致", "请问", "到底", "究竟",
                        "具体", "一下",
                        # the wish itself ("我想", "我要", "想要"): what is wished for is what is asked about
                        "想", "想要", "我想", "我要", "要", "希望", "打算",
                        # the shop addressed ("你们能寄到美国吗"): never what is asked about
                        "你们", "您们", "贵店", "你家"})
# the words that ask what one can do, never about what ("what are my options?", "what now?", "有什么办法"): they ask for
# whatever the article says to do, as "what can I do?" does with stop words only
_COURSE_EN = frozenset({"options", "option", "choices", "choice", "alternatives", "now"})
_COURSE_ZH = frozenset({"办法", "我该", "该"})


def asking_word(word: str) -> bool:
    """Whether ``word`` (a keyword of a question) only asks or hedges: "几次", "多长时间", "how", "when", "long",
    "normally", "一般", "options" (of "what are my options?"), "want", "我想" ... (a whole hedge word: "一般纳税人" names
    something)."""
    w = word.lower()
    if word.isascii():
        return w in _ASKING_EN or w in _HEDGES_EN or w in _COURSE_EN
    return w in _HEDGES_ZH or w in _COURSE_ZH or bool(_ASKING_ZH.search(word))


def holds(text: str, kind: str | None) -> bool:
    """Whether ``text`` states a quantity of ``kind`` (for "place": names a country or region, or "other
    countries")."""
    if kind == "place":
        return bool(places_in(text) or elsewhere_in(text))
    return kind is not None and bool(_HOLDS[kind].search(text or ""))
