"""The rules channel: deterministic regex and keyword rules, compiled once, tried by priority.

Rules exist for the cases that must never depend on a model (a customer typing "人工" or
"refund 600"): they are exact, explainable and cost microseconds. Text is folded before
matching (NFKC width folding, traditional -> simplified Chinese, case-insensitive) so one
rule covers "退款", "退款" typed full-width, and "退款" written in traditional characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from router.classify.intents import IntentConfig
from text.normalise import normalise

_ASCII_WORD = re.compile(r"[A-Za-z0-9]")


def fold(text: str) -> str:
    """The form rules are matched against: NFKC, simplified Chinese, lower case."""
    return normalise(text, case="casefold", simplify="always", spaces="keep")


def keyword_pattern(keywords: list[str]) -> str:
    """One alternation over the folded keywords, longest first.

    Latin keywords match as whole words or phrases ("human" does not hit "inhuman"; spaces match any
    run of whitespace); CJK keywords match anywhere, since Chinese has no spaces between words.
    """
    parts = []
    for kw in sorted({fold(k.strip()) for k in keywords}, key=len, reverse=True):
        p = re.escape(kw).replace(r"\ ", r"\s+")
        if _ASCII_WORD.match(kw[0]):
            p = r"(?<![a-z0-9])" + p
        if _ASCII_WORD.match(kw[-1]):
            p = p + r"(?![a-z0-9])"
        parts.append(p)
    return "|".join(parts)


@dataclass(frozen=True)
class CompiledRule:
    intent: str
    type: str
    source: str | tuple[str, ...]    # the pattern, or the keywords as written
    priority: int
    order: int                       # position in the file: ties keep file order
    regex: re.Pattern

    def explain(self, match: re.Match) -> dict:
        out = {"intent": self.intent, "type": self.type, "priority": self.priority, "matched": match.group(0)}
        if self.type == "regex":
            out["pattern"] = self.source
        else:
            out["keywords"] = list(self.source)
        return out


class RuleMatcher:
    """First hit wins, in (priority desc, file order) order."""

    def __init__(self, config: IntentConfig):
        rules: list[CompiledRule] = []
        order = 0
        for intent in config.intents:
            for rule in intent.rules:
                if rule.type == "regex":
                    # patterns are matched against folded text, so their literal CJK and width are folded
                    # the same way (case is left to IGNORECASE: folding would change escapes like \S)
                    regex = re.compile(normalise(rule.pattern, case="keep", simplify="always", spaces="keep"),
                                       re.IGNORECASE)
                    source: str | tuple[str, ...] = rule.pattern
                else:
                    regex = re.compile(keyword_pattern(rule.any or []), re.IGNORECASE)
                    source = tuple(rule.any or [])
                rules.append(CompiledRule(intent.name, rule.type, source, rule.priority, order, regex))
                order += 1
        self.rules = sorted(rules, key=lambda r: (-r.priority, r.order))

    def __len__(self) -> int:
        return len(self.rules)

    def match(self, text: str) -> tuple[CompiledRule, re.Match] | None:
        folded = fold(text)
        for rule in self.rules:
            m = rule.regex.search(folded)
            if m:
                return rule, m
        return None

    def all_matches(self, text: str) -> list[dict]:
        """Every rule that hits, best first (for explanations and debugging a rule set)."""
        folded = fold(text)
        return [r.explain(m) for r in self.rules if (m := r.regex.search(folded))]

    def match_explained(self, text: str) -> tuple[str, dict] | None:
        hit = self.match(text)
        if hit is None:
            return None
        rule, m = hit
        return rule.intent, rule.explain(m)
