"""The harness: hard checks that run before any model ("fail means return").

Checks, in this order, each one deciding the turn on its own when it fires:

1. ``stop`` / ``start``: the whole message is a STOP word (STOP, 退订, unsubscribe ...) or, from a
   stopped customer, a START word. STOP marks the customer do-not-contact; nothing is ever sent
   to them until START.
   Honoured first, even over quota, because opting out is a legal obligation.
2. ``crisis``: self-harm or violence words (zh/en). Never throttled, never dropped: an urgent L3
   ticket and a safe fixed reply (unless the customer is do-not-contact, then only the ticket).
3. ``do_not_contact``: a stopped customer gets no bot reply and nothing outbound.
4. ``quota``: more than N routed messages per window from one customer -> HTTP 429 with
   Retry-After; the pipeline rolls the message back, nothing is stored (the per-key and overall quotas
   and the caps on concurrent turns, configured beside it, are checked before the turn: router.turn.admission).
5. ``sensitive``: a customer flagged sensitive goes to L3 (or gets a standard script, by config).

Matching works on a normalised form (NFKC, lower case, traditional -> simplified Chinese), so
"STOP", "ｓｔｏｐ" and "轉人工" match like "stop" and "转人工".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg
from psycopg.rows import DictRow
from pydantic import BaseModel, ConfigDict, Field

from router.turn.language import LocalText, local
from text.normalise import normalise as _normalise

# -- text helpers shared with the escalation policy --------------------------------------------


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """NFKC, lower case, simplified Chinese, single spaces: the form every lexicon matches against."""
    return _normalise(text, case="lower", simplify="cjk", spaces="squash")


def squash(text: str) -> str:
    """``normalise`` without punctuation or spaces: equality of two questions, whole-message commands."""
    return _NOT_WORD.sub("", normalise(text))


class Lexicon:
    """A compiled phrase list: CJK phrases match as substrings, Latin ones on word boundaries."""

    def __init__(self, phrases):
        self.phrases = sorted({normalise(p) for p in phrases if p and p.strip()}, key=len, reverse=True)
        parts = []
        for p in self.phrases:
            body = r"\s*".join(re.escape(w) for w in p.split())
            if _CJK.search(p):
                parts.append(body)
            else:
                parts.append(rf"(?<![\w']){body}(?![\w])")
        self._re = re.compile("|".join(parts)) if parts else None

    def find(self, text: str, *, normalised: bool = False) -> str | None:
        """The first phrase found in ``text``, or None."""
        if self._re is None:
            return None
        m = self._re.search(text if normalised else normalise(text))
        return m.group(0) if m else None

    def __len__(self) -> int:
        return len(self.phrases)


def _phrases(by_lang: dict[str, list[str]] | list[str]) -> list[str]:
    if isinstance(by_lang, dict):
        return [p for ps in by_lang.values() for p in ps]
    return list(by_lang)


# -- configuration -------------------------------------------------------------------------------


class RateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_messages: int | None = Field(default=None, ge=1, description="Messages admitted per window; null: no limit.")
    window_seconds: int = Field(default=60, ge=1)


class ConcurrencyConfig(BaseModel):
    """Turns running at once in one gateway process; one more is 429 with Retry-After (null: no cap)."""

    model_config = ConfigDict(extra="forbid")
    per_customer: int | None = Field(default=2, ge=1)
    per_key: int | None = Field(default=32, ge=1, description="Per integration key (the direct API).")
    per_channel: int | None = Field(default=64, ge=1)
    wait_seconds: float = Field(default=2.0, ge=0, le=30, description="How long a message over a cap waits for a free "
                                "slot (holding no connection) before its 429.")


class QuotaConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_messages: int = Field(default=20, ge=1, description="Routed messages allowed per customer and window.")
    window_seconds: int = Field(default=60, ge=1)
    per_key: RateConfig = Field(default_factory=lambda: RateConfig(max_messages=6000, window_seconds=60),
                                description="Messages per integration key (the direct API), across its customers.")
    total: RateConfig = Field(default_factory=lambda: RateConfig(max_messages=12000, window_seconds=60),
                              description="Messages into the gateway as a whole (every channel and key).")
    concurrent_turns: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)


class HarnessConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stop_words: list[str] = Field(default_factory=lambda: ["stop", "unsubscribe", "stop all", "退订", "td", "取消订阅"])
    start_words: list[str] = Field(default_factory=lambda: ["start", "subscribe", "unstop", "订阅", "恢复订阅"])
    start_reply: LocalText = {"en": "You are subscribed again.", "zh": "您已恢复接收消息。"}
    crisis: dict[str, list[str]] = Field(default_factory=lambda: {
        "zh": ["自杀", "不想活了", "想死", "轻生"], "en": ["suicide", "kill myself", "want to die"]})
    hotline: str = "<local crisis hotline>"
    crisis_reply: LocalText = {
        "en": "We are worried about you and a person from our team will contact you right away. "
              "If you are in danger, please call {hotline} or your local emergency number now.",
        "zh": "我们很关心您，工作人员会马上联系您。如有危险，请立即拨打 {hotline} 或当地紧急电话。"}
    quota: QuotaConfig = Field(default_factory=QuotaConfig)
    sensitive_action: Literal["l3", "script"] = "l3"
    sensitive_script: LocalText = {"en": "Thank you for your message. A specialist from our team will follow up "
                                         "with you.", "zh": "感谢您的留言，我们的专员会与您联系。"}


# -- customer flags ------------------------------------------------------------------------------


NO_FLAGS = {"do_not_contact": False, "dnc_since": None, "sensitive": False, "note": None}   # no row yet


def customer_flags(conn: psycopg.Connection[DictRow], channel: str, customer_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT do_not_contact, dnc_since, sensitive, note FROM customer_flags WHERE channel = %s AND customer_id = %s",
        (channel, customer_id),
    ).fetchone()
    return dict(row) if row else dict(NO_FLAGS)


def set_do_not_contact(conn: psycopg.Connection[DictRow], channel: str, customer_id: str, value: bool) -> None:
    conn.execute(
        """
        INSERT INTO customer_flags (channel, customer_id, do_not_contact, dnc_since)
        VALUES (%s, %s, %s, CASE WHEN %s THEN now() END)
        ON CONFLICT (channel, customer_id) DO UPDATE SET
            do_not_contact = EXCLUDED.do_not_contact,
            dnc_since = CASE WHEN EXCLUDED.do_not_contact THEN COALESCE(customer_flags.dnc_since, now()) END,
            updated_at = now()
        """,
        (channel, customer_id, value, value),
    )


def set_sensitive(conn: psycopg.Connection[DictRow], channel: str, customer_id: str, value: bool,
                  note: str | None = None) -> None:
    conn.execute(
        """
        INSERT INTO customer_flags (channel, customer_id, sensitive, note) VALUES (%s, %s, %s, %s)
        ON CONFLICT (channel, customer_id) DO UPDATE SET
            sensitive = EXCLUDED.sensitive, note = COALESCE(EXCLUDED.note, customer_flags.note), updated_at = now()
        """,
        (channel, customer_id, value, note),
    )


# -- the checks ----------------------------------------------------------------------------------

Action = Literal["pass", "stop", "start", "crisis", "do_not_contact", "throttle", "sensitive"]


@dataclass
class Verdict:
    action: Action
    rule: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    reply: str | None = None          # the fixed text to send, when the check sends one
    retry_after: int | None = None    # seconds, for "throttle"
    flags: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.action == "pass"


class Harness:
    def __init__(self, config: HarnessConfig | None = None):
        self.config = config or HarnessConfig()
        self._stop = {squash(w) for w in self.config.stop_words}
        self._start = {squash(w) for w in self.config.start_words}
        self._crisis = Lexicon(_phrases(self.config.crisis))

    def crisis_reply(self, lang: str | None = None) -> str:
        return local(self.config.crisis_reply, lang).format(hotline=self.config.hotline)

    _READS = """
        SELECT f.do_not_contact, f.dnc_since, f.sensitive, f.note, q.recent, q.oldest_left_s
        FROM (SELECT 1) AS one
        LEFT JOIN customer_flags f ON f.channel = %(channel)s AND f.customer_id = %(customer)s
        CROSS JOIN LATERAL (
            SELECT count(*) AS recent, min(extract(epoch FROM r.received_at + make_interval(secs => %(window)s)
                                                   - now())) AS oldest_left_s
            FROM (
                SELECT m.received_at
                FROM conversations c
                CROSS JOIN LATERAL (
                    SELECT received_at FROM messages m
                    WHERE m.conversation_id = c.id AND m.direction = 'in' AND m.id <> %(message)s
                      AND m.received_at > now() - make_interval(secs => %(window)s)
                      AND NOT m.throttled
                    ORDER BY m.received_at DESC LIMIT %(n)s
                ) m
                WHERE c.channel = %(channel)s AND c.customer_id = %(customer)s
                ORDER BY m.received_at DESC LIMIT %(n)s
            ) r
        ) q
    """

    def _reads(self, conn: psycopg.Connection[DictRow], channel: str, customer_id: str,
               message_id: int) -> tuple[dict[str, Any], int | None]:
        """The customer's flags and the quota's verdict (seconds to wait, or None), in one round trip.

        The quota counts the customer's routed inbound messages (throttled ones excluded, so
        hammering does not extend the wait) in the sliding window, across their conversations on
        the channel, driven from the customer's conversations: a plan that starts from "every
        message of the last window" reads the whole channel's traffic for each message.
        """
        row = conn.execute(self._READS, self.reads_params(channel, customer_id, message_id)).fetchone()
        assert row is not None, "an aggregate over the window always returns its row"
        return self._read_row(row)

    def reads_params(self, channel: str, customer_id: str, message_id: int = -1) -> dict[str, Any]:
        """The parameters of ``reads_sql`` (named, so a caller can read it inside a statement of its own)."""
        q = self.config.quota
        return {"window": q.window_seconds, "channel": channel, "customer": customer_id, "message": message_id,
                "n": q.max_messages}

    @property
    def reads_sql(self) -> str:
        """The statement of :meth:`_reads`: one row (do_not_contact, dnc_since, sensitive, note, recent,
        oldest_left_s)."""
        return self._READS

    def _read_row(self, row: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
        flags = dict(NO_FLAGS) if row["do_not_contact"] is None else {k: row[k] for k in NO_FLAGS}
        retry = None
        if row["recent"] >= self.config.quota.max_messages:
            retry = max(1, math.ceil(float(row["oldest_left_s"])))
        return flags, retry

    def screen(self, conn: psycopg.Connection[DictRow], *, channel: str, customer_id: str, text: str,
               message_id: int, lang: str | None = None) -> Verdict:
        """Run the checks in order; the first that fires decides. Writes the STOP/START flag change.

        ``lang`` is the reply language (see router.turn.language) of the texts a check sends."""
        flags, retry = self._reads(conn, channel, customer_id, message_id)
        command = squash(text)
        if command in self._stop:
            set_do_not_contact(conn, channel, customer_id, True)
            return Verdict("stop", "stop", {"command": command}, flags={**flags, "do_not_contact": True})
        if command in self._start and flags["do_not_contact"]:   # from anyone else "start" is just text
            set_do_not_contact(conn, channel, customer_id, False)
            return Verdict("start", "start", {"command": command}, reply=local(self.config.start_reply, lang),
                           flags={**flags, "do_not_contact": False})
        hit = self._crisis.find(text)
        if hit:
            return Verdict("crisis", "crisis", {"matched": hit},
                           reply=None if flags["do_not_contact"] else self.crisis_reply(lang), flags=flags)
        if flags["do_not_contact"]:
            return Verdict("do_not_contact", "do_not_contact", {"since": str(flags["dnc_since"])}, flags=flags)
        if retry is not None:
            q = self.config.quota
            return Verdict("throttle", "quota", {"max_messages": q.max_messages, "window_seconds": q.window_seconds},
                           retry_after=retry, flags=flags)
        if flags["sensitive"]:
            action = self.config.sensitive_action
            return Verdict("sensitive", "sensitive", {"action": action},
                           reply=local(self.config.sensitive_script, lang) if action == "script" else None, flags=flags)
        return Verdict("pass", flags=flags)

    def would_pass_read(self, row: dict[str, Any] | None) -> bool:
        """Whether :meth:`screen` would let a message not stored yet through, past the message's own checks
        (:meth:`passes_text`), from a row of ``reads_sql`` (read with ``reads_params`` of the customer and no
        message) the caller already has: work done ahead of a turn (a shop call) is asked only for a message no
        check would stop. Exact at the time of the read; a flag set meanwhile is still honoured by the turn's own
        screen."""
        assert row is not None, "an aggregate over the window always returns its row"
        flags, retry = self._read_row(row)
        return not (flags["do_not_contact"] or flags["sensitive"] or retry is not None)

    def passes_text(self, text: str) -> bool:
        """The checks that read the message alone (a STOP or START word, crisis words) let it through."""
        command = squash(text)
        return not (command in self._stop or command in self._start or self._crisis.find(text))
