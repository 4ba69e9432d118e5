"""Digit runs: phones (libphonenumber's metadata for CN and the deployment's regions), bank cards, resident
ids, US social security and UK NHS numbers; read in linear time with capped work per call."""

from __future__ import annotations

import re
from typing import Any
from collections.abc import Iterable
from functools import lru_cache

from text.personal.common import _CARD_BEFORE, _FILLER, _ID_BEFORE, WORK, _before, _business

_regions: tuple[str, ...] = ("CN",)


def configure(regions: Iterable[str] = ()) -> None:
    """Phone regions besides CN (the deployment's countries, ISO 3166 alpha-2)."""
    global _regions
    extra = [r.strip().upper() for r in regions if r and r.strip()]
    _regions = tuple(dict.fromkeys(["CN", *extra]))
    _phone_cached.cache_clear()


def regions() -> tuple[str, ...]:
    return _regions


# -------------------------------------------------------------------------------- numbers

_SEP = r"[ ._\-·()]"
# A digit run with separators, as a whole token: never a piece of a uuid, a code (ord-2024...), a word.
_DIGITS = re.compile(rf"(?<![a-z0-9_#/.+\-&])(?:\+|\(\+?)?\d(?:{_SEP}{{0,3}}\d)*(?:{_SEP}{{0,2}}x)?"
                     r"(?![a-z0-9_])(?![.\-/][a-z0-9])")
_ID_RE = re.compile(r"[1-9]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dx]")
_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CN_MOBILE = re.compile(r"(?:\+?86|0086)?1[3-9]\d{9}")
# phone shapes written out with separators (555-123-4567, (010) 6552-9988, 123-4567)
_PHONE_SHAPE = re.compile(r"\(?\d{2,4}\)?[ \-.]\d{3,4}[ \-.]?\d{4}|\d{3}[\-.]\d{4}")


# Other national ids, as numbers: a US social security number written 123-45-6789 (or bare after "SSN"),
# a UK NHS number after "NHS" (10 digits, mod-11 check digit: bare 10-digit runs are phone numbers)
_SSN_SHAPE = re.compile(r"\d{3}([ \-])\d{2}\1\d{4}")
_SSN_BEFORE = re.compile(rf"(?:ssn|social\s*security(?:\s*(?:number|no))?|社会安全号|社安号){_FILLER}$")
_NHS_BEFORE = re.compile(rf"nhs{_FILLER}$")
# UK national insurance number (AB 12 34 56 C) after its name: letters and digits a product code may share
_NINO = re.compile(r"(?<![a-z0-9])(?!bg|gb|nk|kn|tn|nt|zz)[a-ceghj-pr-tw-z][a-ceghj-npr-tw-z] ?\d{2} ?\d{2} ?\d{2} ?[a-d]"
                   r"(?![a-z0-9])")
_NINO_BEFORE = re.compile(rf"(?:insurance|nino|ni)(?:\s*number)?{_FILLER}$")


def ssn_ok(digits: str) -> bool:
    """The Social Security Administration never issues area 000, 666 or 9xx, group 00 or serial 0000."""
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def nhs_ok(digits: str) -> bool:
    total = sum(int(d) * w for d, w in zip(digits[:9], range(10, 1, -1)))
    check = 11 - total % 11
    return check != 10 and (check % 11) == int(digits[9])


def id_checksum_ok(value: str) -> bool:
    body, check = value[:17], value[17].upper()
    total = sum(int(d) * w for d, w in zip(body, _ID_WEIGHTS))
    return "10X98765432"[total % 11] == check


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


@lru_cache(maxsize=4096)
def _phone_cached(compact: str) -> bool:
    import phonenumbers

    try:
        if compact.startswith("+") or compact.startswith("00"):
            num = phonenumbers.parse("+" + compact.lstrip("+")[2 if compact.startswith("00") else 0:], None)
            return phonenumbers.is_valid_number(num) or (
                phonenumbers.is_possible_number(num) and len(str(num.national_number)) >= 8)
        for region in _regions:
            num = phonenumbers.parse(compact, region)
            if not phonenumbers.is_valid_number(num):
                continue
            if region == "CN":
                # bare 10-digit runs parse as fixed lines; a customer writes those with the trunk 0
                kind = phonenumbers.number_type(num)
                if kind in (phonenumbers.PhoneNumberType.MOBILE,
                            phonenumbers.PhoneNumberType.FIXED_LINE_OR_MOBILE) and compact.startswith("1"):
                    return True
                if compact.startswith("0") or compact[:3] in ("400", "800", "950"):
                    return True
                continue
            return True
    except phonenumbers.NumberParseException:
        return False
    return False


