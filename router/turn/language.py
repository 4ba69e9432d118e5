"""Which language to answer in: Chinese or English, from the message's script.

A language-identification model is overkill here (and unreliable on two-word chat messages):
the gateway speaks zh and en, which are told apart by their script. Mixed text goes by the
dominant script, weighting one Han character like three Latin letters (a Chinese customer's
"iPhone 15 的屏幕坏了" is Chinese; "please help 转人工" is English). A message with too little
text to tell ("ok", "👍", "12345") keeps the conversation's last known language.
"""

from __future__ import annotations

import re

from router.telemetry.metrics import REPLY_LANGUAGES as LANGUAGES  # one closed set with /metrics
DEFAULT = "en"

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff01-\uff0f]")
_HAN_ONLY = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")
LATIN_PER_HAN = 3.0        # Latin letters weighing as much as one Han character
MIN_LATIN_LETTERS = 4      # fewer Latin letters (and no Han) than this: too short to tell ("ok", "thx")


# what is not language: e-mail addresses, links and codes with digits (a tax id 91330106MA2B3C4D5E, an order
# number, a product code HP-220) say nothing about the customer's language
_NOT_WORDS = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+|https?://[^\s\u3400-\u9fff]+|www\.[^\s\u3400-\u9fff]+"
                        r"|[A-Za-z0-9_-]*\d[A-Za-z0-9_-]*")


def detect(text: str) -> str | None:
    """``zh`` / ``en`` when the text says, else None (too short or no letters at all)."""
    text = _NOT_WORDS.sub(" ", text or "")
    han = len(_HAN_ONLY.findall(text or ""))
    latin = len(_LATIN.findall(text or ""))
    if han == 0 and latin < MIN_LATIN_LETTERS:
        return None
    return "zh" if han * LATIN_PER_HAN >= latin else "en"


def choose(text: str, last: str | None = None, default: str = DEFAULT) -> str:
    """The reply language for ``text``: its own, else the conversation's last, else ``default``."""
    found = detect(text)
    if found is not None:
        return found
    if last in LANGUAGES:
        return last
    return default


LocalText = str | dict[str, str]   # one text for every language, or one per language ({en: ..., zh: ...})


def local(text: LocalText, lang: str | None, default: str = DEFAULT) -> str:
    """The ``lang`` version of a per-language text (the default language's, else the first, when missing)."""
    if isinstance(text, str):
        return text
    return text.get(lang or default) or text.get(default) or next(iter(text.values()), "")
