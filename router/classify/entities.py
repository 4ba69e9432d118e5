"""Obvious entities in a customer message: order numbers and amounts with their currency (zh and en).

Deterministic regular expressions compiled once: the escalation policy reads the refund amount
("refund > 500") and the handoff context carries the order number, so these must be exact and
cheap rather than clever. Amounts are returned in the currency written; nothing is converted.
"""

from __future__ import annotations

import re
from typing import Any

from text.normalise import normalise as _normalise

# --- amounts -----------------------------------------------------------------------------------------------

# symbol / code / word -> ISO 4217. ¥ on its own is read as CNY (the market this gateway serves first).
_PREFIX = {
    "hk$": "HKD", "us$": "USD", "a$": "AUD", "c$": "CAD", "s$": "SGD", "nt$": "TWD",
    "¥": "CNY", "$": "USD", "€": "EUR", "£": "GBP", "₩": "KRW", "₹": "INR",
    "rmb": "CNY", "cny": "CNY", "usd": "USD", "eur": "EUR", "gbp": "GBP", "hkd": "HKD", "jpy": "JPY",
    "人民币": "CNY", "美元": "USD", "港币": "HKD", "港元": "HKD", "欧元": "EUR", "英镑": "GBP", "日元": "JPY",
}
_SUFFIX = {
    "元": "CNY", "块钱": "CNY", "块": "CNY", "圆": "CNY", "元人民币": "CNY", "人民币": "CNY",
    "美元": "USD", "美金": "USD", "刀": "USD", "港币": "HKD", "港元": "HKD", "欧元": "EUR", "英镑": "GBP",
    "日元": "JPY", "円": "JPY",
    "rmb": "CNY", "cny": "CNY", "yuan": "CNY", "kuai": "CNY",
    "usd": "USD", "dollars": "USD", "dollar": "USD", "bucks": "USD", "buck": "USD",
    "eur": "EUR", "euros": "EUR", "euro": "EUR", "gbp": "GBP", "pounds": "GBP", "pound": "GBP",
    "hkd": "HKD", "jpy": "JPY", "yen": "JPY",
}

_CN_DIGITS = "零〇一二两三四五六七八九十百千万亿壹贰叁肆伍陆柒捌玖拾佰仟"
_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_NUM_CN = rf"(?:{_NUM}(?:\s?[万千百kK])?|[{_CN_DIGITS}]+(?:点[{_CN_DIGITS}]+)?)"


def _alt(words) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_ASCII_WORD = r"(?<![A-Za-z])"
_AMOUNT_PREFIX = re.compile(
    rf"(?P<cur>{_alt(k for k in _PREFIX if not k.isascii() or not k.isalpha())}"
    rf"|{_ASCII_WORD}(?:{_alt(k for k in _PREFIX if k.isascii() and k.isalpha())})(?![A-Za-z]))"
    rf"\s?(?P<num>{_NUM}(?:\s?[万千kK](?![A-Za-z]))?)",
    re.IGNORECASE,
)
_AMOUNT_SUFFIX = re.compile(
    rf"(?<![\d.,])(?P<num>{_NUM_CN})\s?"
    rf"(?P<cur>{_alt(k for k in _SUFFIX if not k.isascii())}"
    rf"|(?:{_alt(k for k in _SUFFIX if k.isascii())})(?![A-Za-z]))",
    re.IGNORECASE,
)

# --- order numbers -----------------------------------------------------------------------------------------

