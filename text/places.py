"""Places a customer may name as a destination: countries and regions, in English and Chinese, and the words that
say "abroad" without naming one ("internationally", "overseas", 海外, 国外).

A shop's articles name the few places they treat apart (Hong Kong, Xinjiang) and speak of every other one as
"other countries or regions": the name of a country the articles never mention is what such a sentence is about,
not a gap in the knowledge base, as the name of a thing it sells is an "item". Matching is on normalised text
(:func:`text.normalise`, lower case): whole words in English, substrings in Chinese.
"""

from __future__ import annotations

import re
from functools import lru_cache

from text.normalise import normalise

# countries and regions, as customers write them (several spellings each); a short word that is also an English
# word ("us", "chad", "china" in "china post") is only a place after "to / in / from / the" (see _AFTER_PREPOSITION)
_COUNTRIES_EN = (
    "afghanistan albania algeria andorra angola argentina armenia australia austria azerbaijan bahamas bahrain "
    "bangladesh barbados belarus belgium belize benin bhutan bolivia bosnia botswana brazil brunei bulgaria "
    "burkina faso burundi cambodia cameroon canada chile colombia congo costa rica croatia cuba cyprus czechia "
    "czech republic denmark djibouti dominican republic ecuador egypt el salvador estonia eswatini ethiopia fiji "
    "finland france gabon gambia georgia germany ghana greece greenland guatemala guinea guyana haiti honduras "
    "hungary iceland india indonesia iran iraq ireland israel italy ivory coast jamaica japan jordan kazakhstan "
    "kenya korea south korea north korea kosovo kuwait kyrgyzstan laos latvia lebanon lesotho liberia libya "
    "liechtenstein lithuania luxembourg madagascar malawi malaysia maldives mali malta mauritius mexico moldova "
    "monaco mongolia montenegro morocco mozambique myanmar burma namibia nepal netherlands holland new zealand "
    "nicaragua niger nigeria north macedonia norway oman pakistan palestine panama papua new guinea paraguay peru "
    "philippines poland portugal puerto rico qatar romania russia rwanda saudi arabia senegal serbia seychelles "
    "sierra leone singapore slovakia slovenia somalia south africa spain sri lanka sudan suriname sweden "
    "switzerland syria taiwan tajikistan tanzania thailand togo tonga trinidad tunisia turkey turkmenistan uganda "
    "ukraine united arab emirates uae united kingdom britain great britain england scotland wales "
    "united states united states of america america usa u.s. u.s.a. uruguay uzbekistan vanuatu vatican venezuela "
    "vietnam viet nam yemen zambia zimbabwe europe asia africa australia oceania south america north america "
    "latin america middle east hong kong hongkong macau macao"
)
_MULTI_EN = ("burkina faso", "costa rica", "czech republic", "dominican republic", "el salvador", "ivory coast",
             "south korea", "north korea", "north macedonia", "new zealand", "papua new guinea", "puerto rico",
             "saudi arabia", "sierra leone", "south africa", "sri lanka", "united arab emirates",
             "united kingdom", "great britain", "united states of america", "united states", "viet nam",
             "south america", "north america", "latin america", "middle east", "hong kong")
# short names that are also common words or abbreviations: a place only where a destination is said
_AMBIGUOUS_EN = ("us", "uk", "eu", "china", "chad", "jersey", "guinea", "georgia", "jordan", "turkey")
_AFTER_PREPOSITION = r"(?:to|in|into|from|for|within|across|throughout|the)\s+(?:the\s+)?"

_COUNTRIES_ZH = (
    "美国 加拿大 墨西哥 巴西 阿根廷 智利 秘鲁 哥伦比亚 英国 法国 德国 意大利 西班牙 葡萄牙 荷兰 比利时 瑞士 瑞典 挪威 丹麦 "
    "芬兰 冰岛 爱尔兰 奥地利 波兰 捷克 匈牙利 希腊 土耳其 俄罗斯 乌克兰 日本 韩国 朝鲜 蒙古 越南 泰国 老挝 柬埔寨 缅甸 "
    "马来西亚 新加坡 印度尼西亚 印尼 菲律宾 文莱 印度 巴基斯坦 孟加拉 尼泊尔 斯里兰卡 哈萨克斯坦 伊朗 伊拉克 以色列 沙特 "
    "阿联酋 迪拜 卡塔尔 科威特 埃及 南非 尼日利亚 肯尼亚 埃塞俄比亚 摩洛哥 澳大利亚 澳洲 新西兰 欧洲 美洲 非洲 亚洲 "
    "北美 南美 东南亚 中东 台湾 香港 澳门"
)
# "abroad" without a place: said for every country but the shop's own
ABROAD_EN = ("internationally", "international", "overseas", "abroad", "worldwide", "foreign countries",
             "foreign country", "another country", "other countries", "outside china", "outside of china",
             "outside mainland china", "out of the country", "all over the world")
