"""Personal data in free text: one detector and the masks every sink uses.

What is personal (masked): phone numbers, bank cards, resident ids, passports, Chinese street
addresses, e-mail addresses (also on Chinese domains), IP addresses. What is business (kept, the
agents and the replay need it): numbers right after order / 订单 / 单号 / invoice / 发票 / tracking /
运单 / a carrier prefix, member cards, amounts, and the values the classifier extracted (``allow``).

Built on maintained libraries where they exist, with our own recognizers for what they lack:

- ``phonenumbers`` (Google's libphonenumber metadata) decides whether a digit run is a phone number
  of CN or of the deployment's regions (:func:`configure`); the metadata knows every numbering plan,
  which no hand-kept regex does.
- Presidio's pattern recognizers (``presidio-analyzer``) find ASCII e-mails and IPv4/IPv6 addresses
  (validated with ``ipaddress``); the e-mail domain is checked against the public-suffix list through
  ``tldextract`` configured offline (its bundled snapshot; it never downloads). The recognizers are
  called directly rather than through Presidio's ``AnalyzerEngine``: the engine's tokenisation
  (spaCy blank pipelines) and context pass cost ~0.5 ms on a 200-character message for two
  recognizers alone, half the whole budget, and add nothing a pattern needs
  (``benchmarks/redaction.py --presidio-engine`` prints both figures).
- Our own: resident id (region, birth date, ISO 7064 check digit), bank cards (Luhn anywhere; in a
  card context even when Luhn fails, as customers mistype), Chinese passports, Chinese addresses
  (province / city / district / road / number), e-mails with Chinese local parts or domains,
  phone shapes libphonenumber alone does not read (``.``/``_``/ideographic spaces, one digit at a time).

The text is normalised first (:func:`text.normalise.normalise_mapped`: NFKC, full width -> half width,
case folding, traditional -> simplified) and every span is mapped back to the original, so a mask always
covers the whole value as the customer typed it.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from text.normalise import CJK, normalise_mapped

LABELS = ("phone", "card", "id", "email", "address", "passport", "ip")

_regions: tuple[str, ...] = ("CN",)

# Units of work done so far (digit windows tried, numbering-plan lookups, characters given to Presidio):
# the bound tests and benchmarks/adversarial.py read them. Approximate under threads, never reset here.
WORK: Counter[str] = Counter()


def configure(regions: Iterable[str] = ()) -> None:
    """Phone regions besides CN (the deployment's countries, ISO 3166 alpha-2)."""
    global _regions
    extra = [r.strip().upper() for r in regions if r and r.strip()]
    _regions = tuple(dict.fromkeys(["CN", *extra]))
    _phone_cached.cache_clear()
    _find_cached.cache_clear()


def regions() -> tuple[str, ...]:
    return _regions


@dataclass(frozen=True, slots=True)
class Span:
    """One personal value: its label and where it sits in the original text."""

    label: str
    start: int
    end: int
    value: str


# -------------------------------------------------------------------------------- business context

# The value right after one of these (and a few filler characters) is a business value and stays.
_BUSINESS_CUES = (
    r"order|orders|invoice|inv|tracking|track|waybill|parcel|shipment|awb|sku|ref|reference|ticket|case|"
    r"member\s*card|membership|member|loyalty|coupon|voucher|gift\s*card|"
    r"订单|单号|订单号|发票|发票号|运单|运单号|快递单|快递|物流单|物流|包裹|工单|会员卡|会员卡号|会员|积分卡|积分|"
    r"优惠券|券号|礼品卡|流水号|退款单|售后单|sf|yt|zto|sto|yd|jd|jt|ems|ups|fedex|dhl|usps|"
    r"顺丰|圆通|中通|申通|韵达|京东|极兔|邮政|德邦"
)
# one way only to read each filler ("号码" is "号" then "码"): alternatives that overlap backtrack
# exponentially on a long run of them ("护照号码号码...吗")
_FILLER = r"(?:\s|[:：#=\-,，/]|no\.?|nos\.?|number|num|nr|id|is|was|code|编号|号|是|为|码)*"
_BUSINESS_BEFORE = re.compile(rf"(?:{_BUSINESS_CUES}){_FILLER}$")
_CARD_BEFORE = re.compile(
    rf"(?:bank\s*card|credit\s*card|debit\s*card|card|visa|mastercard|unionpay|银行卡|信用卡|储蓄卡|借记卡|卡号|卡|银联)"
    rf"{_FILLER}$")
_ID_BEFORE = re.compile(rf"(?:身份证|证件|resident\s*id|id\s*card|identity|national\s*id){_FILLER}$")
_PASSPORT_BEFORE = re.compile(rf"(?:passport|护照){_FILLER}$")
_AMOUNT_BEFORE = re.compile(r"(?:[¥$€£]|rmb|cny|usd|eur|hkd|gbp)\s*$")
_AMOUNT_AFTER = re.compile(r"^\s*(?:元|块|万|千|圆|角|美元|欧元|港币|人民币|rmb|cny|usd|yuan|dollars?|eur|euros?|hkd|gbp)")
_WINDOW = 24


def _before(v: str, start: int) -> str:
    return v[max(0, start - _WINDOW):start]


def _business(v: str, start: int, end: int) -> bool:
    before = _before(v, start)
    return bool(_BUSINESS_BEFORE.search(before) or _AMOUNT_BEFORE.search(before)
                or _AMOUNT_AFTER.match(v[end:end + 8]))


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
            hit = None
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


# -------------------------------------------------------------------------------- e-mail, ip (Presidio)


@lru_cache(maxsize=1)
def _tld():
    """The public-suffix list bundled with tldextract: no download, ever (no URLs, no cache dir)."""
    import tldextract

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, fallback_to_snapshot=True)


