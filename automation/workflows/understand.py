"""Reading the customer's answer to a pending step: yes/no, cancel, slot values, a choice among options.

Fuzzy matching uses ``rapidfuzz`` when it is installed (fast, well kept) and falls back to the
standard library's ``difflib``; an encoder similarity can be injected as a last resort.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from difflib import SequenceMatcher
from typing import Any, Callable, Iterator

from text.form import read_form
from text.courtesy import without_courtesy
from text.normalise import normalise

try:  # optional: faster and better partial matching
    from rapidfuzz import fuzz as _fuzz
except ImportError:  # pragma: no cover - depends on the environment
    _fuzz = None

YES = {"是", "是的", "对", "对的", "好", "好的", "确认", "确定", "可以", "行", "嗯", "没问题", "同意",
       "yes", "y", "yeah", "yep", "yup", "sure", "ok", "okay", "confirm", "confirmed", "correct", "right",
       "go ahead", "please do", "do it", "yes please", "that's right", "sounds good"}
NO = {"不", "不是", "不要", "不用", "否", "不对", "不行", "不同意", "别", "no", "n", "nope", "nah",
      "don't", "do not", "not that", "wrong", "no thanks", "no thank you"}
CANCEL = ("算了", "不用了", "取消", "不办了", "不要了", "never mind", "nevermind", "forget it", "cancel",
          "stop", "quit")
CORRECTION = re.compile(r"(不是|不对|错了|应该是|改成|改为|不好意思|打错|说错|搞错|弄错|写错|我是说|我说的是|我的意思是|我指的是"
                        r"|\bnot\b|\bactually\b|\binstead\b"
                        r"|\bwrong\b|\bi meant?\b|\boops\b|\bmy (?:mistake|bad)\b|\bsorry\b|\btypo\b)", re.I)
_ORDER_ID = re.compile(r"(?<![A-Za-z0-9])(?:\d{5,12}|[A-Z]{1,4}[-#]?\d{3,10})(?![A-Za-z0-9])|#[A-Za-z0-9]{3,12}")
_AMOUNT = re.compile(r"(?P<cur>[¥￥$€£]|USD|CNY|RMB|EUR|元|块)?\s*(?P<num>\d+(?:\.\d{1,2})?)\s*(?P<cur2>元|块|USD|CNY|RMB|EUR|dollars?)?", re.I)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
_PHONE = re.compile(r"\+?\d[\d\s-]{6,16}\d")
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "last": -1,
             "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_ORDINAL_RE = re.compile(r"(?:第\s*([一二两三四五六七八九十\d]+)\s*[个项条笔单]?|\b(first|second|third|fourth|fifth|last)\b(?!\s+(?:week|month|year|time|night|order|summer|winter))"
                         r"|^\s*(?:no\.?|number|#)?\s*(\d{1,2})\s*[.)、]?\s*$)", re.I)
_CURRENCY = {"¥": "CNY", "￥": "CNY", "元": "CNY", "块": "CNY", "rmb": "CNY", "cny": "CNY", "$": "USD",
             "usd": "USD", "dollar": "USD", "dollars": "USD", "€": "EUR", "eur": "EUR", "£": "GBP"}


@lru_cache(maxsize=65536)
def norm(text: str) -> str:
    """text/'s fold (width, lower case, spaces; no Chinese conversion), punctuation as spaces: the form answers
    are compared in."""
    text = normalise(text, case="lower", simplify="never")
    return re.sub(r"[\s,.!?;:，。！？；：、~]+", " ", text).strip()


# words that begin with 不 or 别 without saying no: "别家更便宜" (another shop is cheaper), "不好意思" (excuse me),
# "不知道", "不过" (but), "不少" (many), "别的" (other)
_NOT_A_NO = re.compile(r"别(?:家|人|的|处|样|店|个)|不(?:错|好意思|知道|确定|清楚|太清楚|太确定|客气|过|久|少|仅|但|管|论|然|一样"
                       r"|同的|小心)")


def yes_no(text: str, entities: dict[str, Any] | None = None) -> bool | None:
    if entities and isinstance(entities.get("yes_no"), bool):
        return bool(entities["yes_no"])
    t = norm(text)
    if not t:
        return None
    if t in YES:
        return True
    if t in NO:
        return False
    words = t.split()
    if words and words[0] in NO or (t.startswith(("不", "no ", "别")) and not _NOT_A_NO.match(t)):
        return False
    if words and words[0] in YES or t.startswith(("好", "是", "确认", "可以", "对")):
        return True
    return None


# A change of mind, wherever it stands in the message ("wait, never mind", "等等，算了，不取消了"): the customer
# drops the task. Phrases, not single words, so an answer that merely contains "no" or "keep" is not one.
_CHANGE_OF_MIND = re.compile(
    r"\b(?:never\s*mind|nvm|forget\s+(?:it|about\s+it|that)|(?:i\s+)?chang(?:ed|e)\s+my\s+mind|change\s+of\s+plans?"
    r"|don'?t\s+(?:bother|do\s+(?:it|that)|cancel(?:\s+it)?|change\s+(?:it|anything)|refund(?:\s+it)?"
    r"|want\s+(?:it|that|to)\s+any\s*more)|do\s+not\s+(?:bother|do\s+(?:it|that)|cancel)"
    r"|leave\s+it(?:\s+as\s+(?:it\s+)?is)?|keep\s+(?:it|the\s+order|my\s+order|them)|i'?ll\s+keep|scratch\s+that"
    r"|cancel\s+(?:(?:that|this)(?!\s+(?:order|purchase|one)\b)|the\s+request|my\s+request)|stop\s+(?:it|that|this|please)|^stop$|^cancel$|^quit$"
    r"|let\s+me\s+think(?:\s+about\s+it)?|doesn'?t\s+matter)"
    r"|算了|不办了|不弄了|没事了|先不|暂时不|不取消了|不用取消|别取消|不退了|不用退|别退了|不改了|不用改|别改了"
    r"|不开了|再想想|考虑一下|再考虑|不想(?:退|改|取消|开|办)了|取消吧|停止", re.I)
# declining ("no need", "不用了"): a change of mind, except where the bot asked something one may decline (a tax id)
_DECLINE = re.compile(r"\b(?:no\s+need|not\s+needed(?:\s+any\s*more)?|not\s+any\s*more|no\s+thanks?(?:\s+you)?$"
                      r"|don'?t\s+need\s+(?:it|that|to)|i'?m\s+good\s*(?:thanks)?$)|不用了|不要了|不需要了|不必了"
                      r"|(?:不用|不需要|不必)(?=\s*(?:[,，.。!！~]|谢谢|$))", re.I)
_MIND_FILLER = re.compile(r"\b(?:wait|hmm+|um+|oh|ah|actually|sorry|no|nope|please|thank\s+you|thanks?|ok(?:ay)?|then|just"
                          r"|i|it|the|that|this|request|order|refund|as|is)\b|等等|等一下|嗯+|哦|啊|其实|那个|还是|吧|了|谢谢|哈"
                          r"|[\s,，.。!！?？~…;；:：]", re.I)


# Putting the decision off ("I'll think about it", "maybe later", "let me ask my wife first", "回头再说", "我先问问我老婆",
# "改天吧"): to the bot's offer of a task, a no for now, said politely. Phrases of delay and of thinking it over or
# asking someone first, not words that a description of an order could hold.
_DEFER = re.compile(
    r"\b(?:(?:i'?ll|i\s+will|i'?m\s+going\s+to|i\s+(?:need|want|have)\s+to|i'?d\s+(?:like|have)\s+to|let\s+me|gonna|"
    r"maybe\s+i'?ll|i\s+(?:might|may)|i\s+should)\s+(?:first\s+)?(?:think|consider|sleep\s+on|mull|decide|check\s+with|"
    r"ask\s+(?:my|our|him|her|them|someone|somebody)\b|talk\s+(?:to|with)|discuss|wait|get\s+back|come\s+back)"
    r"|think\s+(?:about\s+it|it\s+over)|(?:another|some\s*other|a\s+different)\s+(?:time|day)"
    r"|(?:maybe|perhaps|probably|possibly)\s+(?:later|another\s+time|some\s*time)|get\s+back\s+to\s+you"
    r"|let\s+you\s+know|hold\s+off|not\s+(?:right\s+)?now\s*[,.!]?\s*(?:thanks?|thank\s+you)?\s*$)"
    r"|^\s*(?:ok(?:ay)?|sure|fine|hmm+|um+|well)?[\s,.!]*(?:later|not\s+(?:yet|now|today|right\s+now))\s*[,.!]?\s*"
    r"(?:thanks?|thank\s+you|then|please)?\s*[.!]?\s*$"
    r"|想想|想一想|想一下|考虑|回头(?:再|我|看|说|联系|找)|再说\s*(?:吧|了|啦)?\s*$|以后再|改天|下次再|晚点|晚些|稍后|等会|等一会|过两天|过几天|过段时间"
    r"|先问问|先问一?下|问问.{0,8}再|商量|再看看|看看再说|再决定|先等等|等.{0,6}再(?:说|办|弄|决定)", re.I)


def defers(text: str) -> bool:
    """The customer puts the decision off ("ok I'll think about it", "maybe later", "我再想想", "回头再说", "我先问问我
    老婆"): to an offer, a no for now, never a yes nor something to act on."""
    t = norm(text)
    return bool(t) and len(t) <= 120 and _DEFER.search(t) is not None


def changes_mind(text: str, *, whole: bool = False) -> bool:
    """The one reader of a customer dropping the task: a cancel command ("cancel", "取消…", "stop" leading the
    message, "never mind" anywhere) or a change of mind ("actually no, I changed my mind, keep it", "等等，算了，
    不取消了").

    ``whole``: for steps where any text is an answer (a title, a tax id "not needed"): besides a command, only a
    clear change of mind that is (nearly) the whole message."""
    folded = norm(text)
    if any(folded == c or folded.startswith(c) or (len(c) > 3 and c in folded) for c in CANCEL):
        return True
    t = normalise(text, case="keep", simplify="never", spaces="keep").strip()
    if not t or len(t) > 200:
        return False
    if not whole:
        return bool(_CHANGE_OF_MIND.search(t) or _DECLINE.search(t))
    return _whole_change_of_mind(t)


def _whole_change_of_mind(t: str) -> bool:
    """A change of mind and (nearly) nothing else in the normalised text ``t``."""
    if not _CHANGE_OF_MIND.search(t):
        return False
    return len(_MIND_FILLER.sub("", _DECLINE.sub("", _CHANGE_OF_MIND.sub("", t)))) <= 2


def after_change_of_mind(text: str) -> str:
    """What the message asks after dropping the task ("哦不用了，我还是想查一下物流" -> "我还是想查一下物流", "never mind,
    where is my parcel?" -> "where is my parcel?"): the words after its last change-of-mind or cancel phrase, or
    "" when nothing of substance follows ("算了，不退了", "cancel it please")."""
    t = normalise(text, case="keep", simplify="never", spaces="keep").strip()
    if not t or len(t) > 200:
        return ""
    low = t.lower()
    ends = [m.end() for rx in (_CHANGE_OF_MIND, _DECLINE) for m in rx.finditer(t)]
    ends += [i + len(c) for c in CANCEL for i in [low.find(c)] if i >= 0]
    if not ends:
        return ""
    rest = t[max(ends):].lstrip(" ,，.。!！;；:：~…、-—–")
    return rest if len(_MIND_FILLER.sub("", rest)) > 2 else ""


_MIND_OPENING = re.compile(r"^(?:\s|[,，.。!！~…]|wait|hmm+|um+|oh|ah|ok(?:ay)?|actually|sorry|等等|等一下|嗯+|哦|啊|其实)*$",
                           re.I)


_COMMAND_WORDS = ("stop", "quit", "cancel")
_COMMAND_ALONE = re.compile(r"\b(?:stop|quit|cancel)\b\s*(?:[,，.。!！;；]|$)", re.I)


def opens_with_change_of_mind(text: str) -> bool:
    """The message opens by dropping the task ("哦不用了，我还是想查一下物流", "never mind, where is my order?"): a
    change-of-mind or decline phrase before anything else (an address or a title never starts so)."""
    t = normalise(text, case="keep", simplify="never", spaces="keep").strip()
    low = t.lower()
    starts = [m.start() for rx in (_CHANGE_OF_MIND, _DECLINE, _COMMAND_ALONE) for m in rx.finditer(t)]
    # a bare command word opens a name as well ("Stop & Shop Ltd"): only followed by a pause (_COMMAND_ALONE)
    starts += [i for c in CANCEL if c not in _COMMAND_WORDS for i in [low.find(c)] if i >= 0]
    return bool(starts) and bool(_MIND_OPENING.match(t[:min(starts)]))


def said_after_dropping(text: str) -> str:
    """What a message that opens by dropping the task says next ("forget it, just refund the full amount", "哦不用
    了，我还是想查一下物流" -> what follows); "" when it does not open so or nothing of substance follows."""
    return after_change_of_mind(text) if opens_with_change_of_mind(text) else ""


def is_decline(text: str) -> bool:
    """The message declines and says (nearly) nothing else ("不用了，谢谢你", "no need, thanks"): not a change of mind."""
    t = normalise(text, case="keep", simplify="never", spaces="keep").strip()
    if not t or len(t) > 200 or not _DECLINE.search(t) or _CHANGE_OF_MIND.search(t):
        return False
    return len(_MIND_FILLER.sub("", _DECLINE.sub("", t))) <= 2


_THANKS_LEAD = re.compile(r"^(?:谢谢(?:你|您|啦)?|多谢|thanks?(?:\s+you)?|thx)[\s,，.。!！~…]*", re.I)


def declined_then(text: str) -> tuple[str, str] | None:
    """A message that opens by declining and goes on ("不用了，谢谢你，我还想问下退货运费", "no need, thanks. how much is
    return shipping?"): (the decline, what follows). None when it opens by dropping the task ("算了", "never mind")
    or says nothing after the decline."""
    rest = said_after_dropping(text)
    t = normalise(text, case="keep", simplify="never", spaces="keep").strip()
    at = t.rfind(rest) if rest else -1
    if at <= 0:
        return None
    thanks = _THANKS_LEAD.match(rest)
    if thanks:   # "不用了，谢谢你，我还想问下…": the thanks go with the decline
        at, rest = at + thanks.end(), rest[thanks.end():]
    if not rest:
        return None
    head = t[:at].strip(" ,，.。!！;；:：~…、-")
    low = head.lower()
    if not _DECLINE.search(head) or _CHANGE_OF_MIND.search(head) \
            or any(c in low for c in CANCEL if not _DECLINE.search(c)):
        return None
    return head, rest


def drops_task(text: str) -> bool:
    """A change of mind that is (nearly) the whole message ("never mind", "算了，不退了", "forget it"), not a
    command that names a task ("cancel order 100235", "取消订单"): with nothing waiting, there is nothing to do."""
    t = normalise(text, case="keep", simplify="never", spaces="keep").strip()
    return bool(t) and len(t) <= 200 and _whole_change_of_mind(t)


_NEGATED = re.compile(r"\b(?:not|instead\s+of|rather\s+than)\s+[^\s,，.。;；!！?？]+|不是[^\s,，.。;；!！?？是]+", re.I)


def drop_negated(text: str) -> str:
    """A correction without the value it rejects ("sorry, 25 not 45" -> "sorry, 25"; "不是30，是18" -> "，是18")."""
    return _NEGATED.sub(" ", text or "")


# "all of it", "the full amount please", "refund everything", "全部", "全额退款", "都退了吧": the whole of what is
# asked for (a slot's ``whole`` says what that is: the amount left to refund, every item of the order)
_WHOLE = re.compile(
    r"^(?:(?:yes|ok(?:ay)?|just|please|i\s+want|i'?d\s+like|i\s+would\s+like|give\s+me|refund(?:\s+me)?|return)\s+)*"
    r"(?:the\s+)?(?:all(?:\s+of\s+(?:it|them|the\s+money)|\s+the\s+money)?|everything|the\s+lot|(?:the\s+)?(?:full|whole|entire|total)"
    r"(?:\s+(?:amount|sum|price|refund|thing|order|money))?|in\s+full|100\s*%)"
    r"(?:\s+(?:of\s+it|back|refunded|returned|please|thanks|thank\s+you))*$"
    r"|^(?:请|麻烦|帮我|给我|我要|要|就)*退?(?:全部|全额|全款|全都|全|都|所有的?|整单|整个订单)(?:金额|的钱|款项)?(?:退款?|退掉|退了|退回)?"
    r"(?:金额|的钱)?(?:吧|就行|就好|谢谢|了)*$", re.I)


def is_whole(text: str) -> bool:
    """Little more than "all of it": the answer a slot's ``whole`` value stands for."""
    t = norm(text)
    return bool(t) and bool(_WHOLE.match(t.replace(" ", "") if re.search(r"[\u4e00-\u9fff]", t) else t))


def is_correction(text: str) -> bool:
    return bool(CORRECTION.search(text or ""))


def order_ids(text: str) -> list[str]:
    """Every order-number-like token of the message, in order (a zip code looks like one too)."""
    return [f.lstrip("#") for f in _ORDER_ID.findall(text or "")]


def _sums(text: str) -> Iterator[tuple[dict[str, Any], bool, tuple[int, int]]]:
    """Each number of the text that may be a sum of money, in order: ({value, currency}, whether a currency marks
    it, where). An order number is not one."""
    for m in _AMOUNT.finditer(text):
        if _ORDER_ID.fullmatch(m.group("num")):
            continue
        cur = (m.group("cur") or m.group("cur2") or "").lower()
        yield {"value": float(m.group("num")), "currency": _CURRENCY.get(cur)}, bool(cur), m.span()


def stated_beside(entity: str, text: str) -> tuple[Any, tuple[int, int]] | None:
    """A value of ``entity`` that the text states unmistakably, whatever else it answers, and where: an amount or
    sum of money with its currency ("5 dollars", "¥50", "50元"), an order number, an email address. A bare number
    is not one (it may be a place in a list or the answer itself). The last mention wins."""
    text = text or ""
    if entity in ("amount", "money"):
        found = None
        for money, marked, span in _sums(text):
            if marked:
                found = (money["value"] if entity == "amount" else money, span)
        return found
    pattern = {"order_id": _ORDER_ID, "email": _EMAIL}.get(entity)
    if pattern is None:
        return None
    last = None
    for m in pattern.finditer(text):
        last = m
    if last is None:
        return None
    return (last.group(0).lstrip("#") if entity == "order_id" else last.group(0)), last.span()


def extract(entity: str, text: str, entities: dict[str, Any] | None = None) -> Any:
    """The value of an entity type in the message; the last mention wins (a correction names the new one last)."""
    entities = entities or {}
    if entity in entities and entities[entity] not in (None, ""):
        return entities[entity]
    text = text or ""
    if entity == "order_id":
        found = _ORDER_ID.findall(text)
        return found[-1].lstrip("#") if found else None
    if entity in ("amount", "money"):
        best = None
        for money, _, _ in _sums(text):
            best = money
        if best and entity == "amount":
            return best["value"]
        return best
    if entity == "number":
        found = _NUMBER.findall(text)
        return float(found[-1]) if found else None
    if entity == "yes_no":
        return yes_no(text)
    if entity == "email":
        found = _EMAIL.findall(text)
        return found[-1] if found else None
    if entity == "phone":
        found = _PHONE.findall(text)
        return re.sub(r"[\s-]", "", found[-1]) if found else None
    if entity == "text":
        t = text.strip()
        return t or None
    return None


@dataclass
class Choice:
    index: int | None          # the chosen option (0-based), None when nothing or several matched
    candidates: list[int]      # several matched: ask again among these
    how: str                   # number | id | exact | fuzzy | encoder | none | ambiguous


def _ratio(a: str, b: str) -> float:
    if _fuzz is not None:
        return float(_fuzz.partial_ratio(a, b)) / 100.0
    if not a or not b:
        return 0.0
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    best = 0.0
    for i in range(0, max(1, len(long_) - len(short) + 1)):
        best = max(best, SequenceMatcher(None, short, long_[i:i + len(short)]).ratio())
        if best == 1.0:
            break
    return best


_CJK = re.compile(r"[\u4e00-\u9fff]")


def _tokens(text: str) -> list[str]:
    t = norm(text)
    # a contraction stays one word ("they're": never "re", which half the world's words contain)
    words = [w for w in re.findall(r"[a-z0-9]+(?:'[a-z]+)?", t) if len(w) >= 2 or w.isdigit()]
    cjk = re.findall(r"[\u4e00-\u9fff]{2,}", t)
    return words + cjk


_STOP = {"the", "one", "with", "my", "that", "this", "order", "went", "to", "for", "please", "of", "and", "a",
         "an", "in", "on", "it", "is", "ending", "want", "i", "me", "which", "from", "card", "那个", "这个", "的"}
# words that carry no description of an option: function words, hedges, requests to the bot. An answer is
# judged by its other words (the evidence floor of ``choose``)
_FUNCTION = _STOP | {
    "not", "no", "sure", "can", "could", "would", "should", "will", "you", "your", "look", "up", "check", "find",
    "all", "some", "any", "every", "each", "just", "maybe", "think", "know", "guess", "like", "need", "get", "got",
    "do", "does", "did", "have", "has", "had", "was", "were", "be", "been", "am", "are", "so", "but", "or", "if",
    "at", "by", "as", "about", "what", "where", "when", "how", "why", "who", "yes", "ok", "okay", "thanks",
    "thank", "im", "its", "there", "here", "them", "they", "it's", "i'm", "we", "our", "us", "mine", "ones",
    "those", "these", "bought", "ordered", "purchased", "item", "items", "thing", "things", "help", "let",
    "tell", "see", "idea", "remember", "which", "wanted", "cancel", "return", "exchange", "change",
    "钱", "款", "到", "里", "orders", "last", "time", "again", "also", "too", "really", "actually", "hmm", "um", "well", "oh", "wait",
    "week", "month", "year", "day", "days", "ago", "yesterday", "today", "recently", "before", "earlier",
    "refund", "send", "back", "swap", "replace", "replacement", "new", "old", "same", "other", "another",
    "退", "退掉", "退货", "换", "换成", "换货", "改", "改成", "取消", "退款", "上次", "之前", "最近", "那个", "这个",
    "我", "我的", "能", "下", "一", "在", "有", "没", "和", "跟", "或", "上", "哪", "还是", "他", "她", "它", "们", "你", "你们", "要", "想", "是", "了", "吧", "吗", "呢", "把", "给", "帮", "帮我", "一下", "那", "这",
    "个", "哪个", "什么", "不", "不是", "知道", "不知道", "确定", "不确定", "可以", "能", "查", "查查", "查一下",
    "看看", "看一下", "所有", "全部", "订单", "东西", "买", "的", "啊", "嗯", "就", "也", "还", "都", "请", "一个",
}
# words that describe no option of any list (negations, "yet", a greeting): an option's label may hold them ("paid
# (not shipped yet)"), and the customer's "my boots haven't shown up yet" then tied the boots with that order
_MERE = {"yet", "still", "hey", "hi", "hello"}
# ... and negations, which still tell a reason ("I don't need it" is "no longer needed") but no option by a word
_NO_DESCRIPTION = _MERE | {
    "not", "no", "haven't", "hasn't", "hadn't", "didn't", "don't", "doesn't", "isn't", "wasn't", "aren't", "weren't",
    "won't", "can't", "couldn't", "shouldn't", "wouldn't",
    # ... and the asking of a request ("can you cancel my boots?": "can" is inside "cancelled")
    "can", "could", "would", "will", "you", "u",
}
_ZH_RUN = re.compile(r"[\u4e00-\u9fff]+")
_ZH_FUNCTION = re.compile("|".join(sorted((re.escape(w) for w in _FUNCTION if re.match(r"[\u4e00-\u9fff]", w)),
                                          key=len, reverse=True)))


@lru_cache(maxsize=8192)
def content_words(text: str) -> tuple[str, ...]:
    """The words of a text that can describe an option: Latin words and numbers, and the Chinese pieces left
    between function words ("那个靴子的订单" -> 靴子), without function words."""
    t = norm(text)
    words = [w for w in re.findall(r"[a-z0-9][a-z0-9'-]*", t) if w not in _FUNCTION and (len(w) >= 2 or w.isdigit())
             and not _ORDER_ID.fullmatch(w.upper())]   # an order number is about the order, not the option
    for run in _ZH_RUN.findall(t):   # Chinese: what is left once the function words are taken out
        words.extend(w for w in _ZH_FUNCTION.split(run) if w)
    return tuple(words)


_CJK_CHAR = re.compile(r"[\u4e00-\u9fff]")


@lru_cache(maxsize=8192)
def _whole_word(word: str) -> re.Pattern[str]:
    """The word standing alone among Latin letters and digits (compiled once: a choice among 50 options asks
    the same few words of every option)."""
    return re.compile(rf"(?<![a-z0-9]){re.escape(word)}(?![a-z0-9])")


def _participle(word: str, field_word: str) -> bool:
    """Whether a field's word is the word's past participle ("cancel" -> "cancelled", "refund" -> "refunded",
    "ship" -> "shipped"): the request's action is no description of an order in that state ("cancel my boots"
    names the boots, not the cancelled order)."""
    return field_word in (word + "ed", word + "d", word + word[-1:] + "ed")


def _word_hit(word: str, fields_norm: str, field_words: list[str]) -> bool:
    if _CJK_CHAR.search(word):
        return word in fields_norm or (len(word) >= 2 and any(len(f) >= 2 and f in word for f in field_words))
    if word in fields_norm and _whole_word(word).search(fields_norm):
        return True
    if len(word) >= 4 and any(word in f and not _participle(word, f) for f in field_words):   # "phone" in "smartphone"
        return True
    return len(word) >= 4 and any(len(f) >= 4 and not _participle(word, f)
                                  and SequenceMatcher(None, word, f).ratio() >= 0.85 for f in field_words)


@lru_cache(maxsize=256)
def _option_fields(texts: tuple[tuple[str, ...], ...]) -> tuple[list[str], list[list[str]]]:
    """Each option's fields as one normalised string, and the words in them (the same options are read for
    every word of an answer and every candidate)."""
    fields = [" ".join(norm(f) for f in fs) for fs in texts]
    return fields, [[w for f in fs for w in content_words(f)] + fields[i].split() for i, fs in enumerate(texts)]


_NEGATION_LED = re.compile(r"^[不无非没未免]")
_DENIED_BEFORE = re.compile(r"(?:不是|不要|并非|别|而非)\s*$")


def _named_despite_negation(text: str, texts: list[list[str]]) -> tuple[list[str], str]:
    """The options' Chinese words that open with a negation character ("不粘锅", "无线耳机", "免洗") said in the text,
    and the text without them: names, which the split at function words would cut at their 不 ("我买的不粘锅涂层掉了"
    names the 不粘锅, not a 粘锅 denied)."""
    t = norm(text)
    if not _CJK_CHAR.search(t):
        return [], text
    named: list[str] = []
    words = {w for fs in texts for f in fs for w in _tokens(f) if len(w) >= 3 and _NEGATION_LED.match(w)}
    for w in sorted(words, key=len, reverse=True):
        at = t.find(w)
        if at >= 0:
            if not _DENIED_BEFORE.search(t[:at]):      # "不是不粘锅那个" still denies it
                named.append(w)
            t = t.replace(w, " ")
    return (named, t) if named or t != norm(text) else ([], text)


def evidence(text: str, texts: list[list[str]], index: int, *, head: bool = False, relevant: bool = False) -> float:
    """How much of what the text says describes option ``index``: the share of its content words found in
    the option's fields, counting only words that tell the options apart (a word every option has, like
    "order", is no evidence). 0.0 when the text has no content words at all (a bare "that one").

    ``relevant``: for words said before the question (a whole request, which also names the change, the
    reason, the refund): a word that describes no option at all is about something else and is not counted;
    a word that describes another option still counts against this one."""
    named, rest = _named_despite_negation(text, texts)
    words = (*named, *content_words(rest))
    if not words:
        return 0.0
    fields, field_words = _option_fields(tuple(tuple(fs) for fs in texts))
    hits, counted = 0, 0
    for w in words:
        if w in _MERE:
            continue   # "yet", "hey": said of no option, whatever a label holds
        if len(texts) > 1 and all(_word_hit(w, fields[i], field_words[i]) for i in range(len(texts))):
            continue   # shared by every option ("order", "waterproof" among waterproof variants): no evidence
        if relevant and not any(_word_hit(w, fields[i], field_words[i]) for i in range(len(texts))):
            continue   # names nothing here: about the rest of the request
        counted += 1
        if _word_hit(w, fields[index], field_words[index]):
            hits += 1
        elif head and counted == 1:
            return 0.0   # the first thing the words name is not this option
    return hits / counted if counted else 0.0


EVIDENCE_FLOOR = 0.6


# "the other one", "the other order", "另一个", "另外那个": an option of those offered other than the one taken
_OTHER = re.compile(r"(?<![a-z])(?:other|another|different)(?![a-z])|另一(?:个|台|件|副|双|条|款|单|只)"
                    r"|另外(?:那|一)(?:个|台|件|副|双|只)|别的|其他|其它", re.I)


# "cancel it", "a refund for that order", "这个订单", "帮我把它取消", "那帮我取消吧" (a Chinese clause opening with 那/那就
# goes on about what was just said, its object left unsaid)
_BACK = re.compile(r"(?<![a-z'])(?:it|that|this)(?:\s+(?:one|order))?(?![a-z'])|the\s+same\s+order"
                   r"|它|这个|那个|这单|那单|这笔|那笔|该订单|^\s*(?:好的?|嗯|哦|ok)?[,，\s]*那(?:就|你|帮|麻烦|请|我)", re.I)


def refers_back(text: str) -> bool:
    """The message speaks of what the conversation was just about ("ok then cancel it", "那帮我取消吧"), naming no
    other thing of its own; "the other one" is not it, nor a demonstrative that heads a description of its own
    ("取消手提袋那单", "cancel that tote order": the thing described picks the order, see :func:`describes_its_own`)."""
    return bool(_BACK.search(text or "")) and not refers_to_other(text) and not describes_its_own(text)


# "手提袋那单", "杯子那个": words before a Chinese demonstrative describe what it points at, once the request's own
# words before them go ("取消", "帮我把"); "刚才那单", "上面那个" place it in the conversation instead
_ZH_DEMONSTRATIVE = re.compile(r"(?:这|那)(?:一)?(?:单|个|笔|件)")
_ZH_BEFORE = re.compile(r"[\u4e00-\u9fff]{1,12}$")
_ZH_REQUEST_LEAD = re.compile(r"^(?:帮我|帮忙|请|麻烦|我要|我想|想要|想|要|把|给|将|对|申请|取消|退款|退货|退|查询|查"
                              r"|看看|看|修改|改|开|那就|就|那|的)+")
_ZH_AFTER = re.compile(r"[\u4e00-\u9fff]+?(?=帮|请|麻烦|我|要|想|把|给|退|取消|改|修改|开|查|吧|了|呢|吗|的|[，,。？?！!\s]|$)")
_ZH_HEAD_ONLY = re.compile(r"(?:订单|单子|东西|商品|订单号)")
# "that tote order", "this blue one": a word between the demonstrative and its head ("that order", "this one" have none)
_EN_DESCRIBED_BACK = re.compile(r"(?<![a-z'])(?:that|this)\s+(?!(?:order|one|item)\b)(?:[a-z0-9'-]+\s+){1,3}?"
                                r"(?:order|one|item)(?![a-z'])", re.I)


def describes_its_own(text: str) -> bool:
    """A demonstrative in the message heads words that describe a thing ("取消手提袋那单", "把杯子那个退了", "cancel
    that tote order"): the message names what it means, which is not necessarily what was just talked about."""
    t = text or ""
    if _EN_DESCRIBED_BACK.search(t):
        return True
    for m in _ZH_DEMONSTRATIVE.finditer(t):
        run = _ZH_BEFORE.search(t[:m.start()])
        desc = re.sub(r"的$", "", _ZH_REQUEST_LEAD.sub("", run.group(0))) if run else ""
        if len(desc) >= 2 and not _ZH_PLACE_IN_LIST.fullmatch(desc):
            return True
        after = _ZH_AFTER.match(t[m.end():])     # "那个杯子帮我退了": the words it heads, up to the request's own
        if after is not None and len(after.group(0)) >= 2 and not _ZH_HEAD_ONLY.fullmatch(after.group(0)):
            return True
    return False


def refers_to_other(text: str) -> bool:
    """The message speaks of "the other" one of what was in question ("actually, the other one", "另外那个呢")."""
    return bool(_OTHER.search(text or ""))


def without_other(text: str) -> str:
    """The message without its "the other" words ("the other order" -> "the  order")."""
    return _OTHER.sub(" ", text or "")


def only_describes(text: str, texts: list[list[str]]) -> bool:
    """Every word of the text that could describe something describes one of the options (an ordinal aside):
    "the second", "the pending one", "那个待付款的" do; "the other payment options" or "I have a question about
    my invoice" name something the options are not."""
    fields, field_words = _option_fields(tuple(tuple(fs) for fs in texts))
    words = content_words(_ORDINAL_RE.sub(" ", norm(text)))
    return all(any(_word_hit(w, fields[i], field_words[i]) for i in range(len(texts))) for w in words)


def _names_label(t: str, fields: list[str]) -> bool:
    """The option's whole label stated as words of the answer ("M", "the small one, S")."""
    label = norm(fields[0]) if fields else ""
    return bool(label) and re.search(rf"(?<![a-z0-9]){re.escape(label)}(?![a-z0-9])", t) is not None


_CODE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")


def meaning_texts(oid: str, fields: list[str]) -> list[str]:
    """What an option is, for the encoder: the fields that name it besides its label (the label repeats them
    beside an id and a status), without its id and without codes ("delivered", "pending_payment": a state,
    which words match, never a thing an answer means); the label when nothing else is left."""
    named = [f for f in fields[1:] if not _CODE.fullmatch(f.strip())] or fields[:1]
    out: list[str] = []
    for f in named:
        f = re.sub(rf"(?<![A-Za-z0-9]){re.escape(oid)}(?![A-Za-z0-9])", " ", f).strip(" :,-") if oid else f.strip()
        if f and f not in out:
            out.append(f)
    return out or [" ".join(fields)]


def by_meaning(similarity: Callable[[str, list[str]], list[float]], text: str, ids: list[str],
               texts: list[list[str]]) -> list[float]:
    """Each option's similarity to the text: the best of its ``meaning_texts``, all asked in one call."""
    per = [meaning_texts(oid, fields) for oid, fields in zip(ids, texts)]
    unique = list(dict.fromkeys(f for fs in per for f in fs))
    sims = dict(zip(unique, similarity(text, unique)))
    return [max(sims[f] for f in fs) for fs in per]


def ordinal_of(text: str, n: int) -> int | None:
    """The place in a list of ``n`` a message names ("the second one", "第二个", "the last", "2"), from 0; None."""
    m = _ORDINAL_RE.search(norm(text))
    if not m:
        return None
    raw = m.group(1) or m.group(2) or m.group(3)
    k = int(raw) if raw.isdigit() else _ORDINALS.get(raw, _ORDINALS.get(raw[:1], 0))
    if k == -1:
        return n - 1 if n else None
    return k - 1 if 1 <= k <= n else None


# a field said right after a negation ("not shipped", "hasn't shipped", "never delivered") is denied, not named
_NEGATED_BEFORE = re.compile(r"(?:\bnot|\bnever|n't|\bno)\s+(?:(?:been|yet|even|really|actually)\s+)?$")


def choose(text: str, ids: list[str], texts: list[list[str]], *,
           similarity: Callable[[str, list[str]], list[float]] | None = None,
           fuzzy_threshold: float = 0.8, encoder_threshold: float = 0.85, encoder_margin: float = 0.05,
           floor: float = EVIDENCE_FLOOR, head: bool = True, relevant: bool = False) -> Choice:
    """Pick an option by number, id, or description: exact, then fuzzy, then (optionally) the encoder.

    ``ids`` are the options' ids; ``texts`` the label and matchable fields of each option. A description
    is taken only when at least ``floor`` of its content words describe the option (``evidence``): an
    answer that mostly names something else, or only shares a common word, picks nothing (asked again).
    ``head``: the first thing the answer names must be the option ("Laptop (silver, 512GB)" is no smartphone,
    whatever it shares with one); off for words said before the question, which name other things too.
    ``relevant``: words that describe no option are left out of the evidence (see ``evidence``).
    """
    n = len(ids)
    t = norm(text)
    if not t or n == 0:
        return Choice(None, [], "none")
    k = ordinal_of(t, n)
    if k is not None:
        return Choice(k, [], "number")
    # an id between Chinese characters ("W3003的") is still a whole id: only letters and digits bound it;
    # the substring test first: cheap
    hits = [i for i, oid in enumerate(ids) if oid and norm(oid) in t
            and re.search(rf"(?<![a-z0-9_]){re.escape(norm(oid))}(?![a-z0-9_])", t)]
    if len(hits) == 1:
        return Choice(hits[0], [], "id")
    # exact: an option's label or a field stated in the text (or the text is the label)
    # exact: an option's label or fields stated in the text (or the text is the label); the option with the
    # most fields stated wins ("the navy one in size L" names two fields of one variant)
    counts = []
    for i, fields in enumerate(texts):
        hit: set[Any] = set()
        for f in fields:
            nf = norm(f)
            if nf == t:
                hit.add(("whole", nf))
            elif nf and nf in t and (len(nf) >= 2 or nf.isalnum()) and any(
                    not _NEGATED_BEFORE.search(t, 0, m.start())
                    for m in re.finditer(rf"(?<![a-z0-9]){re.escape(nf)}(?![a-z0-9])", t)):
                hit.add(nf)   # "not shipped yet" names no shipped order
        counts.append(len(hit) + (100 if any(isinstance(h, tuple) for h in hit) else 0))
    top = max(counts)
    exact = [i for i, c in enumerate(counts) if c == top] if top > 0 else []
    if len(exact) == 1 and (top >= 100 or _names_label(t, texts[exact[0]])
                           or evidence(text, texts, exact[0], head=head, relevant=relevant) >= floor):
        return Choice(exact[0], [], "exact")
    if len(exact) == 1:
        return Choice(None, [], "none")   # a field named among words that describe something else ("Laptop (silver)")
    if is_question(text) and not exact and not relevant:
        return Choice(None, [], "none")   # "can you look it up?": no answer (a request said before is often a question)
    pool = exact or list(range(n))
    matched = len(exact) > 1
    # fuzzy: the share of the customer's content words found in the option (each word fuzzily)
    # Chinese is read as the pieces between function words ("耳机那个" -> 耳机), as the evidence reads it
    words = [w for w in _tokens(text) if w not in _STOP and w not in _NO_DESCRIPTION and not _CJK.search(w)]
    named, rest = _named_despite_negation(text, texts)    # "不粘锅" is a name, not a negation
    words += named + [w for w in content_words(drop_negated(rest)) if _CJK.search(w)]   # "不是耳机" names no option
    if words:
        scores = []
        for i in pool:
            field_words = [w for f in texts[i] for w in _tokens(f)]
            joined = " ".join(norm(f) for f in texts[i])
            got = 0.0
            for w in words:
                if _CJK.search(w):
                    got += 1.0 if _word_hit(w, joined, field_words) else 0.0
                    continue
                own = [fw for fw in field_words if not _participle(w, fw)]   # "cancel" is no "cancelled" order
                # a word of two letters only by itself: partly, it is inside half the words of any option
                best = (max((_ratio(w, fw) for fw in own), default=0.0) if len(w) >= 3 else float(w in own))
                if len(w) >= 4 and any(w in fw for fw in own):
                    best = 1.0
                got += 1.0 if best >= fuzzy_threshold else 0.0
            scores.append(got / len(words))
        top_score = max(scores)
        if top_score > 0:
            leaders = [pool[j] for j, s in enumerate(scores) if s == top_score]
            if len(leaders) == 1:
                if evidence(text, texts, leaders[0], head=head, relevant=relevant) >= floor:
                    return Choice(leaders[0], [], "fuzzy")
                return Choice(None, [], "none")   # weak: a word or two shared with one option, the rest not it
            pool, matched = leaders, True
    if similarity is not None:
        sims = by_meaning(similarity, text, [ids[i] for i in pool], [texts[i] for i in pool])
        # a similarity on its own scale says what a confident pick is there (meaning.EncoderSimilarity)
        threshold, margin = getattr(similarity, "confident", (encoder_threshold, encoder_margin))
        order = sorted(range(len(pool)), key=lambda j: -sims[j])
        if sims[order[0]] >= threshold and (len(order) == 1 or sims[order[0]] - sims[order[1]] >= margin):
            return Choice(pool[order[0]], [], "encoder")
    if matched and len(pool) > 1:
        return Choice(None, pool, "ambiguous")
    return Choice(None, [], "none")


_QUESTION = re.compile(r"[?？]\s*$|[吗呢嘛]\s*[?？]?\s*$|什么|怎么|多久|多少|哪些|哪里|为什么|能不能|可不可以|是否|请问|想问|问一下|问下"
                       r"|^\s*(what|how|when|where|why|which|who|can|could|do|does|is|are|will|should)\b", re.I)


_NONE_OF_THESE = re.compile(r"^\s*(?:none(?:\s+of\s+(?:these|them|those|the\s+above))?|neither(?:\s+of\s+them)?"
                            r"|not\s+any\s+of\s+(?:these|them)|都不是|都不对|一个都不是|都没有|没有)\s*[.!。！]?\s*$", re.I)


def is_none_of_these(text: str) -> bool:
    """The answer to a list is "none of these" / "neither" / "都不是" (the whole message)."""
    return bool(_NONE_OF_THESE.match(text or ""))


def is_question(text: str) -> bool:
    """A question ("退货政策是什么？", "what payment methods do you accept"): not a free-text answer like an address."""
    return bool(_QUESTION.search((text or "").strip()))


# going on: what a customer says to let the bot go on, beside a yes ("ok then go ahead", "好的继续吧")
_GO_ON = re.compile(r"\b(?:go\s+(?:ahead|on)|carry\s+on|continue|proceed|please|then|so|just|do\s+it|let'?s\s+(?:do\s+it|go)"
                    r"|thanks?|thank\s+you)\b|继续|接着|往下|办吧|吧|啊|呀|哈|了|谢谢|[\s,，.。!！~]", re.I)


def only_consents(text: str) -> bool:
    """"ok then go ahead", "好的，继续吧": the customer lets the bot go on and says nothing else (no value, nothing
    told): where a value is asked, the question is simply asked again."""
    t = norm(text)
    if not t or (yes_no(text) is not True and not _GO_ON.search(t)):
        return False
    rest = t
    for phrase in sorted(YES, key=len, reverse=True):
        rest = re.sub(rf"(?<![a-z]){re.escape(phrase)}(?![a-z])", " ", rest)
    return not _GO_ON.sub("", rest).strip()


# "ok thanks", "great, thank you", "got it thx", "好的谢谢", "知道了，谢谢": an acknowledgement that closes the exchange
_CLOSING = re.compile(
    r"^(?:(?:ok(?:ay)?|k|alright|all\s+right|got\s+it|great|cool|nice|perfect|i\s+see|understood|noted|好的?|好吧|行|嗯+|哦+"
    r"|知道了|明白了|了解了?|收到)[\s,，.。!！~]*)*"
    r"(?:thanks?(?:\s+a\s+lot)?|thank\s+you(?:\s+(?:so|very)\s+much)?|thx|ty|cheers|谢谢(?:你|您|啦)?|多谢|感谢)[\s,，.。!！~]*$",
    re.I)


def closes_with_thanks(text: str) -> bool:
    """"ok thanks" to "would you like me to look up your order?": thanks, with at most an acknowledgement before
    them, close what was said; no yes to a question ("yes thanks", "sure, thank you" say yes first)."""
    return bool(_CLOSING.match(norm(text or "")))


def tells_something(text: str) -> bool:
    """"it's broken", "屏幕摔裂了" where an amount is asked: no answer to the question and no question either, but
    something the customer tells about their case (words of substance, two words at least): kept and
    acknowledged, never "I didn't catch that". A filler ("hmm", "dunno", "不知道"), a lone word or a mere go-on
    ("ok then go ahead", only_consents) is not."""
    if not text or is_question(text) or read_form(text) == "question" or not content_words(text) or only_consents(text):
        return False
    t = norm(text)
    return len(re.findall(r"[a-z0-9][a-z0-9'-]*", t)) >= 2 or len(_CJK_CHAR.findall(t)) >= 2


def is_bare_cancel(text: str) -> bool:
    """The whole message is a cancel phrase ("算了", "never mind"): never a free-text value such as a title."""
    t = norm(text)
    return any(t == c or t in (c + " then", c + " please", "oh " + c, c + "吧", c + "了") for c in CANCEL)


_CORRECTION_LEAD = re.compile(r"^(?:\s|[,，.。:：!！;；]|no\b|nope\b|not\s+that(?:\s+one)?|wrong\b|actually\b|sorry\b"
                              r"|wait\b|hold\s+on\b|oops\b|等等|等一下|稍等"
                              r"|i\s+meant?\b|it\s+should\s+be\b|should\s+be\b|make\s+it\b|change\s+it\s+to\b"
                              r"|instead\b|不对|不是|错了|应该是|改成|改为|换成|这个|那个|是)+", re.I)


# "the address should be ...", "the title is ...", "地址应该是…", "抬头是…": the slot's name before the new value
_NAMED_VALUE = re.compile(r"^(?:(?:the\s+)?(?:new\s+|correct\s+|right\s+)?[a-z]+(?:\s+[a-z]+)?\s+(?:should\s+be|must\s+be"
                          r"|is\s+actually|is)\s+|it'?s\s+|it\s+is\s+)"
                          r"|^(?:新的|正确的)?[\u4e00-\u9fff]{1,4}?(?:应该是|应为|改成|改为|是|为)", re.I)


def strip_correction(text: str) -> str:
    """The new value of a correction without its lead ("no, the address should be 21 Oak Road" -> "21 Oak Road")."""
    rest = _CORRECTION_LEAD.sub("", (text or "").strip()).strip()
    named = _NAMED_VALUE.sub("", rest, count=1).strip()
    return named if len(named) >= 2 else rest


# "it's No. 15 not 5", "15号，不是5号", "not 5 but 15", "把5号改成15号", "5 should be 15": one part of a value said
# again, the part it replaces named beside it (new, old)
_SWAPS = (
    re.compile(r"^(?P<new>.+?)\s*[,，]?\s+(?:and\s+)?not\s+(?P<old>.+?)$", re.I),
    re.compile(r"^not\s+(?P<old>.+?)\s*[,，]?\s+but\s+(?P<new>.+?)$", re.I),
    re.compile(r"^(?:change|replace)\s+(?P<old>.+?)\s+(?:to|with|by)\s+(?P<new>.+?)$", re.I),
    re.compile(r"^(?P<old>.+?)\s+(?:should\s+be|must\s+be|is\s+actually)\s+(?P<new>.+?)$", re.I),
    re.compile(r"^不是(?P<old>.+?)[，,、\s]*(?:而)?是(?P<new>.+?)$"),
    re.compile(r"^(?:应该)?是(?P<new>.+?)[，,、\s]*(?:而)?不是(?P<old>.+?)$"),
    re.compile(r"^(?P<new>[^，,]+?)[，,、\s]+不是(?P<old>.+?)$"),
    re.compile(r"^(?:把)?(?P<old>.+?)(?:改成|改为|换成|应该是|应为)(?P<new>.+?)$"),
)
_SWAP_LEAD = re.compile(r"^(?:\s|[,，.。:：!！;；]|no\b(?!\.?\s*\d)|nope\b|wrong\b|actually\b|sorry\b|wait\b|hold\s+on\b|oops\b"
                        r"|my\s+(?:mistake|bad)\b|typo\b|it'?s\b|it\s+is\b|i\s+meant?\b|等等|等一下|稍等|不好意思|抱歉"
                        r"|对不起|哦|噢|啊|呃|我是说|我说的是|我的意思是|打错了|写错了|说错了|错了|不对)+", re.I)
_SWAP_EDGE = re.compile(r"^[\s,，.。:：!！;；\"'“”‘’]+|[\s,，.。:：!！;；\"'“”‘’]+$")


def _part_at(value: str, part: str) -> tuple[int, int] | None:
    """Where ``part`` stands in ``value`` as a whole (never inside a longer number or word), when it stands there once."""
    latin = re.search(r"[A-Za-z0-9]", part) is not None
    pattern = (r"(?<![A-Za-z0-9])" + re.escape(part) + r"(?![A-Za-z0-9])") if latin else re.escape(part)
    spans = [m.span() for m in re.finditer(pattern, value, re.I)]
    return spans[0] if len(spans) == 1 else None


def substituted(value: str, text: str) -> str | None:
    """``value`` with the one part a correction names replaced by what it says instead ("it's No. 15 not 5" on
    "No. 5 Xueyuan Road" -> "No. 15 Xueyuan Road"; "是15号不是5号" on "学院路5号" -> "学院路15号"), or None when the
    message is no such correction or the part it replaces is not in the value exactly once. Words the new part
    repeats around the old one ("No. 15" for "5" after "No. ") are not said twice."""
    said = _SWAP_LEAD.sub("", (text or "").strip()).strip()
    if not value or not said or len(said) > 80:
        return None
    for pattern in _SWAPS:
        m = pattern.match(said)
        if m is None:
            continue
        new, old = (_SWAP_EDGE.sub("", m.group(g)) for g in ("new", "old"))
        if not new or not old or new.lower() == old.lower() or len(old) > 40 or len(new) > 60:
            continue
        at = _part_at(value, old)
        if at is None:
            continue
        before, after = value[:at[0]], value[at[1]:]
        for k in range(min(len(before), len(new) - 1), 0, -1):   # "No. 15" for "5" after "No. ": said once
            start = len(before) - k
            whole = start == 0 or not before[start - 1].isalnum() or _CJK.match(before[start - 1]) is not None
            if whole and new.lower().startswith(before[start:].lower()):
                new = new[k:].lstrip() if before[start:].endswith(" ") or _CJK.search(before[-1:]) \
                    else new[k:]
                break
        for k in range(min(len(after), len(new)), 0, -1):   # "15号" for "5" before "号": the 号 is there already
            if new.endswith(after[:k]) and len(new) > k:
                new = new[:-k]
                break
        return before + new + after
    return None


# "and 100242?", "what about 100242", "ok, and 100235?", "那100242呢", "还有100242": the same question about another value
_FOLLOW_UP_LEAD = re.compile(r"^(?:\s|[,，.。:：!！;；]|and\b|also\b|ok(?:ay)?\b|then\b|what\s+about\b|how\s+about\b"
                             r"|same\s+(?:for|with)\b|plus\b|那么|那|还有|另外|再查一下|再查|再看看|再看一下|再帮我查一下|再帮我查)+", re.I)
_FOLLOW_UP_TAIL = re.compile(r"(?:\s|[,，.。!！?？]|\btoo\b|\bas\s+well\b|\balso\b|呢|的呢|也是|也查一下|吧)+$", re.I)


def strip_follow_up(text: str) -> str:
    """A follow-up's value without its cues ("what about 100242?" -> "100242", "那100242呢" -> "100242")."""
    return _FOLLOW_UP_TAIL.sub("", _FOLLOW_UP_LEAD.sub("", (text or "").strip())).strip()


def is_follow_up(text: str) -> bool:
    """Little more than a value once the follow-up's cues are gone: the same question asked about another value."""
    rest = strip_follow_up(text)
    return bool(rest) and not is_free_value(rest)


_FILLER = re.compile(r"(?<![A-Za-z0-9])(?:#?[A-Z]{0,4}[-#]?\d{3,12}|order|number|no\.?|not|the|one|that|this|it|is|i|mean|meant)"
                     r"(?![A-Za-z0-9])|订单|号|单|[\s,，.。:：;；!！?？#]", re.I)   # "订单100234": Han words end anywhere


_ORDER_WORD = re.compile(r"(?<![a-z])order(?:\s+(?:number|no\.?|#))?(?![a-z])|订单", re.I)


def calls_it_an_order(text: str) -> bool:
    """The message says it speaks of an order ("order 100235", "订单100235"), not just a number."""
    return bool(_ORDER_WORD.search(text or ""))


def is_free_value(text: str) -> bool:
    """More than an order number and filler words ("21 Oak Road, Portland, OR 97201", an address or a title)."""
    rest = _FILLER.sub("", text or "")
    return len(rest) + 2 * len(re.findall(r"[\u4e00-\u9fff]", rest)) >= 6   # a Han character weighs like 3 letters


# ---------------------------------------------------------------- free-text values: pointers and formats

# A pointer points at something the customer has in mind ("马克杯那个", "这个", "第一个", "that one", "the mug
# one", "the first one"): a demonstrative, an ordinal or "one" heading a few words of description, with no
# content of a value's own. At a free-text question (an address, an invoice title) it is never the value.
_ZH_UNIT = r"(?:个|件|款|台|单|笔|条|项|双|只|份|种|套|副|张|本|样|位|家|次)"
_ZH_THAT = rf"(?:这|那|哪)(?:一)?{_ZH_UNIT}"
_ZH_NTH = (rf"(?:第\s*[一二两三四五六七八九十\d]+\s*{_ZH_UNIT}?|最后(?:一)?{_ZH_UNIT}"
           rf"|(?:上面|下面|前面|后面|刚才|刚刚|之前|上一|下一)(?:的)?(?:那|这)?(?:一)?{_ZH_UNIT})")
_ZH_HEAD = r"(?:订单|商品|东西|地址|单子)?"
_ZH_LEAD = re.compile(r"^(?:就是|就要|就|是|要|选|我要|我选|我说的是|我是说|嗯+|哦|呃|额|啊|唔|还是|那就|对)+")
_ZH_TAIL = re.compile(r"(?:吧|啊|呀|呢|哈|啦|了|吗|就行|就好|好了|谢谢)+$")
_ZH_POINTER = re.compile(rf"^(?:[\u4e00-\u9fffa-z0-9]{{0,10}}?的?(?:{_ZH_THAT}|{_ZH_NTH}){_ZH_HEAD}"
                         rf"|{_ZH_THAT}[\u4e00-\u9fff]{{1,6}}?的?|这|那|它|这儿|那儿|这里|那里)$")
_EN_NTH = r"(?:first|second|third|fourth|fifth|last|1st|2nd|3rd|[4-9]th)"
_EN_HEAD = r"(?:one|ones|order|orders|item|items|option|thing|address)"
_EN_LEAD = re.compile(r"^(?:(?:um+|uh+|oh|ah|hmm+|well|ok(?:ay)?|yes|yeah|so|just|maybe|probably|i\s+mean"
                      r"|i\s+think|it'?s|it\s+is|i\s+want|i'?d\s+like|i\s+would\s+like|(?:let'?s\s+)?go\s+with)\s+)+")
_EN_POINTER = re.compile(
    rf"^(?:(?:that|this|those|these|it)(?:\s+(?:one|ones))?"
    rf"|(?:that'?s|this\s+is)\s+(?:the\s+)?one"
    rf"|(?:the|that|this|my|those|these)\s+(?:[a-z0-9'-]+\s+){{0,4}}{_EN_HEAD}"
    rf"|(?:the\s+|my\s+)?{_EN_NTH}(?:\s+{_EN_HEAD})?"
    rf"|(?:number|no|option|#)\s*(?:\d{{1,2}}|one|two|three|four|five)"
    rf"|the\s+one\s+(?:with|in|for|from|on|at|that|which|i|you)(?:\s+[a-z'-]+){{1,5}})$")


def is_pointer(text: str) -> bool:
    """The answer only points at something ("马克杯那个", "第一个", "这个", "that one", "the blue one please", "the
    first one"), saying nothing of a value's own: never an address or a title. What goes on after the
    demonstrative with a number ("那个小区3号楼", "the one at 12 Baker Street") or for long is content."""
    if len(norm(text)) > 60:
        return False
    t, zh = _pointer_words(text)
    if zh:
        return bool(t) and bool(_ZH_POINTER.match(t))
    return bool(t) and len(t.split()) <= 8 and bool(_EN_POINTER.match(t))


def _pointer_words(text: str) -> tuple[str, bool]:
    """The words of a possible pointer without its lead and tail ("就是…吧", "um … please"); whether it is Chinese."""
    t = norm(text)
    if _CJK_CHAR.search(t):
        return _ZH_TAIL.sub("", _ZH_LEAD.sub("", t.replace(" ", ""))), True
    return without_courtesy(_EN_LEAD.sub("", t)).strip(), False


_ZH_DESCRIBED = re.compile(rf"^(?P<desc>[\u4e00-\u9fffa-z0-9]{{1,10}}?)的?(?:{_ZH_THAT}|{_ZH_NTH}){_ZH_HEAD}$"
                           rf"|^{_ZH_THAT}(?P<after>[\u4e00-\u9fff]{{1,6}}?)的?$")
_EN_DESCRIBED = re.compile(rf"^(?:the|that|this|my|those|these)\s+(?P<desc>(?:[a-z0-9'-]+\s+){{1,4}}){_EN_HEAD}$"
                           rf"|^the\s+one\s+(?:with|in|for|from)\s+(?:the\s+|a\s+|my\s+)?(?P<after>(?:[a-z'-]+\s*){{1,4}})$")
_ZH_PLACE_IN_LIST = re.compile(r"上面|下面|前面|后面|最后|最新|刚才|刚刚|之前|上一|下一|另一|其他|别的|第.{1,3}")
_EN_NOT_DESCRIPTION = {"first", "second", "third", "fourth", "fifth", "last", "other", "same", "right", "one",
                       "new", "old", "next", "previous", "only"}


def pointed(text: str) -> str | None:
    """What a pointer describes ("不粘锅那个" -> "不粘锅", "the blue mug one" -> "blue mug", "the one with the lamp"
    -> "lamp"), or None: not a pointer, or one that describes nothing ("那个", "the first one", "that one")."""
    if not is_pointer(text):
        return None
    t, zh = _pointer_words(text)
    if zh:
        m = _ZH_DESCRIBED.match(t)
        desc = (m.group("desc") or m.group("after")) if m else None
        desc = re.sub(r"^(?:我的|我|的)|的$", "", desc or "")
        return desc if len(desc) >= 2 and not _ZH_PLACE_IN_LIST.fullmatch(desc) else None
    m = _EN_DESCRIBED.match(t)
    if m is None:
        return None
    words = [w for w in (m.group("desc") or m.group("after") or "").split() if w not in _EN_NOT_DESCRIPTION]
    return " ".join(words) or None


# What an address looks like (a slot's ``validate: {format: address}``). Chinese: two of the administrative or
# street markers, or one with a number ("北京市朝阳区", "张江路 100 弄", "中山路5号"); words that only hold a marker
# character ("知道", "订单号") are no marker. Other languages: a street or unit word, a postcode beside words, or
# a house number opening the address or one of its comma-separated parts ("12 Baker Street", "Via Roma 8,
# 20121 Milano"); a weaker place word (way, place, court, floor, unit) counts only beside a number.
_ZH_MARKER = re.compile(r"自治区|小区|大厦|公寓|胡同|单元|[省市区县旗乡镇村路街道巷弄号栋幢楼层室座]")
_ZH_NOT_MARKER = re.compile(r"知道|难道|道歉|味道|订单号|单号|号码|账号|超市|楼下|楼上")
_EN_STREET = re.compile(r"\b(?:street|st|road|rd|avenue|ave|lane|ln|boulevard|blvd|drive|dr|highway|hwy|parkway|pkwy"
                        r"|apt|apartment|suite|ste|p\.?\s?o\.?\s+box|strasse|straße|rue|calle)\b")
_EN_PLACE = re.compile(r"\b(?:way|place|pl|court|ct|square|sq|terrace|close|crescent|floor|fl|unit|flat|building"
                       r"|bldg|room|block)\b")
_POSTCODE = re.compile(r"\b(?:\d{5}(?:-\d{4})?|[a-z]{1,2}\d[a-z\d]?\s*\d[a-z]{2}|[a-z]\d[a-z]\s?\d[a-z]\d)\b")
_HOUSE = re.compile(r"(?:^|,)\s*\d{1,6}[a-z]?\s+[a-z]{2,}")


def looks_like_address(value: Any) -> bool:
    """The value has what an address has: markers of places and streets, or a house number and a postcode
    ("北京市朝阳区建国路88号", "12 Baker Street, London"); "随便", "asap" or "马克杯那个" have none."""
    if not isinstance(value, str) or not value.strip():
        return False
    t = normalise(value, case="lower", simplify="never").strip()
    if _CJK_CHAR.search(t):
        markers = set(_ZH_MARKER.findall(_ZH_NOT_MARKER.sub(" ", t)))
        if len(markers) + bool(re.search(r"\d", t)) >= 2:
            return True
    words = re.findall(r"[a-z]{2,}", t)
    digit = bool(re.search(r"\d", t))
    return bool(_EN_STREET.search(t) or (digit and _EN_PLACE.search(t)) or _HOUSE.search(t)
                or (words and _POSTCODE.search(t)))


#: a slot's ``validate: {format: NAME}``: what its value looks like beyond a JSON schema
FORMATS: dict[str, Callable[[Any], bool]] = {"address": looks_like_address}


# "both", "all of them", "refund every one", "两个都退", "都要", "所有订单": every one of several options, said
# where one is asked for (with is_whole: "全退", "refund all of them")
_EVERY = re.compile(r"\bboth\b|\b(?:all|each|every\s*one)\s+of\s+(?:them|these|those|my\s+orders|the\s+orders)\b"
                    r"|\ball\s+(?:the|my)\s+(?:orders|items|ones)\b|\b(?:every|each)\s+(?:one|order|item)\b"
                    r"|\ball\s+(?:two|three|four|\d)\b|(?:两|俩|二|三|几)(?:个|单|笔|件)?(?:订单)?都|都(?:要|退|取消|办|改|开)"
                    r"|全都|所有(?:的)?(?:订单|的)|每(?:一)?(?:个|单)", re.I)


def means_every(text: str) -> bool:
    """A short reply that takes every option offered ("全退", "refund both", "all of them", "两个都要"), never a
    question: where one option is asked for, the step says it takes one at a time."""
    t = norm(text)
    if not t or is_question(text) or read_form(text) == "question":
        return False
    if len(re.findall(r"[a-z0-9']+", t)) > 8 or len(_CJK_CHAR.findall(t)) > 12:
        return False
    return is_whole(text) or bool(_EVERY.search(t))