ABROAD_ZH = ("海外", "国外", "境外", "外国", "出国", "国际", "全球", "世界各地", "其他国家")
# what an article says of every place it does not name: "We do not ship to other countries or regions"
_ELSEWHERE = re.compile(r"\bother\s+(?:countries|regions|territories|destinations)\b|\banother\s+country\b|"
                        r"\bany\s+other\s+(?:country|region)\b|其[他它]国家|别的国家|其余国家")


@lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    words = set(_MULTI_EN)
    rest = _COUNTRIES_EN
    for multi in _MULTI_EN:
        rest = rest.replace(multi, " ")
    words |= {w for w in rest.split() if w}
    names = sorted(words, key=len, reverse=True)
    plain = re.compile(r"(?<![\w.])(?:" + "|".join(re.escape(n) for n in names) + r")(?![\w])")
    short = re.compile(rf"(?<![\w.]){_AFTER_PREPOSITION}(" + "|".join(_AMBIGUOUS_EN) + r")(?![\w.])")
    zh = sorted(set(_COUNTRIES_ZH.split()), key=len, reverse=True)
    chinese = re.compile("|".join(re.escape(n) for n in zh))
    return plain, short, chinese


def places_in(text: str | None) -> list[str]:
    """The country and region names in ``text`` (normalised, lower-case), in order, each once."""
    t = normalise(text or "")
    if not t:
        return []
    plain, short, chinese = _patterns()
    found = [m.group(0) for m in plain.finditer(t)] + [m.group(1) for m in short.finditer(t)]
    found += [m.group(0) for m in chinese.finditer(t)]
    return list(dict.fromkeys(found))


def abroad_in(text: str | None) -> list[str]:
    """The words of ``text`` that say "abroad" without naming a place ("overseas", "internationally", 海外)."""
    t = normalise(text or "")
    found = [w for w in ABROAD_EN if re.search(rf"(?<![\w]){re.escape(w)}(?![\w])", t)]
    found += [w for w in ABROAD_ZH if w in t]
    return found


def elsewhere_in(text: str | None) -> str:
    """How ``text`` speaks of the places it does not name ("other countries", "其他国家"), or ""."""
    m = _ELSEWHERE.search(normalise(text or ""))
    return m.group(0) if m else ""


# a delivery verb and then a destination: "ship to Canada", "deliver overseas", "send parcels to the US",
# "寄到美国", "发货到日本", "配送到海外" (the object in between is a thing sent, not the customer's own order)
_SEND_EN = r"(?:ship|ships|shipped|shipping|deliver|delivers|delivered|delivery|deliveries|send|sends|sent|post|mail)"
_SEND_ZH = r"(?:配送|发货|邮寄|寄送|派送|运送|送货|发快递)"


def asks_destination(text: str | None) -> bool:
    """Whether ``text`` asks about sending something to a place (a country or region, or abroad in a word), not
    to the customer's own address: "can you deliver to the US?", "do you ship internationally", "能寄到美国吗"."""
    t = normalise(text or "")
    if not t:
        return False
    places = places_in(t)
    abroad = abroad_in(t)
    if not places and not abroad:
        return False
    targets = "|".join(re.escape(p) for p in [*places, *abroad])
    en = re.search(rf"\b{_SEND_EN}\b(?:\s+(?!my\b|our\b)[\w'-]+){{0,3}}?\s+(?:(?:to|into|in|within)\s+(?:the\s+)?)?"
                   rf"(?:{targets})(?![\w])", t)
    zh = re.search(rf"(?:{_SEND_ZH}|[寄发送运])\s*(?:到|往|去|至)\s*(?:{targets})|(?:{_SEND_ZH}|寄)\s*(?:{targets})"
                   rf"|(?:{targets}).{{0,4}}(?:{_SEND_ZH}|[能可]以?[寄发送运])", t)
    return bool(en or zh)