@lru_cache(maxsize=1)
def _presidio():
    import logging

    from presidio_analyzer.predefined_recognizers import EmailRecognizer, IpRecognizer

    # Presidio logs each pattern's match time at DEBUG: masking runs inside the log formatter, where a
    # log call of its own would recurse (and the lines would be noise)
    logging.getLogger("presidio-analyzer").setLevel(logging.WARNING)

    class OfflineEmailRecognizer(EmailRecognizer):
        """Presidio's e-mail pattern, its domain checked against the bundled suffix list."""

        def validate_result(self, pattern_text: str):
            return _tld()(pattern_text.rsplit("@", 1)[-1]).fqdn != ""

    return OfflineEmailRecognizer(), IpRecognizer()


def suffix_ok(domain: str) -> bool:
    return _tld()(domain).fqdn != ""


_CJK_ANY = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")
# what Presidio's stricter pattern leaves (labels ending in "-", "_" in a domain): still an address
_ASCII_EMAIL = re.compile(r"(?<![a-z0-9._%+\-])[a-z0-9._%+\-]+@[a-z0-9_\-]+(?:\.[a-z0-9_\-]+)*\.[a-z]{2,}(?![a-z0-9])")
_EMAIL_CUE = re.compile(r"^(?:我的|我|的)?(?:电子邮箱|电子邮件|邮箱地址|邮箱|电邮|邮件|email|e-mail|mail)?(?:是|为|:|：)?")


_MAYBE_IP = re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|[0-9a-f]{0,4}:[0-9a-f]{0,4}:[0-9a-f]{0,4}")
# RFC 5321: a local part holds at most 64 characters, a domain at most 255. Presidio's e-mail pattern is
# tried from every word boundary of a run up to its "@" (quadratic on "a-a-a-...@"), so it is given one
# bounded segment around each "@" that can start an address, never the whole text.
_LOCAL_MAX, _DOMAIN_MAX = 64, 255
_PRESIDIO_DOMAIN = re.compile(r"\w+(?:-+\w+)*\.\w")
_IDN_LOCAL_CHAR = re.compile(r"[\w.+%\-]")
_IDN_DOMAIN = re.compile(r"(?:[a-z0-9\u4e00-\u9fff](?:[a-z0-9\u4e00-\u9fff\-]*[a-z0-9\u4e00-\u9fff])?\.)+"
                         r"[a-z\u4e00-\u9fff]{2,}")
