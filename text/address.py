"""One postal address model and one-line address parsing, in English (US) and Chinese.

The model is ``{line1, line2, district, city, state, zip, country}`` (absent parts are missing keys); a
workflow maps it to a shop's own field names by configuration (``automation/workflows``). English
addresses are labelled by ``usaddress`` (datamade's CRF model of US addresses: it labels the parts of a
string already known to be an address, which is what a customer's answer to "what is the address?" is).
Chinese addresses follow the administrative order (province, city, district, road and number, building
and unit) with suffixes that mark each level, so a bounded pattern reads them; ``cpca``, the library for
this, no longer imports (it needs ``pkg_resources``, gone from current setuptools) and was last released
in 2021.
"""

from __future__ import annotations

import re
from typing import Any

from text.courtesy import without_courtesy

FIELDS = ("line1", "line2", "district", "city", "state", "zip", "country")

US_STATES = {
    "alabama": "AL", "alaska": "AK", "arizona": "AZ", "arkansas": "AR", "california": "CA", "colorado": "CO",
    "connecticut": "CT", "delaware": "DE", "district of columbia": "DC", "florida": "FL", "georgia": "GA",
    "hawaii": "HI", "idaho": "ID", "illinois": "IL", "indiana": "IN", "iowa": "IA", "kansas": "KS",
    "kentucky": "KY", "louisiana": "LA", "maine": "ME", "maryland": "MD", "massachusetts": "MA", "michigan": "MI",
    "minnesota": "MN", "mississippi": "MS", "missouri": "MO", "montana": "MT", "nebraska": "NE", "nevada": "NV",
    "new hampshire": "NH", "new jersey": "NJ", "new mexico": "NM", "new york": "NY", "north carolina": "NC",
    "north dakota": "ND", "ohio": "OH", "oklahoma": "OK", "oregon": "OR", "pennsylvania": "PA",
    "rhode island": "RI", "south carolina": "SC", "south dakota": "SD", "tennessee": "TN", "texas": "TX",
    "utah": "UT", "vermont": "VT", "virginia": "VA", "washington": "WA", "west virginia": "WV",
    "wisconsin": "WI", "wyoming": "WY", "puerto rico": "PR",
}
_CODES = set(US_STATES.values())
_US = {"us", "usa", "u.s.", "u.s.a.", "united states", "united states of america", "america"}

_CJK = re.compile(r"[\u4e00-\u9fff]")
_H = r"[\u4e00-\u9fff]"
_MUNICIPALITY = r"(?:北京|天津|上海|重庆)市?"
_ZH = re.compile(
    rf"^(?P<country>中国|中华人民共和国)?\s*"
    rf"(?P<state>{_MUNICIPALITY}|{_H}{{2,7}}?(?:省|自治区|特别行政区))?\s*"
    rf"(?P<city>{_H}{{2,6}}?(?:市|自治州|地区|盟))?\s*"
    rf"(?P<district>{_H}{{1,5}}?(?:区|县|旗|市))?\s*"
    rf"(?P<line1>(?:{_H}|[A-Za-z0-9]){{1,20}}?(?:大道|路|街|巷|弄|胡同|道|里|村)"
    rf"(?:{_H}{{1,3}}段)?\s*(?:\d+|[一二三四五六七八九十百零]+)\s*(?:号|弄|巷)院?)?\s*"
    rf"(?P<line2>.*?)\s*$")
_ZH_ZIP = re.compile(r"(?:(?:邮编|邮政编码)\s*(?:是|为)?)?\s*[:：]?\s*(?<!\d)(\d{6})(?!\d)")


def is_zh(text: str) -> bool:
    return bool(_CJK.search(text or ""))


def parse(text: str) -> dict[str, str]:
    """The parts of a one-line address (missing parts absent); {} when nothing reads as an address."""
    raw = re.sub(r"\s+", " ", (text or "").strip()).strip(" ,，。.;；")
    if not raw:
        return {}
    return _parse_zh(raw) if is_zh(raw) else _parse_en(raw)


