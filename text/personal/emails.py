"""E-mail and IP addresses: Presidio's pattern recognizers on bounded segments, the public-suffix list read
offline, and e-mails written in Chinese."""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache

from text.normalise import CJK
from text.personal.common import WORK

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