_LATIN_LOCAL_CHAR = re.compile(r"[a-z0-9.+%\-_]")


def _email_ip_spans(v: str, out: list[tuple[str, int, int]]) -> None:
    has_at = "@" in v
    has_ip = "." in v or ":" in v
    if not (has_at or has_ip):
        return
    email_rec, ip_rec = _presidio()
    # Presidio's patterns use \b, which CJK letters defeat ("联系a@b.com谢谢"): give them a view where
    # every CJK character is a space (same length, same offsets)
    latin = _CJK_ANY.sub(" ", v) if not v.isascii() else v
    if has_at:
        ats = [m.start() for m in re.finditer("@", latin)]
        for k, at in enumerate(ats):
            if not (at and _PRESIDIO_DOMAIN.match(latin, at + 1)):
                continue
            lo = max(at - _LOCAL_MAX, ats[k - 1] + 1 if k else 0)
            hi = min(at + 1 + _DOMAIN_MAX, ats[k + 1] if k + 1 < len(ats) else len(latin))
            WORK["presidio_chars"] += hi - lo
            for r in email_rec.analyze(latin[lo:hi], ["EMAIL_ADDRESS"], None):
                out.append(("email", lo + r.start, lo + r.end))
        for m in _ASCII_EMAIL.finditer(v):
            out.append(("email", m.start(), m.end()))
        if not v.isascii():
            _idn_email_spans(v, out)
    if has_ip and _MAYBE_IP.search(v):
        WORK["presidio_chars"] += len(latin)
        for r in ip_rec.analyze(latin, ["IP_ADDRESS"], None):
            if not _own_address(latin[r.start:r.end]):
                out.append(("ip", r.start, r.end))


def _idn_email_spans(v: str, out: list[tuple[str, int, int]]) -> None:
    """E-mails whose local part or domain is Chinese. Read from each "@": the domain forwards, the local part
    back to the run's start (a pattern tried from every position of a long run would be quadratic)."""
    pos = 0
    for at_m in re.finditer("@", v):
        at = at_m.start()
        if at < pos:
            continue
        dm = _IDN_DOMAIN.match(v, at + 1)
        if not dm:
            continue
        s = at
        while s > pos and _IDN_LOCAL_CHAR.match(v[s - 1]):
            s -= 1
        if s == at:
            continue
        pos = dm.end()
        local, domain = v[s:at], dm.group(0)
        if not (CJK.search(local) or CJK.search(domain)):
            continue
        # the last label may run into the sentence ("例子.公司谢谢"): shorten it to a real suffix (a label
        # holds at most 63 characters)
        end = dm.end()
        for _ in range(64):
            if not domain or suffix_ok(domain):
                break
            if not CJK.search(domain[-1]) or "." not in domain[:-1]:
                domain = ""
                break
            domain, end = domain[:-1], end - 1
        else:
            domain = ""
        if not domain or domain.endswith("."):
            continue
        if CJK.search(local) and not CJK.search(local[-1]):
            # "联系a@b.com": Chinese words then a Latin local part; the address is the Latin part
            start = at
            while start > s and _LATIN_LOCAL_CHAR.match(v[start - 1]):
                start -= 1
        else:
            cue = _EMAIL_CUE.match(local)
            start = s + (cue.end() if cue and cue.end() < len(local) else 0)
        out.append(("email", start, end))


