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

from text import personal as _personal

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

_WIDE = str.maketrans("０１２３４５６７８９＋－（）＠", "0123456789+-()@")


def redact(text: str | None) -> str | None:
    """Mask personal data in free text (logs, traces, anything shown to other systems): :mod:`text.personal`.

    Full-width digits and signs (IME input) come out in their ASCII forms, as they always did.
    """
    if not text:
        return text
    if not text.isascii():
        text = text.translate(_WIDE)
    return _personal.mask(text)


# keys whose values are business data the classifier extracted (order numbers, amounts): never masked
BUSINESS_KEYS = frozenset({"entities", "order_numbers", "amounts"})


def redact_obj(value, *, keep=()):
    """Redact strings inside nested dicts/lists (trace payloads); ``keep``: keys holding business values."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: (v if k in keep else redact_obj(v, keep=keep)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_obj(v, keep=keep) for v in value]
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


class RedactingFormatter(logging.Formatter):
    """The plain-text log line (log_json=false), masked like the JSON one: message, arguments, traceback."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record)) or ""


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = request_id_var.get()
        return True


class _StderrHandler(logging.StreamHandler):
    """A stderr handler that outlives its stream: a command run in-process with its output captured (the capture
    closed afterwards) leaves the handler on a closed stream; it then writes to the process's own stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self.stream, "closed", False):
            self.stream = sys.__stderr__ or sys.stderr
        super().emit(record)


def configure_logging(level: str = "INFO", json_logs: bool = True) -> None:
    """Log to stderr through the masking formatter.

    The detector the formatter masks with is loaded here, before the server starts its threads: its first
    use imports Presidio, and two threads logging at once would import it twice and fail half-way."""
    _personal.warm_up()
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_switchboard", False):
            root.removeHandler(h)
    handler = _StderrHandler(sys.stderr)
    handler._switchboard = True  # type: ignore[attr-defined]
    handler.addFilter(_RequestIdFilter())
    if json_logs:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("uvicorn.access",):
        logging.getLogger(noisy).setLevel("WARNING")