_EN_START = re.compile(r"(?<![\w-])\d{1,6}[A-Za-z]?\s+([A-Za-z]+)")
_FUNCTION_WORDS = {"to", "for", "and", "or", "of", "is", "at", "in", "on", "by", "items", "item", "pieces", "times"}
_ZH_LEAD = re.compile(r"^.*?(?:改成|改为|换成|改到|寄到|送到|发到|地址是|地址为|[:：])\s*")
_ZH_START = re.compile(rf"{_MUNICIPALITY}|{_H}{{2,7}}?(?:省|自治区)|{_H}{{2,6}}?市|{_H}{{1,5}}?(?:区|县)"
                       rf"|{_H}{{1,8}}?(?:大道|路|街)\s*\d")


def find(text: str) -> dict[str, str]:
    """The address within a message ("please send it to 18 Oak Lane, ...", "地址改成北京市朝阳区..."): parsed
    from where an address starts (a house number and a word; after "改成", or a province, city or road)."""
    raw = (text or "").strip()
    if is_zh(raw):
        lead = _ZH_LEAD.match(raw)
        starts = ([lead.end()] if lead else []) + [m.start() for m in _ZH_START.finditer(raw)]
        for at in starts:
            got = parse(raw[at:])
            if "line1" in got or len({"state", "city", "district"} & set(got)) >= 2:
                return got
        return {}
    for m in _EN_START.finditer(raw):
        if m.group(1).lower() not in _FUNCTION_WORDS:
            return parse(raw[m.start():])
    return parse(raw)


# what leads a new address in a request ("... to 12 Baker Street", "the new address is ...", "改成上海市…")
_EN_LEAD = re.compile(r"(?:\bto|\bis|\bbe|\binto|[:：])\s*$", re.I)
_ZH_LEADS = re.compile(r"改成|改为|换成|改到|寄到|送到|发到|地址是|地址为|[:：]")


def span(text: str) -> str | None:
    """The address as said inside a request, from where it starts to the end ("please change the address of the
    hose order to 12 Baker Street, London NW1 6XE" -> "12 Baker Street, London NW1 6XE"; "把地址改成上海市浦东新区世纪
    大道100号吧" -> "上海市浦东新区世纪大道100号"), or None when nothing in it starts an address. Where several could
    start one ("from 12 Baker Street to 21 Oak Road"), the one after "to" / "is" / "改成" is the new one. Whether
    the words are an address at all is the caller's check (a slot's ``format: address``)."""
    raw = (text or "").strip()
    if not raw:
        return None
    if is_zh(raw):
        leads = list(_ZH_LEADS.finditer(raw))
        starts = [m.start() for m in _ZH_START.finditer(raw)]
        at = leads[-1].end() if leads else (starts[0] if starts else None)
    else:
        opened = [m.start() for m in _EN_START.finditer(raw) if m.group(1).lower() not in _FUNCTION_WORDS]
        led = [a for a in opened if _EN_LEAD.search(raw[:a])]
        at = led[-1] if led else (opened[0] if opened else None)
    if at is None:
        return None
    value = without_courtesy(raw[at:]).strip(" ,，")   # "... OR 97201 instead, thanks", "…100号吧，谢谢"
    return value or None


def is_whole(address: dict[str, str]) -> bool:
    """A street line with the place it is in (a zip, a state, a district, or a city written as a name)."""
    city = address.get("city", "")
    return "line1" in address and bool({"zip", "state", "district"} & set(address) or (city and city[:1].isupper())
                                        or is_zh(city))