def _own_address(text: str) -> bool:
    """Loopback and unspecified addresses (127.0.0.1, ::1, 0.0.0.0) name this machine, never a person: the
    address a server is bound to stays readable in its own log."""
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


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
        ok = m.group(2) is not None or _EN_ADDRESS_CUE.search(_before(v, s))
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


# -------------------------------------------------------------------------------- find / mask

_MAYBE = re.compile(r"[0-9@＠０-９路街巷弄道里苑:]")


def _compact(value: str) -> str:
    return re.sub(r"[\s._\-·()/#:：]", "", normalise_mapped(value, simplify="never").text)


def find(text: str | None, *, allow: Iterable[str] = ()) -> list[Span]:
    """Personal values in ``text``, in order, not overlapping; business values are not returned.

    A turn masks the same message for its trace, ticket, log lines and reply checks: the last results
    are kept (keyed by text and ``allow``, texts up to 8,000 characters), so each is read once.
    """
    if not text or not _MAYBE.search(text):
        return []
    if len(text) > _CACHED_CHARS:
        return _find(text, tuple(allow))
    return list(_find_cached(text, tuple(allow)))


_CACHED_CHARS = 8000    # longer texts (a whole payload) are read each time rather than kept


@lru_cache(maxsize=512)
def _find_cached(text: str, allow: tuple[str, ...]) -> tuple[Span, ...]:
    return tuple(_find(text, allow))


def _find(text: str, allow: tuple[str, ...]) -> list[Span]:
    nm = normalise_mapped(text, case="lower", simplify="cjk", spaces="keep")
    v = nm.text
    found: list[tuple[str, int, int]] = []
    _email_ip_spans(v, found)
    _number_spans(v, found)
    for m in _PASSPORT.finditer(v):
        if not _business(v, m.start(), m.end()):
            found.append(("passport", m.start(), m.end()))
    if "passport" in v or "护照" in v:
        for m in _PASSPORT_CTX.finditer(v):
            found.append(("passport", m.start(1), m.end(1)))
    if CJK.search(v):
        _address_spans(v, found)
    _en_address_spans(v, text, nm.span, found)
    if "insurance" in v or "nino" in v or " ni" in v:
        for m in _NINO.finditer(v):
            if _NINO_BEFORE.search(_before(v, m.start())):
                found.append(("id", m.start(), m.end()))
    if not found:
        return []
    # overlaps: the earlier, then the longer, wins (an e-mail holds digits, an address holds a number)
    prio = {"email": 0, "ip": 1, "address": 2, "id": 3, "card": 4, "passport": 5, "phone": 6}
    found.sort(key=lambda f: (f[1], -(f[2] - f[1]), prio[f[0]]))
    kept: list[tuple[str, int, int]] = []
    for f in found:
        if kept and f[1] < kept[-1][2]:
            last = kept[-1]
            if f[2] > last[2] and prio[f[0]] < prio[last[0]]:
                kept[-1] = (f[0], last[1], f[2])
            continue
        kept.append(f)
    allowed = {_compact(a) for a in allow if a}
    spans = []
    for label, s, e in kept:
        os, oe = nm.span(s, e)
        value = text[os:oe]
        if allowed and _compact(value) in allowed:
            continue
        spans.append(Span(label, os, oe, value))
    return spans


def mask(text: str | None, *, allow: Iterable[str] = ()) -> str | None:
    """``text`` with each personal value replaced by its label: ``[phone]``, ``[card]``, ``[id]`` ..."""
    return _replace(text, allow, lambda sp: f"[{sp.label}]")


def partial(text: str | None, *, allow: Iterable[str] = ()) -> str | None:
    """The agent view: enough to recognise a value, not to use it (138****0000, card ending 5678)."""
    return _replace(text, allow, partial_value)


