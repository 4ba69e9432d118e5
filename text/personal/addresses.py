"""Passports, Chinese addresses (province to the last unit) and English street addresses."""

from __future__ import annotations

import re

from text.personal.common import _FILLER, _before, _business

# -------------------------------------------------------------------------------- passports, addresses

# Chinese passports: E/G + 8 digits, E + letter + 7 digits, diplomatic/service/public-affairs DE/SE/PE + 7
_PASSPORT = re.compile(r"(?<![a-z0-9_#/.+\-&])(?:[eg]\d{8}|e[a-hj-np-z]\d{7}|[dsp]e\d{7}|k\d{8})"
                       r"(?![a-z0-9_])(?![.\-/][a-z0-9])")
_PASSPORT_CTX = re.compile(rf"(?:passport|护照){_FILLER}([a-z]{{0,2}}\d{{6,9}})(?![a-z0-9])")

_NAME = r"[\u4e00-\u9fff]"
_NUM_CN = r"(?:\d+|[一二三四五六七八九十百零〇]+)"
# province / city / district (any may be missing), then a road, lane or street with its number
# after the road and its number: the building (its name may start in Latin letters: SOHO现代城, or end in
# no suffix when a unit follows: 国贸 A座), its units (A座, 3号楼, 2单元, 12楼, 501室) and a last bare
# number (A座 1203), spaces allowed between them; a bare number right after the road number only when
# attached (88号1203: "88号 12345678" is an address and an order number). Every piece is bounded.
_UNIT_NAMED = r"(?:\d{1,5}|[a-z]\d{0,4})(?:号楼|栋|幢|座|单元|楼|层|室|号)"
_UNIT_BARE = r"\d{1,5}(?:-\d{1,5})?(?!\d)"
_BUILDING = (rf"(?:[a-z]{{1,12}} ?)?(?:{_NAME}{{0,8}}(?:小区|大厦|公寓|花园|苑|广场|中心|城|园|大楼|村|院|府|国际|写字楼|商务楼)"
             rf"|{_NAME}{{1,8}}(?= ?{_UNIT_NAMED}))")
_ADDRESS = re.compile(
    rf"(?:{_NAME}{{2,3}}(?:省|自治区))?(?:{_NAME}{{2,4}}市)?(?:{_NAME}{{2,4}}(?:区|县|旗))?(?:{_NAME}{{2,4}}(?:镇|乡|街道))?"
    rf"(?:{_NAME}|\d){{1,10}}(?:大道|路|街|巷|弄|胡同|道|里)(?:{_NAME}{{1,3}}段)?{_NUM_CN}(?:号|弄|巷)院?"
    rf"(?:(?: ?{_BUILDING})?(?: ?{_UNIT_NAMED}){{1,4}}(?: ?{_UNIT_BARE})?| ?{_BUILDING}|{_UNIT_BARE})?"
    rf"|{_NAME}{{2,8}}(?:小区|公寓|花园|苑)\d{{1,5}}(?:号楼|栋|幢|座)(?:\d{{1,5}}(?:单元|楼|层|室|号|-)){{0,4}}\d{{0,5}}")

# English street addresses: a house number, one to four words of street name and a street type, then an
# optional unit and an optional "City, ST 94043" / "London SW1A 2AA". A careful pattern rather than a
# library: usaddress labels the parts of a string already known to be an address (it finds none in free
# text) and pyap (unmaintained since 2020) uses nested unbounded patterns this detector cannot bound.
_EN_STREET = (r"street|st|avenue|ave|road|rd|boulevard|blvd|parkway|pkwy|lane|ln|drive|dr|court|ct|way|place|pl|"
              r"terrace|ter|circle|cir|highway|hwy|square|sq|trail|trl|crescent|close|plaza|alley|expressway")
_EN_ADDRESS = re.compile(
    r"(?<![\w.\-/#$€£¥])\d{1,6}[a-z]?"
    r"(?:\s(?:n|s|e|w|ne|nw|se|sw|north|south|east|west)\.?)?"
    rf"((?:\s[a-z][a-z'\-]{{0,20}}\.?){{1,4}}?\s(?:{_EN_STREET})\.?)(?!\w)"
    r"(?:,?\s(?:apt|apartment|suite|ste|unit|floor|fl|room|rm|#)\.?\s?#?[a-z0-9\-]{1,6}(?!\w))?"
    r"(,\s?[a-z][a-z.'\-]{0,20}(?:\s[a-z][a-z.'\-]{0,20}){0,3},?\s(?:[a-z]{2}\.?\s)?"
    r"(?:\d{5}(?:-\d{4})?|[a-z]{1,2}\d[a-z\d]?\s?\d[a-z]{2})(?!\w))?")
_EN_STREET_ANY = re.compile(rf"\b(?:{_EN_STREET})\b")
_EN_ADDRESS_CUE = re.compile(r"(?:address(?:\s+is)?|ship(?:ping)?\s+to|deliver(?:y)?\s+to|send\s+(?:it\s+)?to|live\s+(?:at|on)|"
                             r"located\s+at|mail\s+(?:it\s+)?to|地址|寄到|送到|住在)\W{0,3}$")
_ADDR_LEAD = re.compile(r"^(?:[我你他她它的在是到寄住送往址从和及或于为请帮地址收货联系]|住在|寄到|送到|地址|收货|位于)+")


def _en_address_spans(v: str, original: str, span, out: list[tuple[str, int, int]]) -> None:
    """An English street address counts when it reads as one: a city and postcode follow, an address word
    comes before, or the street is written with capitals (1600 Amphitheatre Parkway); "3 times on my way"
    is none of these."""
    if not _EN_STREET_ANY.search(v):
        return
    for m in _EN_ADDRESS.finditer(v):
        s, e = m.start(), m.end()
        ok = m.group(2) is not None or _EN_ADDRESS_CUE.search(_before(v, s)) is not None
        if not ok:
            os, oe = span(m.start(1), m.end(1))
            words = original[os:oe].split()
            ok = all(w[:1].isupper() for w in words)
        if ok and not _business(v, s, e):
            out.append(("address", s, e))


def _address_spans(v: str, out: list[tuple[str, int, int]]) -> None:
    if not re.search(r"[路街巷弄道里苑]", v):
        return
    for m in _ADDRESS.finditer(v):
        s = m.start()
        lead = _ADDR_LEAD.match(m.group(0))
        if lead and lead.end() < len(m.group(0)):
            s += lead.end()
        e = m.end()
        while e > s and v[e - 1] == "-":
            e -= 1
        out.append(("address", s, e))
