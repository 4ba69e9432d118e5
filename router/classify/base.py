"""The intent classifier's interface: rules first, embeddings second, always with an explanation.

Callers (the webhook decider, the eval CLI, the benchmark) use :class:`IntentClassifier` and
read a :class:`Classification`; the two channels behind it are small protocols so either can
be swapped (another rule engine, another scorer) without touching callers.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from router.classify.asking import asks_leave, request_parts
from router.classify.entities import extract_entities
from router.classify.intents import IntentConfig
from text.form import read_form

log = logging.getLogger(__name__)

RULES = "rules"
EMBEDDINGS = "embeddings"


@dataclass
class Classification:
    """One decision. ``intent is None`` means UNKNOWN (out of scope); ``tier`` is then the config's unknown tier."""

    intent: str | None
    tier: str                       # "L1" | "L2" | "L3"
    confidence: float               # rules: 1.0; embeddings: the calibrated score compared with the threshold
    decided_by: str                 # "rules" | "embeddings"
    explanation: dict[str, Any] = field(default_factory=dict)
    entities: dict[str, Any] = field(default_factory=lambda: {"order_numbers": [], "amounts": []})

    @property
    def unknown(self) -> bool:
        return self.intent is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RuleChannel(Protocol):
    """Deterministic matching: returns (intent, explanation) for a hit, else None."""

    def match_explained(self, text: str) -> tuple[str, dict[str, Any]] | None: ...


class EmbeddingChannel(Protocol):
    """Scores message vectors (and their texts) against the intents; ``intent`` is None below the threshold."""

    def score(self, vectors: np.ndarray, texts: list[str], pools: Sequence[Sequence[str]] = (),
              barred: Sequence[str] = ()) -> list[tuple[str | None, float, dict[str, Any]]]: ...