def _parse_zh(raw: str) -> dict[str, str]:
    zip_ = None
    m = _ZH_ZIP.search(raw)
    if m and (m.group(0).strip().startswith(("邮编", "邮政")) or m.end() == len(raw) or m.start() == 0):
        zip_ = m.group(1)
        raw = (raw[:m.start()] + " " + raw[m.end():]).strip(" ,，")
    m = _ZH.match(raw.replace(",", " ").replace("，", " "))
    out: dict[str, str] = {}
    if m:
        for k in ("country", "state", "city", "district", "line1", "line2"):
            v = (m.group(k) or "").strip()
            if v:
                out[k] = v
        state = out.get("state", "")
        if re.fullmatch(_MUNICIPALITY, state):   # 北京市朝阳区: the municipality is the province and the city
            out["state"] = out.setdefault("city", state if state.endswith("市") else state + "市")
            if not state.endswith("市"):
                out["state"] = state + "市"
        if "line1" not in out and not ({"state", "city", "district"} & set(out)):
            return {"zip": zip_} if zip_ else {}
        if "line1" not in out and out.get("line2"):
            out["line1"] = out.pop("line2")
    if zip_:
        out["zip"] = zip_
    if out.get("country") in ("中华人民共和国",):
        out["country"] = "中国"
    return out


def state_code(value: str) -> str:
    """A US state as its USPS code ("California" -> "CA"); other values as written."""
    v = value.strip().strip(".")
    if v.upper() in _CODES:
        return v.upper()
    return US_STATES.get(v.lower(), v)


def _parse_en(raw: str) -> dict[str, str]:
    import usaddress

    try:
        tagged, _ = usaddress.tag(raw)
        parts: list[tuple[str, str]] = list(tagged.items())
    except usaddress.RepeatedLabelError as exc:   # a label twice (two numbers): join the tokens per label
        joined: dict[str, list[str]] = {}
        for token, label in exc.parsed_string:
            joined.setdefault(label, []).append(token.strip(","))
        parts = [(k, " ".join(v)) for k, v in joined.items()]
    out: dict[str, str] = {}
    line1: list[str] = []
    line2: list[str] = []
    for label, value in parts:
        value = value.strip(" ,")
        if not value:
            continue
        if label.startswith(("AddressNumber", "StreetName", "USPSBox", "Landmark", "IntersectionSeparator")):
            line1.append(value)
        elif label.startswith(("Occupancy", "Subaddress", "BuildingName")):
            line2.append(value)
        elif label == "PlaceName":
            out["city"] = value
        elif label == "StateName":
            out["state"] = state_code(value)
        elif label == "ZipCode":
            out["zip"] = value
        elif label == "ZipPlus4" and "zip" in out:
            out["zip"] += "-" + value
        elif label == "CountryName":
            out["country"] = "US" if value.lower() in _US else value
    if line1:
        out["line1"] = " ".join(line1)
    if line2:
        out["line2"] = " ".join(line2)
    if "line1" in out and not re.search(r"\d", out["line1"]) and not ({"city", "zip"} & set(out)):
        return {}   # words with no number, city or zip: not an address
    if "city" in out and "state" not in out and "zip" not in out and "line1" not in out:
        return {}   # a bare word taken for a place: not enough to be an address
    return out


def one_line(address: dict[str, Any], lang: str = "en") -> str:
    """The model as one line in the customer's language's order."""
    a = {k: str(v) for k, v in (address or {}).items() if v not in (None, "")}
    if lang == "zh" or is_zh(" ".join(a.values())):
        city = a.get("city") if a.get("city") != a.get("state") else None
        return "".join(x for x in (a.get("country") if a.get("country") not in ("中国", "CN") else None,
                                   a.get("state"), city, a.get("district"), a.get("line1"), a.get("line2"))
                       if x) + (f"（邮编{a['zip']}）" if a.get("zip") else "")
    tail = " ".join(x for x in (a.get("state"), a.get("zip")) if x)
    return ", ".join(x for x in (a.get("line1"), a.get("line2"), a.get("district"), a.get("city"), tail,
                                 a.get("country")) if x)