def _classify(compact: str, raw: str, before: str, lookups: list[int]) -> str | None:
    """The label of one digit run (compact: digits, a leading + and a trailing x kept), or None.

    ``lookups``: the numbering-plan lookups this call may still make; with none left a 7-16 digit run is
    taken for a phone (masked: only a flood of digit runs gets there)."""
    digits = compact.lstrip("+")
    if digits.endswith("x"):
        return "id" if len(digits) == 18 and _ID_RE.fullmatch(digits) else None
    n = len(digits)
    if n == 18 and _ID_RE.fullmatch(digits):
        return "id"
    if n == 9 and (_SSN_SHAPE.fullmatch(raw) or _SSN_BEFORE.search(before)) and ssn_ok(digits):
        return "id"
    if n == 10 and _NHS_BEFORE.search(before) and nhs_ok(digits):
        return "id"
    if _CN_MOBILE.fullmatch(compact) or ((n in (11, 13, 15)) and _CN_MOBILE.fullmatch(digits)):
        return "phone"
    if 13 <= n <= 19 and (luhn_ok(digits) or (n >= 15 and _CARD_BEFORE.search(before))):
        return "card"
    if n == 15 and _ID_BEFORE.search(before):      # first-generation 15-digit resident id
        return "id"
    if 7 <= n <= 15 and not compact.startswith("+") and _single_decimal(raw):
        return None
    if 7 <= n <= 16:
        if lookups[0] <= 0:
            return "phone"
        lookups[0] -= 1
        WORK["lookups"] += 1
        if _phone_cached(compact):
            return "phone"
    if 7 <= n <= 12 and _PHONE_SHAPE.fullmatch(raw.strip()) and not _is_date(digits, raw):
        return "phone"
    return None


def _single_decimal(raw: str) -> bool:
    """"43.572844", "0.12345678": a decimal number, not a phone written with dots."""
    return raw.count(".") == 1 and not re.search(r"[ _\-·()]", raw)


def _is_date(digits: str, raw: str) -> bool:
    return bool(re.fullmatch(r"(?:19|20)\d\d[\-./](?:0?[1-9]|1[0-2])[\-./](?:0?[1-9]|[12]\d|3[01])", raw))


_GROUP = re.compile(r"\+?\d+x?|x")
_MAX_DIGITS = 19            # the longest value (a card); no candidate window holds more digits
_PHONE_LOOKUPS = 256        # numbering-plan lookups per call; beyond it a 7-16 digit window counts as a phone
_CANDIDATES = 2048          # windows read per call (a 200-character message reads < 100); beyond, masked



def _number_spans(v: str, out: list[tuple[str, int, int]]) -> None:
    """Digit runs -> phone / card / id spans, greedy from the left, the longest window first.

    Linear: a window holds at most 19 digits, so from each group at most ~20 windows are tried (each group
    holds a digit), and the windows read and numbering-plan lookups per call are capped
    (:data:`_CANDIDATES`, :data:`_PHONE_LOOKUPS`): a text past them is a flood of digits, masked unread.
    """
    lookups, budget = [_PHONE_LOOKUPS], [_CANDIDATES]
    for m in _DIGITS.finditer(v):
        raw = m.group(0)
        groups = [(g.start() + m.start(), g.end() + m.start(), g.group(0)) for g in _GROUP.finditer(raw)]
        size = [len(g[2]) for g in groups]
        if sum(size) < 7:
            continue
        ndig = [len(g[2].strip("+x")) for g in groups]
        dig = [0]               # digits before group k: dig[j] - dig[i] is the window's digit count
        for d in ndig:
            dig.append(dig[-1] + d)
        one_dot = raw.count(".") == 1
        hits: list[list] = []
        i, top = 0, 0
        while i < len(groups):
            top = max(top, i)
            while top < len(groups) and dig[top + 1] - dig[i] <= _MAX_DIGITS:
                top += 1        # groups[i:top] is the longest window with at most 19 digits
            hit: list[Any] | None = None      # [label, first group, end group]
            s0 = groups[i][0]
            before = _before(v, s0)
            for j in range(top, i, -1):
                nd = dig[j] - dig[i]
                if nd < 7:
                    break
                if budget[0] <= 0:
                    hit = ["phone", i, top]     # out of budget: the longest window is masked, unread
                    break
                budget[0] -= 1
                WORK["candidates"] += 1
                compact = "".join(g[2] for g in groups[i:j])
                if "x" in compact[:-1] or (i > 0 and compact.startswith("+")):
                    continue
                if i > 0 and v[s0 - 1] == "." and v[s0 - 2:s0 - 1].isdigit() and j == len(groups) and one_dot:
                    continue    # the fraction of a decimal number ("0.02596177"), never a phone
                s, e = groups[i][0], groups[j - 1][1]
                label = _classify(compact, v[s:e], before, lookups)
                if label:
                    hit = [label, i, j]
                    break
            if hit:
                hits.append(hit)
                i = hit[2]
            else:
                i += 1
        # a few digits left over right next to a value belong to it: mask them too ("[card] 9596" never)
        lens = [0]
        for n in size:
            lens.append(lens[-1] + n)
        for k, (label, i, j) in enumerate(hits):
            lo = hits[k - 1][2] if k else 0
            if 0 < i - lo and lens[i] - lens[lo] <= 4:
                hits[k][1] = i = lo
            hi = hits[k + 1][1] if k + 1 < len(hits) else len(groups)
            if 0 < hi - j and lens[hi] - lens[j] <= 4:
                hits[k][2] = hi
        for label, i, j in hits:
            s, e = groups[i][0], groups[j - 1][1]
            if i == 0 and raw.startswith("("):
                s = m.start()
            if e < m.end() and v[e] == ")":
                e += 1
            if not _business(v, s, e):
                out.append((label, s, e))
