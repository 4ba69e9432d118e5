"""Request ids, structured JSON logs and PII redaction.

Every log line carries the request id of the request that caused it, and personal data
(phones, e-mails, card numbers, Chinese ID numbers) is masked before it reaches a handler,
so logs and traces can be shipped to shared tooling without leaking customers' data.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
import uuid

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

# A number is PII only as a whole token: never a piece of a UUID, an order code (ORD-2024...),
# a decimal or a longer digit run. CJK characters around it do not protect it ("电话13812345678").
_B = r"(?<![A-Za-z0-9_.#/+-])"
_E = r"(?![A-Za-z0-9_/-])(?!\.\d)"


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(m: re.Match[str]) -> str:
    """Payment cards pass the Luhn check; other long digit runs (order numbers) are left alone."""
    digits = re.sub(r"\D", "", m.group(0))
    return "[card]" if 13 <= len(digits) <= 19 and _luhn_ok(digits) else m.group(0)


# Order matters: e-mails, ID numbers, mainland mobiles, cards (long runs), then other phone shapes.
_PII_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("email", re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")),
    # 18-digit PRC resident ID (region, birth date, sequence, check digit which may be X)
    ("cn_id", re.compile(_B + r"\d{6}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx]" + _E)),
    # mainland mobiles, with or without +86 / 0086 and separators: 138 1234 5678
    ("phone", re.compile(_B + r"(?:(?:\+|00)86[ -]?)?1[3-9]\d(?:[ -]?\d{4}){2}" + _E)),
    # payment cards: 13-19 digits, optionally grouped by spaces or dashes (Luhn-checked in _card)
    ("card", re.compile(_B + r"\d(?:[ -]?\d){12,18}" + _E)),
    # international numbers written with +country code
    ("phone", re.compile(r"(?<![A-Za-z0-9_+])\+[1-9]\d{0,2}(?:[ -]?\(?\d{1,4}\)?){2,5}" + _E)),
    # landlines and other local shapes: (010) 1234-5678, 010-12345678, 555-123-4567, 123-4567
    ("phone", re.compile(_B + r"(?:\(\d{2,4}\)[ -]?|\d{2,4}[ -])?\d{3,4}[ -]?\d{4}" + _E)),
]
_MAYBE_PII = re.compile(r"[\d@＠]")
_WIDE = str.maketrans("０１２３４５６７８９＋－（）＠", "0123456789+-()@")


def redact(text: str | None) -> str | None:
    """Mask personal data in free text (logs, traces, context packages shown to other systems)."""
    if not text or not _MAYBE_PII.search(text):   # every pattern needs a digit or an "@"
        return text
    if not text.isascii():
        text = text.translate(_WIDE)   # full-width digits and signs (IME input) as their ASCII forms
    for label, pattern in _PII_PATTERNS:
        text = pattern.sub(_card if label == "card" else f"[{label}]", text)
    return text


def redact_obj(value):
    """Redact strings inside nested dicts/lists (trace payloads)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_obj(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_obj(v) for v in value]
    return value


def new_request_id() -> str:
    return uuid.uuid4().hex


_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def accept_request_id(incoming: str | None) -> str:
    """Keep a caller's request id when it is sane (correlation across hops), else make one."""
    if incoming and _SAFE_ID.match(incoming):
        return incoming
    return new_request_id()


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the request id; message text is redacted."""

    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": redact(record.getMessage()),
            "request_id": getattr(record, "request_id", None) or request_id_var.get(),
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            payload.update(redact_obj(extra))
        if record.exc_info:
            payload["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(payload, ensure_ascii=False, default=str)


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = request_id_var.get()
        return True


def configure_logging(level: str = "INFO", json_logs: bool = True) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_switchboard", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler._switchboard = True  # type: ignore[attr-defined]
    handler.addFilter(_RequestIdFilter())
    if json_logs:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("uvicorn.access",):
        logging.getLogger(noisy).setLevel("WARNING")
