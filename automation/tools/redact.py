"""A small, dependency-free redactor for the audit: masks e-mail addresses, long digit runs (phones, cards,
tracking and tax numbers) and the values of fields that hold personal data.

The fallback for a gateway built on its own (tests, a script): the gateway wires the project-wide masker
(``text.personal.mask``) as ``redact=`` to ``load_tool_gateway``, and every string of the audit goes through
that one instead of ``mask_text``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Redactor = Callable[[str], str]

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# 7+ digits, optionally broken by spaces, dots or dashes (138-1234-5678, 4242 4242 4242 4242)
_DIGITS = re.compile(r"(?<![\w])\+?\d(?:[ .-]?\d){6,}(?![\w])|\d{7,}")
# a whole value that is only a date or a timestamp (paid_at, shipped_at, ...) holds nothing personal; the
# project's masker would weigh each digit run of it as a possible phone number (~50 us a timestamp)
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?")
PERSONAL_FIELDS = frozenset({"phone", "email", "address", "new_address", "tax_id", "id_number", "card_number"})


def mask_text(text: str) -> str:
    text = _EMAIL.sub("[email]", text)
    return _DIGITS.sub("[number]", text)


def redact_value(value: Any, redact: Redactor = mask_text, *, _key: str | None = None) -> Any:
    """A copy of JSON-like ``value`` with every string passed through ``redact`` and personal fields masked."""
    if _key is not None and _key.lower() in PERSONAL_FIELDS and value not in (None, "", [], {}):
        return "[redacted]"
    if isinstance(value, str):
        return value if _TIMESTAMP.fullmatch(value) else redact(value)
    if isinstance(value, dict):
        return {k: redact_value(v, redact, _key=str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v, redact) for v in value]
    return value
