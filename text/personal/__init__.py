"""Personal data in free text: one detector and the masks every sink uses.

What is personal (masked): phone numbers, bank cards, resident ids and other national ids (US SSN, UK NHS
and national insurance numbers), passports, Chinese addresses to the last unit, English street addresses,
e-mail addresses (also on Chinese domains), IP addresses. What is business (kept, the
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
  (province / city / district / road / number / building / units), English street addresses,
  e-mails with Chinese local parts or domains, phone shapes libphonenumber alone does not read
  (``.``/``_``/ideographic spaces, one digit at a time).

One module per detector (``numbers``, ``emails``, ``addresses``; ``common`` holds the business words and
the work counters); this module merges their spans. Every detector is linear in the text, with hard caps
on the work of one call (``benchmarks/adversarial.py``, ``tests/text/test_personal_bounds.py``).

The text is normalised first (:func:`text.normalise.normalise_mapped`: NFKC, full width -> half width,
case folding, traditional -> simplified) and every span is mapped back to the original, so a mask always
covers the whole value as the customer typed it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from text.normalise import CJK, normalise_mapped
from text.personal import numbers
# the detectors, one module each; a few private names are re-exported for the bound tests and benchmarks
from text.personal.addresses import _PASSPORT, _PASSPORT_CTX, _address_spans, _en_address_spans
from text.personal.common import WORK, Span, _before, _business
from text.personal.emails import _email_ip_spans, suffix_ok
from text.personal.emails import _presidio as _presidio, _tld as _tld   # re-exported for tests and benchmarks
from text.personal.numbers import (_NINO, _NINO_BEFORE, _number_spans, id_checksum_ok, luhn_ok, nhs_ok, ssn_ok)
from text.personal.numbers import _CANDIDATES as _CANDIDATES, _PHONE_LOOKUPS as _PHONE_LOOKUPS   # for the bound tests

__all__ = ["LABELS", "WORK", "Span", "clip", "configure", "find", "id_checksum_ok", "luhn_ok", "mask", "mask_clip",
           "mask_obj", "nhs_ok", "partial", "partial_obj", "partial_value", "regions", "ssn_ok", "suffix_ok",
           "warm_up"]

LABELS = ("phone", "card", "id", "email", "address", "passport", "ip")


def configure(regions: Iterable[str] = ()) -> None:
    """Phone regions besides CN (the deployment's countries, ISO 3166 alpha-2)."""
    numbers.configure(regions)
    _find_cached.cache_clear()


def regions() -> tuple[str, ...]:
    return numbers.regions()


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
        masked = fn(text[:window], allow=allow) or ""      # text is not empty: never None
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