_ORDER = re.compile(
    r"(?:订单编号|订单号码|订单号|订单|单号|运单号|order\s*(?:number|no\.?|id|num|#)?|ord\.?)"
    r"\s*(?:是|为|:|：|#|＃|is|was|number|no\.?)?\s*[:：#]?\s*"
    r"(?P<id>(?=[A-Za-z0-9-]*\d)[A-Za-z0-9][A-Za-z0-9-]{5,31})(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_HASH_ID = re.compile(r"[#＃](?P<id>(?=[A-Za-z0-9-]*\d)[A-Za-z0-9][A-Za-z0-9-]{5,31})(?![A-Za-z0-9])")
# a bare id of a short letter prefix and a long run of digits (NW20261015083142): the answer to
# "what is your order number?" usually comes without the words "order number"
_BARE_ID = re.compile(r"(?<![A-Za-z0-9])(?P<id>[A-Za-z]{2,4}\d{8,24})(?![A-Za-z0-9])")
# a bare run of digits in a message about an order or its delivery ("帮我查一下100241的物流", "has 100241 shipped"):
# not a price (no currency next to it), a decimal, nor a Chinese mobile number
_BARE_DIGITS = re.compile(r"(?<![A-Za-z0-9.,¥￥$€£])(?P<id>\d{6,12})(?![A-Za-z0-9.,%]|\s*(?:元|块|rmb|cny|usd|yuan|dollars?)\b|元|块)",
                          re.IGNORECASE)
_ORDER_TALK = re.compile(r"物流|快递|包裹|发货|到哪|单号|签收|退款|退货|发票|取消|地址|查一下|查询"
                         r"|\b(?:order|package|parcel|delivery|deliver(?:ed)?|ship(?:ped|ping|ment)?|track(?:ing)?|refund"
                         r"|return|invoice|cancel|address)\b", re.IGNORECASE)
_MOBILE = re.compile(r"1[3-9]\d{9}")


def _cn_number(text: str) -> float | None:
    """Chinese numerals (三百五十, 一千二, 两万, 壹佰) to a number; None when it is not one."""
    digits = {"零": 0, "〇": 0, "一": 1, "壹": 1, "二": 2, "两": 2, "贰": 2, "三": 3, "叁": 3, "四": 4, "肆": 4,
              "五": 5, "伍": 5, "六": 6, "陆": 6, "七": 7, "柒": 7, "八": 8, "捌": 8, "九": 9, "玖": 9}
    units = {"十": 10, "拾": 10, "百": 100, "佰": 100, "千": 1000, "仟": 1000}
    big = {"万": 10_000, "亿": 100_000_000}
    if "点" in text:
        whole, _, frac = text.partition("点")
        w = _cn_number(whole) if whole else 0.0
        if w is None or not frac or any(c not in digits for c in frac):
            return None
        return w + float("0." + "".join(str(digits[c]) for c in frac))
    total, section, number, last_unit = 0, 0, None, None
    for ch in text:
        if ch in digits:
            number = digits[ch] if number is None else number * 10 + digits[ch]
        elif ch in units:
            section += (1 if number is None else number) * units[ch]
            number, last_unit = None, units[ch]
        elif ch in big:
            section += number or 0
            total += (section or 1) * big[ch]
            section, number, last_unit = 0, None, big[ch]
        else:
            return None
    if number is not None:
        # 一千二 means 1200: a trailing digit after a unit scales to the next lower unit
        if last_unit and last_unit >= 100 and number < 10:
            number *= last_unit // 10
        section += number
    return float(total + section)


def _to_number(raw: str) -> float | None:
    s = raw.replace(" ", "")
    mult = 1.0
    if s and s[-1] in "万":
        mult, s = 10_000.0, s[:-1]
    elif s and s[-1] in "千kK":
        mult, s = 1000.0, s[:-1]
    elif s and s[-1] == "百" and re.fullmatch(_NUM + "百", s):
        mult, s = 100.0, s[:-1]
    if re.fullmatch(_NUM, s):
        return float(s.replace(",", "")) * mult
    value = _cn_number(s)
    return value * mult if value is not None else None


def normalise(text: str) -> str:
    """NFKC folds full-width digits and symbols (６００元, ＄5) into the forms the patterns expect."""
    return _normalise(text, case="keep", simplify="never", spaces="keep").replace("￥", "¥")


def extract_amounts(text: str) -> list[dict[str, Any]]:
    t = normalise(text)
    found: list[tuple[int, int, dict]] = []
    for pattern, table in ((_AMOUNT_PREFIX, _PREFIX), (_AMOUNT_SUFFIX, _SUFFIX)):
        for m in pattern.finditer(t):
            if any(m.start() < e and s < m.end() for s, e, _ in found):
                continue  # "¥600元" is one amount, not two
            value = _to_number(m.group("num"))
            if value is None:
                continue
            found.append((m.start(), m.end(), {"value": value, "currency": table[m.group("cur").lower()],
                                               "text": m.group(0).strip()}))
    return [a for _, _, a in sorted(found, key=lambda x: x[0])]


def extract_order_numbers(text: str) -> list[str]:
    t = normalise(text)
    out: list[str] = []
    for pattern in (_ORDER, _HASH_ID, _BARE_ID):
        for m in pattern.finditer(t):
            oid = m.group("id").upper()
            if oid not in out:
                out.append(oid)
    if not out and _ORDER_TALK.search(t):
        for m in _BARE_DIGITS.finditer(t):
            oid = m.group("id")
            if not _MOBILE.fullmatch(oid) and oid not in out:
                out.append(oid)
    return out


def extract_entities(text: str) -> dict[str, Any]:
    """``{"order_numbers": [...], "amounts": [{"value", "currency", "text"}]}`` (always both keys)."""
    return {"order_numbers": extract_order_numbers(text), "amounts": extract_amounts(text)}