def partial_value(span: Span) -> str:
    digits = re.sub(r"\D", "", normalise_mapped(span.value, simplify="never").text)
    if span.label == "phone" and len(digits) >= 7:
        return f"{digits[:3]}****{digits[-4:]}" if not digits.startswith("86") or len(digits) < 13 \
            else f"{digits[2:5]}****{digits[-4:]}"
    if span.label == "card" and len(digits) >= 4:
        return f"[card ending {digits[-4:]}]"
    if span.label == "id":
        tail = normalise_mapped(span.value, simplify="never").text.replace(" ", "")[-4:].upper()
        return f"[id ending {tail}]"
    value = normalise_mapped(span.value, case="keep", simplify="never").text
    if span.label == "email" and "@" in value:
        local, domain = value.rsplit("@", 1)
        return f"{local[:1]}***@{domain}"
    if span.label == "passport" and len(span.value) >= 4:
        return f"{span.value[:1].upper()}****{span.value[-3:]}"
    return f"[{span.label}]"


def _replace(text, allow, render) -> str | None:
    if not text:
        return text
    spans = find(text, allow=allow)
    if not spans:
        return text
    parts, pos = [], 0
    for sp in spans:
        parts.append(text[pos:sp.start])
        parts.append(render(sp))
        pos = sp.end
    parts.append(text[pos:])
    return "".join(parts)


_OPEN_TOKEN = re.compile(r"\[[^\[\]]{0,40}$")
_LONGEST_VALUE = 400     # no personal value is longer (an e-mail address is at most 254 characters)


def clip(masked: str | None, limit: int) -> str | None:
    """Cut already-masked text to ``limit`` characters, never inside a mask token (no "[pho" left behind)."""
    if masked is None or len(masked) <= limit:
        return masked
    cut = masked[:limit]
    token = _OPEN_TOKEN.search(cut)
    if token and "]" in masked[limit:limit + 42].split("[", 1)[0]:
        cut = cut[:token.start()]
    return cut.rstrip()


def mask_clip(text: str | None, limit: int, *, allow: Iterable[str] = (), render=None) -> str | None:
    """Mask first, then cut to ``limit`` characters: a value straddling the cut is masked whole (cutting the
    raw text first would leave "138123" at the end, which no detector recognises), and no half token stays.

    A long text is read in a window that grows until the first ``limit`` masked characters come from text
    well before the window's end, so even a value cut by the window never reaches the result.
    """
    if not text:
        return text
    fn = render or mask
    window = 4 * limit + _LONGEST_VALUE
    while True:
        masked = fn(text[:window], allow=allow)
        # the window's last _LONGEST_VALUE raw characters mask to at most twice as many
        if len(text) <= window or len(masked) >= limit + 2 * _LONGEST_VALUE:
            return clip(masked, limit)
        window *= 2


def mask_obj(value: Any, *, allow: Iterable[str] = (), keep: Iterable[str] = ()) -> Any:
    """Mask strings inside nested dicts and lists (trace payloads, metadata, context packages).

    ``keep``: keys whose values are business data and stay as they are (the entities of a trace).
    """
    allow = tuple(allow)
    keep = frozenset(keep)
    return _mask_obj(value, allow, keep, mask)


def partial_obj(value: Any, *, allow: Iterable[str] = (), keep: Iterable[str] = ()) -> Any:
    """:func:`mask_obj` in the agent view (:func:`partial`)."""
    return _mask_obj(value, tuple(allow), frozenset(keep), partial)


def _mask_obj(value, allow, keep, fn):
    if isinstance(value, str):
        return fn(value, allow=allow)
    if isinstance(value, dict):
        return {k: (v if k in keep else _mask_obj(v, allow, keep, fn)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask_obj(v, allow, keep, fn) for v in value]
    return value


def warm_up() -> None:
    """Load phonenumbers' metadata, Presidio's recognizers and the suffix list before the first message."""
    mask("call 13812345678 or +44 20 7946 0958, a@b.com 王五@例子.公司 10.0.0.1 杭州市西湖区文三路90号 E12345678")