class IntentClassifier:
    """Rules, then embeddings, then the threshold; tier from the intents config.

    Thread-safe for concurrent ``classify`` calls (the encoder serialises its own tokenizer);
    :meth:`reload` swaps the whole compiled state at once, so a hot reload never mixes configs.
    """

    def __init__(self, config: IntentConfig, rules: RuleChannel | None, embeddings: EmbeddingChannel | None,
                 encoder: Any = None):
        self._state = (config, rules, embeddings)
        self.encoder = encoder
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: IntentConfig, encoder: Any, *, example_vectors: np.ndarray | None = None,
                    oos_vectors: np.ndarray | None = None, cache_dir: str | Path | None = None) -> IntentClassifier:
        """Compile the rules and, when there is an encoder and examples, build the embedding channel.

        A config without a threshold, or fitted with another encoder, is fitted here from its own examples
        (cross-validation, see router.classify.fit) — thresholds only mean something for the encoder they
        were fitted with. A config that carries its fit is used as written, even when its examples changed
        since (logged: ``switchboard router fit --intents FILE`` fits it again). ``example_vectors`` /
        ``oos_vectors`` (rows in config order) skip re-encoding the examples; ``cache_dir`` keeps trained heads
        on disk.
        """
        from router.classify.embedding import EmbeddingScorer
        from router.classify.fit import needs_fit, refit_config, stale_fit
        from router.classify.rules import RuleMatcher

        rules = RuleMatcher(config)
        embeddings = None
        if encoder is not None and any(i.examples for i in config.intents):
            texts = [e for i in config.intents for e in i.examples]
            if example_vectors is None:
                example_vectors = encoder.encode_queries(texts)
            if oos_vectors is None and config.oos_examples:
                oos_vectors = encoder.encode_queries(config.oos_examples)
            reason = needs_fit(config, encoder)
            if reason:
                log.info("fitting the intent threshold at load: %s", reason)
                config = refit_config(config, example_vectors, oos_vectors, encoder_name=_encoder_name(encoder))
            elif stale_fit(config):
                log.warning("the intent examples changed since the threshold was fitted: the stored threshold %s "
                            "is kept; `switchboard router fit --intents FILE` fits it again (review its report)",
                            config.threshold)
            embeddings = EmbeddingScorer.build(config, encoder, threshold=config.threshold,
                                               example_vectors=example_vectors, oos_vectors=oos_vectors,
                                               cache_dir=Path(cache_dir) if cache_dir else None)
        return cls(config, rules if len(rules) else None, embeddings, encoder)

    @property
    def config(self) -> IntentConfig:
        return self._state[0]

    def reload(self, config: IntentConfig, *, cache_dir: str | Path | None = None) -> None:
        """Rebuild from a new config and swap atomically (SIGHUP / file change)."""
        fresh = IntentClassifier.from_config(config, self.encoder, cache_dir=cache_dir)
        with self._lock:
            self._state = fresh._state

    def adopt(self, fresh: IntentClassifier) -> None:
        """Take ``fresh``'s compiled state atomically (a reload built elsewhere, e.g. from cached fits)."""
        with self._lock:
            self._state = fresh._state

    def reload_file(self, path: str | Path, *, cache_dir: str | Path | None = None,
                    build: Callable[[IntentConfig], IntentClassifier] | None = None) -> bool:
        """Reload from an intents file; a broken file is logged and the running config kept.

        ``build`` makes the new classifier as the gateway made the first one (the composition root's, which
        reads the examples' vectors and the threshold fit from their caches, so an unchanged file reloads in
        a moment instead of fitting again); without it the config is compiled here."""
        from router.classify.intents import IntentConfigError, load_intents

        try:
            config = load_intents(path)
            if build is not None:
                self.adopt(build(config))
            else:
                self.reload(config, cache_dir=cache_dir)
        except (IntentConfigError, ValueError) as exc:
            log.error("intents file not reloaded, keeping the running config: %s", exc)
            return False
        log.info("reloaded intents from %s (%d intents)", path, len(config.intents))
        return True

    def reload_on_sighup(self, path: str | Path, *, cache_dir: str | Path | None = None) -> bool:
        """Re-read ``path`` on SIGHUP (in a thread, so the signal handler returns at once).

        Only the main thread may install signal handlers; elsewhere this is a no-op returning False.
        """
        import signal

        if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
            return False

        def handler(signum, frame):
            t = threading.Thread(target=self.reload_file, args=(path,), kwargs={"cache_dir": cache_dir},
                                 name="intents-reload", daemon=True)
            t.start()
            self.last_reload = t

        signal.signal(signal.SIGHUP, handler)
        return True

    def tier_of(self, intent: str | None) -> str:
        return self.config.tier_of(intent)

    def classify(self, text: str, *, pools: Sequence[Sequence[str]] = ()) -> Classification:
        """``pools``: groups of intents that lead to one task, their evidence pooled when deciding whether the
        message is in scope (EmbeddingScorer.score); the rules are not concerned."""
        return self.classify_batch([text], pools=pools)[0]

    def classify_batch(self, texts: list[str], *, batch_size: int = 32,
                       pools: Sequence[Sequence[str]] = ()) -> list[Classification]:
        config, rules, embeddings = self._state
        out: list[Classification | None] = [None] * len(texts)
        pending: list[int] = []
        for i, text in enumerate(texts):
            entities = extract_entities(text)
            hit = rules.match_explained(text) if rules is not None else None
            if hit is not None:
                intent, why = hit
                out[i] = Classification(intent, config.tier_of(intent), 1.0, RULES, {"channel": RULES, "rule": why},
                                        entities)
            elif embeddings is None:
                out[i] = Classification(None, config.unknown_tier, 0.0, RULES,
                                        {"channel": RULES, "rule": None,
                                         "reason": "no rule matched and there is no embedding channel"}, entities)
            else:
                out[i] = Classification(None, config.unknown_tier, 0.0, EMBEDDINGS, {}, entities)
                pending.append(i)
        if pending:
            vectors = self.encoder.encode_queries([texts[i] for i in pending], batch_size=batch_size)
            scored = embeddings.score(vectors, [texts[i] for i in pending], pools)
            scored = self._no_lookup_for_leave(embeddings, config, vectors, [texts[i] for i in pending], scored, pools)
            for i, (intent, score, why) in zip(pending, scored, strict=True):
                c = out[i]
                c.intent, c.confidence, c.tier = intent, float(score), config.tier_of(intent)
                c.explanation = {"channel": EMBEDDINGS, **why}
                if intent is not None and c.tier == "L3" and thin(texts[i]):
                    # a person is asked for in words (the rules, the escalation's phrases); a guess from a word or
                    # two ("个人" beside "人工") is not enough to open a ticket: the message is unsure (clarified)
                    c.intent, c.tier = None, config.unknown_tier
                    c.explanation["thin"] = {"guess": intent, "reason": "too few words for an embedding guess of an "
                                                                        "L3 intent"}
            self._the_act_asked(config, rules, embeddings, [out[i] for i in pending], [texts[i] for i in pending],
                                batch_size)
        return out  # type: ignore[return-value]

    def _the_act_asked(self, config: IntentConfig, rules: RuleChannel | None, embeddings: EmbeddingChannel,
                       decided: Sequence[Classification | None], texts: list[str], batch_size: int) -> None:
        """A request that gives its reason ("refund 5 dollars on the lamp order, the bulb was broken", "cancel my order,
        it's taking too long", "我要退10块钱，灯泡是坏的") is the act it asks for: the problem told as the reason weighs
        as much in the encoder as the act, and may win. Where the embeddings chose an intent that does nothing for the
        customer (no ``task``, or none at all) and the message is no question, each part of it
        (router.classify.asking.request_parts) that reads as a request (text.form) is classified on its own: a part a
        rule places first, else the first the embeddings place, whose intent has a task takes the message (the
        explanation says ``asked``; the entities stay the whole message's). A plain report
        ("the bulb arrived broken") or one asking for help ("please help, my vase arrived broken": help is no task)
        keeps its intent."""
        tasks = {i.name for i in config.intents if i.task}
        if not tasks:
            return
        asked: list[tuple[int, str]] = []
        for k, (c, text) in enumerate(zip(decided, texts, strict=True)):
            if c is None or c.intent in tasks or read_form(text) == "question":
                continue
            asked += [(k, part) for part in request_parts(text)]
        if not asked:
            return
        found: dict[int, tuple[str, Classification]] = {}
        by_embeddings: list[tuple[int, str]] = []
        for k, part in asked:
            hit = rules.match_explained(part) if rules is not None else None
            if hit is None:
                by_embeddings.append((k, part))
            elif hit[0] in tasks and k not in found:
                found[k] = (part, Classification(hit[0], config.tier_of(hit[0]), 1.0, RULES,
                                                 {"channel": RULES, "rule": hit[1]}))
        if by_embeddings:
            vectors = self.encoder.encode_queries([p for _, p in by_embeddings], batch_size=batch_size)
            for (k, part), (intent, score, why) in zip(by_embeddings, embeddings.score(vectors, [p for _, p in
                                                                                                by_embeddings]),
                                                       strict=True):
                if intent in tasks and k not in found:
                    found[k] = (part, Classification(intent, config.tier_of(intent), float(score), EMBEDDINGS,
                                                     {"channel": EMBEDDINGS, **why}))
        for k, (part, act) in sorted(found.items()):
            c = decided[k]
            assert c is not None
            before = {"intent": c.intent, "score": round(c.confidence, 4),
                      "candidate": c.explanation.get("candidate")}
            c.intent, c.tier, c.confidence, c.decided_by = act.intent, act.tier, act.confidence, act.decided_by
            c.explanation = {**act.explanation, "asked": {
                "part": part, "instead_of": before,
                "reason": "a request is the act it asks for, not the problem it gives as the reason"}}

    @staticmethod
    def _no_lookup_for_leave(embeddings: EmbeddingChannel, config: IntentConfig, vectors: np.ndarray, texts: list[str],
                             scored: list[tuple[str | None, float, dict[str, Any]]], pools: Sequence[Sequence[str]]
                             ) -> list[tuple[str | None, float, dict[str, Any]]]:
        """A question whether something may be done ("can I add something to my order?", "订单能加东西吗",
        router.classify.asking) that the embeddings placed nearest a lookup of the customer's own data (Intent.looks_up):
        scored again as none of the lookups, so it goes to an intent that answers it (or none), never to the order
        number a lookup asks for."""
        lookups = config.lookups
        again = [k for k, (_, _, why) in enumerate(scored) if why.get("candidate") in lookups and asks_leave(texts[k])]
        if not again or not lookups:
            return scored
        out = list(scored)
        rescored = embeddings.score(vectors[again], [texts[k] for k in again], pools, barred=lookups)
        for k, (intent, score, why) in zip(again, rescored, strict=True):
            before = scored[k]
            why["barred"] = {"intents": lookups, "candidate": before[2].get("candidate"), "score": round(before[1], 4),
                             "reason": "a question whether something may be done is answered, not looked up"}
            out[k] = (intent, score, why)
        return out


#: a message of at most this many words (a CJK character counts as one) is too thin for the embeddings alone
#: to hand it to a person
THIN_WORDS = 2
_WORD = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[^\W\d_]+", re.UNICODE)


def thin(text: str) -> bool:
    """Whether ``text`` has at most THIN_WORDS words (each CJK character one word; digits and signs none)."""
    return len(_WORD.findall(text or "")) <= THIN_WORDS


def _encoder_name(encoder: Any) -> str | None:
    return getattr(encoder, "name", None)
