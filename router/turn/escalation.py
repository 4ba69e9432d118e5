"""The escalation policy: deterministic rules that send a conversation to a human (L3).

Each rule has a name, and the one that fires is written into ``decision.escalation.rule`` with
a reason and a priority, so an agent (and the replay tool) sees exactly why a person was called.
Rules, checked in this order (the first that fires wins; every rule's verdict is in the trace):

``account_security``   an account-security intent with a sign of a compromised or frozen account (a rule of
                       the intent matched, or a ``security_phrases`` word: hacked, frozen, "not me"…); a
                       forgotten password is self-service (urgent)
``human_request``      the customer asks for a person (zh/en phrases or the human_agent intent)
``refund_amount``      a refund request whose amount is over the configured limit (default 500)
``dissatisfied``       N consecutive dissatisfied turns (zh/en lexicon or a complaint intent)
``repeated_question``  the same question asked N times in a row without resolution (normalised
                       text equality, or embedding cosine at or above a threshold)
``low_confidence``     N consecutive turns the classifier could not place (UNKNOWN / low score)
``loop_guard``         the conversation is about to re-enter the same state once too often without getting
                       anywhere: a round that ended resolved (the knowledge base answered, an assist draft was
                       approved) and turns a workflow served are not counted (a fourth question answered, or a
                       fourth task, in a session is normal work)

The policy is configured in YAML (bundled: ``router/samples/escalation.yaml``) together with the
harness and the fixed replies; the file is validated on load and errors name the line and field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from router.schemas import Escalation
from router.turn.guards import HarnessConfig, Lexicon, _phrases, normalise, squash
from router.turn.language import LocalText, local

SAMPLE_POLICY = Path(__file__).resolve().parents[1] / "samples" / "escalation.yaml"

RULES = ("account_security", "human_request", "refund_amount", "dissatisfied", "repeated_question",
         "low_confidence", "loop_guard")
PRIORITIES = ("low", "normal", "high", "urgent")
#: a guarded state and the state its round ends in when it got somewhere: the loop guard counts the rest
RESOLVED_BY = {"l1_resolving": "l1_resolved", "l2_assisting": "l2_resolved"}


class EscalationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    human_phrases: dict[str, list[str]] = Field(default_factory=lambda: {
        "zh": ["转人工", "人工客服"], "en": ["human agent", "real person"]})
    human_intents: list[str] = Field(default_factory=lambda: ["human_agent"])
    dissatisfied_phrases: dict[str, list[str]] = Field(default_factory=lambda: {
        "zh": ["没用", "不满意"], "en": ["useless", "not helpful"]})
    dissatisfied_intents: list[str] = Field(default_factory=lambda: ["complaint"])
    dissatisfied_turns: int = Field(default=2, ge=1)
    repeat_times: int = Field(default=2, ge=2, description="Asks of the same question in a row (current included).")
    repeat_similarity: float | None = Field(default=0.95, ge=0, le=1, description="Cosine for 'same question'; null = text only.")
    refund_amount_over: float = Field(default=500, ge=0)
    refund_intents: list[str] = Field(default_factory=lambda: ["refund_request"])
    refund_phrases: dict[str, list[str]] = Field(default_factory=lambda: {"zh": ["退款"], "en": ["refund"]})
    security_intents: list[str] = Field(default_factory=lambda: ["account_security"])
    security_phrases: dict[str, list[str]] = Field(default_factory=dict, description="Signs of a compromised or "
                                                   "frozen account; with any, a security intent escalates only "
                                                   "on a rule match or one of them (empty: on the intent alone).")
    low_confidence_below: float = Field(default=0.0, ge=0, le=1, description="Besides UNKNOWN, a score under this is low.")
    low_confidence_turns: int = Field(default=2, ge=1)
    loop_guard_reentries: int = Field(default=3, ge=1, description="Entries of one state per session before the guard fires.")
    loop_guard_states: list[str] = Field(default_factory=lambda: ["l1_resolving", "l2_assisting"])
    priorities: dict[str, str] = Field(default_factory=dict)
    intent_priorities: dict[str, str] = Field(default_factory=dict,
                                              description="Priority of an L3 ticket opened because of its intent.")

    def priority(self, rule: str) -> str:
        return self.priorities.get(rule, "normal")


class FeedbackConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    positive: dict[str, list[str]] = Field(default_factory=lambda: {"zh": ["谢谢", "解决了"], "en": ["thanks", "thank you"]})
    question_cues: dict[str, list[str]] = Field(default_factory=lambda: {
        "zh": ["吗", "呢", "么", "但是"], "en": ["how", "what", "where", "why", "but"]})
    max_chars: int = Field(default=40, ge=1, description="Longer messages are questions, not a closing thank-you.")



UNKNOWN_MODES = ("clarify_then_escalate", "escalate")


class Replies(BaseModel):
    """The fixed replies, each one text or one per language; extra keys are reply templates that
    intents name with ``serve: reply <name>`` (greeting, thanks, ...)."""

    model_config = ConfigDict(extra="allow")
    ack_l2: LocalText = {"en": "Let me check this with a colleague; we will get back to you shortly.",
                         "zh": "我们正在为您核实，稍后回复您。"}
    ack_l3: LocalText = {"en": "A member of our team will take over this conversation shortly.",
                         "zh": "正在为您转接人工客服，请稍候。"}
    closing: LocalText = {"en": "You're welcome, glad we could help.", "zh": "不客气，很高兴能帮到您！"}
    clarify: LocalText = {"en": "Sorry, I did not quite get that. I can help with orders, delivery, returns and "
                                "refunds, payments, invoices and your account. What would you like to do?",
                          "zh": "抱歉，我没太明白。我可以帮您查询订单和物流、办理退货退款、解答支付、发票和账户问题。请问您需要什么帮助？"}
    still_waiting: LocalText = {"en": "Thanks, your message is with our team; someone will be with you as soon as "
                                      "possible.",
                                "zh": "收到，您的消息已转给我们的客服，请稍候，我们会尽快回复您。"}
    queue_position: LocalText = {"en": "You are number {position} in the queue.", "zh": "您目前排在第 {position} 位。"}
    typical_wait: LocalText = {"en": "Someone usually replies within about {minutes} min.",
                               "zh": "通常约 {minutes} 分钟内会有客服回复。"}
    ask_order_number: LocalText = {"en": "I can look into that. What is your order number? (You'll find it in your "
                                         "order confirmation.)",
                                   "zh": "好的，我来帮您查询。请提供您的订单号（见订单确认信息）。"}

    offer_task: LocalText = {"en": "Would you like me to help with one of your orders ({task})? Just reply \"yes\".",
                             "zh": "需要我为您的订单办理“{task}”吗？回复“是”即可。"}
    # a short follow-up to a task just done ("can you make it faster?" after an order's status) that the knowledge
    # base cannot answer in its context: what cannot be done for that order, and who can help
    follow_up_order: LocalText = {"en": "I can't change how order {order} is handled from here. If you'd like a "
                                        "colleague to look into it, just say \"talk to a person\".",
                                  "zh": "订单 {order} 的处理我这边没办法更改。如需同事帮您跟进，回复“转人工”即可。"}
    question_kept: LocalText = {"en": "I'll come back to your question (\"{question}\") once this is done.",
                                "zh": "您的问题（“{question}”）我会在这件事办完后接着处理。"}

    def model_post_init(self, __context) -> None:
        for key, value in (self.model_extra or {}).items():
            ok = isinstance(value, str) or (isinstance(value, dict) and value
                                            and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()))
            if not ok:
                raise ValueError(f"replies.{key}: a reply template is a text or a mapping language -> text")

    def names(self) -> set[str]:
        return set(type(self).model_fields) | set(self.model_extra or {})

    def text(self, key: str, lang: str | None, default: str = "en") -> str:
        value = getattr(self, key, None)
        if value is None:
            value = (self.model_extra or {}).get(key)
        if value is None:
            raise KeyError(f"no reply template {key!r}")
        return local(value, lang, default)


class Policy(BaseModel):
    """The whole routing policy file: harness checks, escalation rules, feedback words, fixed replies."""

    model_config = ConfigDict(extra="forbid")
    version: int = 1
    default_language: Literal["en", "zh"] = Field(default="en", description="Reply language when a message does not tell "
                                                 "and the conversation has none yet.")
    unknown: Literal["clarify_then_escalate", "escalate"] = Field(
        "escalate", description="A message that matches no intent: clarify_then_escalate = the first one of a "
        "run gets `replies.clarify` with `suggestions` (no ticket), later ones go to a person per the escalation "
        "rules / unknown tier; escalate = straight to the unknown tier (L2).")
    suggestions: dict[str, list[str]] = Field(default_factory=dict, description="Quick replies sent with the "
                                              "clarifying reply, per language.")
    still_waiting_seconds: int = Field(default=300, ge=0, description="A customer who writes while waiting in the queue "
                                       "(nobody has taken the conversation yet) gets replies.still_waiting when the "
                                       "bot has said nothing for this long; 0 = never (silence).")
    harness: HarnessConfig = Field(default_factory=HarnessConfig)
    escalation: EscalationConfig = Field(default_factory=EscalationConfig)
    feedback: FeedbackConfig = Field(default_factory=FeedbackConfig)
    replies: Replies = Field(default_factory=Replies)

    def model_post_init(self, __context) -> None:
        bad = {k: v for k, v in {**self.escalation.priorities, **self.escalation.intent_priorities}.items()
               if v not in PRIORITIES}
        if bad:
            raise ValueError(f"unknown priorities {bad}; use one of {', '.join(PRIORITIES)}")
        unknown = set(self.escalation.priorities) - set(RULES)
        if unknown:
            raise ValueError(f"escalation.priorities names unknown rules {sorted(unknown)}; rules: {', '.join(RULES)}")

    def reply(self, key: str, lang: str | None) -> str:
        return self.replies.text(key, lang, self.default_language)

    def suggestions_for(self, lang: str | None) -> list[str]:
        s = self.suggestions
        return list(s.get(lang or self.default_language) or s.get(self.default_language) or [])


class PolicyError(ValueError):
    """The policy file is invalid; the message names the file, line and field."""


def _line_of(root, loc: tuple) -> int | None:
    """The 1-based line of the YAML node at ``loc`` (or its nearest existing parent)."""
    node, line = root, None
    for key in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == str(key)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            node = None
    if node is not None:
        line = node.start_mark.line + 1
    return line


def load_policy(path: str | Path | None = None) -> Policy:
    """Load and validate a policy file (None: the bundled sample)."""
    path = Path(path) if path else SAMPLE_POLICY
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file: {exc}") from exc
    try:
        data = yaml.safe_load(text) or {}
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PolicyError(f"{path}: the policy must be a mapping")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = tuple(err.get("loc", ()))
            where = ".".join(str(p) for p in loc) or "(top level)"
            line = _line_of(root, loc) if root is not None else None
            lines.append(f"{path}:{line or '?'}: {where}: {err['msg']}")
        raise PolicyError("invalid policy file\n" + "\n".join(lines)) from exc


# -- evaluation ----------------------------------------------------------------------------------


@dataclass
class EscalationVerdict:
    """The policy's answer for one turn: the escalation (or None), every rule's check, counter updates."""

    rule: str | None = None
    reason: str | None = None
    priority: str = "normal"
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)

    @property
    def escalate(self) -> bool:
        return self.rule is not None

    def as_escalation(self) -> Escalation | None:
        """The escalation a decision records, or None when no rule fired (a rule always comes with its reason)."""
        if self.rule is None or self.reason is None:
            return None
        return Escalation(rule=self.rule, reason=self.reason, priority=self.priority)


# "are you actually a person?", "tell me if you are a human or a computer", "你到底是不是真人": a question about who
# is talking, not a request for a person; a request verb ("let me talk to a human", "转人工") is never one.
_IDENTITY = re.compile(
    r"\b(?:are|r)\s+(?:you|u|ya)\b[^.?!。？！]{0,30}?\b(?:human|person|people|bot|robot|machine|computer|ai|real|"
    r"automated|chatbot|live|program)\b"
    r"|\byou(?:'re|\s+are|\s+r)\s+(?:actually\s+|really\s+|just\s+)?(?:a\s+|an\s+)?(?:human|person|bot|robot|machine|"
    r"computer|ai|real\s+person|chatbot|program)\b"
    r"|\b(?:is\s+this|am\s+i\s+(?:talking|chatting|speaking)\s+(?:to|with))\s+(?:a\s+|an\s+)?(?:actual\s+|real\s+)?"
    r"(?:human|person|bot|robot|machine|computer|ai|automated|chatbot)\b"
    r"|(?:你|您|这)(?:到底|究竟|真的)?(?:是不是|是)[^，。？！,?!]{0,4}(?:真人|机器人|机器|人工智能|ai|AI|程序|人吗|人还是|人类)",
    re.I)
_REQUEST_VERB = re.compile(r"\b(?:talk|speak|chat|connect|transfer|put\s+me|get\s+me|give\s+me|let\s+me|want|need|"
                           r"prefer|switch)\b|转|找|要|接|叫|换", re.I)


def asks_identity(text: str) -> bool:
    """A question about whether the bot is a person, never a request to talk to one."""
    t = text or ""
    return len(t) <= 200 and bool(_IDENTITY.search(t)) and not _REQUEST_VERB.search(t)


def _refund_amount(entities: dict[str, Any] | None) -> dict[str, Any] | None:
    amounts = [a for a in (entities or {}).get("amounts", []) if isinstance(a.get("value"), int | float)]
    return max(amounts, key=lambda a: a["value"]) if amounts else None


class EscalationPolicy:
    def __init__(self, config: EscalationConfig | None = None, feedback: FeedbackConfig | None = None,
                 encoder: Any = None):
        self.config = config or EscalationConfig()
        self.encoder = encoder
        self._human = Lexicon(_phrases(self.config.human_phrases))
        self._dissatisfied = Lexicon(_phrases(self.config.dissatisfied_phrases))
        self._refund = Lexicon(_phrases(self.config.refund_phrases))
        self._security = Lexicon(_phrases(self.config.security_phrases))
        fb = feedback or FeedbackConfig()
        self._positive = Lexicon(_phrases(fb.positive))
        self._positive_max = fb.max_chars
        self._question = Lexicon(_phrases(fb.question_cues))

    # -- signals used outside the rules --

    def is_positive_feedback(self, text: str) -> bool:
        """A short thank-you / "that solved it" that closes the session rather than asks something."""
        norm = normalise(text)
        return (len(norm) <= self._positive_max and bool(self._positive.find(norm, normalised=True))
                and not self._dissatisfied.find(norm, normalised=True)
                and not self._question.find(norm, normalised=True) and "?" not in norm)

    def asks_for_person(self, text: str) -> str | None:
        """The human-request phrase in ``text`` (zh/en), if any."""
        return self._human.find(text)

    def is_dissatisfied(self, text: str, intent: str | None = None) -> str | None:
        hit = self._dissatisfied.find(text)
        if hit:
            return hit
        if intent and intent in self.config.dissatisfied_intents:
            return f"intent:{intent}"
        return None

    def same_question(self, previous: str | None, current: str) -> dict[str, Any]:
        """Is ``current`` the same question as ``previous``? By squashed text, else by cosine."""
        if not previous:
            return {"same": False, "by": None}
        if squash(previous) == squash(current):
            return {"same": True, "by": "text"}
        if self.encoder is None or self.config.repeat_similarity is None:
            return {"same": False, "by": "text"}
        vecs = np.asarray(self.encoder.encode_queries([previous, current]), dtype=np.float32)
        cosine = float(vecs[0] @ vecs[1])
        return {"same": cosine >= self.config.repeat_similarity, "by": "embedding", "cosine": round(cosine, 4),
                "threshold": self.config.repeat_similarity}

    # -- the rules --

    def evaluate(self, *, text: str, classification: Any, counters: dict[str, Any],
                 target_state: str | None, claimed: bool = False) -> EscalationVerdict:
        """Check every rule for one routed message; ``counters`` are this session's (see router.turn.state).

        ``target_state`` is where the conversation would go without an escalation (None: it stays
        where it is, so the loop guard has nothing to count).

        ``claimed``: a waiting workflow read the message as its own (an answer, a correction, a change of
        mind, a re-ask). Then only what the customer says outright counts (a phrase asking for a person,
        a dissatisfied phrase, a refund over the limit, a rule-matched intent): the classifier's guess
        about "50" or "个人" is not an intent, the turn is not unclear and an answer is not a repeated question.
        """
        cfg = self.config
        intent = getattr(classification, "intent", None)
        confidence = float(getattr(classification, "confidence", 0.0) or 0.0)
        entities = getattr(classification, "entities", None) or {}
        if claimed and getattr(classification, "decided_by", None) != "rules":
            intent = None   # a guess about an answer; rule matches (a lexicon hit) still count
        checks: dict[str, dict[str, Any]] = {}
        fired: list[tuple[str, str]] = []

        secure = intent in cfg.security_intents
        sign = self._security.find(text) if secure and cfg.security_phrases else None
        by_rule = secure and getattr(classification, "decided_by", None) == "rules"
        checks["account_security"] = {"fired": secure and (not cfg.security_phrases or by_rule or bool(sign)),
                                      "intent": intent, "phrase": sign, "rule": by_rule}
        if checks["account_security"]["fired"]:
            fired.append(("account_security", f"account-security intent {intent}" + (f" ({sign})" if sign else "")))

        phrase = self._human.find(text)
        by_intent = intent in cfg.human_intents
        identity = bool(phrase or by_intent) and asks_identity(text)
        if identity:   # "are you a real person?" asks who is talking
            phrase, by_intent = None, False
        checks["human_request"] = {"fired": bool(phrase or by_intent), "phrase": phrase, "intent": by_intent,
                                   "identity_question": identity}
        if phrase or by_intent:
            fired.append(("human_request", f"the customer asked for a person ({phrase or 'intent ' + str(intent)})"))

        amount = _refund_amount(entities)
        refund_talk = intent in cfg.refund_intents or bool(self._refund.find(text))
        over = bool(amount and refund_talk and amount["value"] > cfg.refund_amount_over)
        checks["refund_amount"] = {"fired": over, "amount": amount, "refund": refund_talk,
                                   "limit": cfg.refund_amount_over}
        if over and amount is not None:
            fired.append(("refund_amount", f"refund of {amount.get('text') or amount['value']} "
                                           f"is over {cfg.refund_amount_over:g}"))

        unhappy = self.is_dissatisfied(text, intent)
        streak = counters.get("dissatisfied_streak", 0) + 1 if unhappy else 0
        checks["dissatisfied"] = {"fired": streak >= cfg.dissatisfied_turns, "signal": unhappy, "streak": streak,
                                  "turns": cfg.dissatisfied_turns}
        if checks["dissatisfied"]["fired"]:
            fired.append(("dissatisfied", f"{streak} dissatisfied turns in a row"))

        same = {"same": False, "by": "workflow"} if claimed else self.same_question(counters.get("last_question"), text)
        repeats = counters.get("repeat_count", 0) + 1 if same["same"] else 0 if claimed else 1
        checks["repeated_question"] = {"fired": repeats >= cfg.repeat_times, "times": repeats, **same}
        if checks["repeated_question"]["fired"]:
            fired.append(("repeated_question", f"the same question asked {repeats} times without resolution"))

        low = not claimed and (intent is None or confidence < cfg.low_confidence_below)
        low_streak = counters.get("low_confidence_streak", 0) + 1 if low else 0
        checks["low_confidence"] = {"fired": low_streak >= cfg.low_confidence_turns, "streak": low_streak,
                                    "confidence": round(confidence, 4), "unknown": intent is None,
                                    "claimed_by_workflow": claimed}
        if checks["low_confidence"]["fired"]:
            fired.append(("low_confidence", f"{low_streak} turns in a row the intent was unclear"))

        seen = counters.get("state_entries") or {}
        entries = int(seen.get(target_state, 0)) if target_state else 0
        if target_state in RESOLVED_BY:   # rounds that ended resolved got somewhere: only the others loop
            entries -= min(entries, int(seen.get(RESOLVED_BY[target_state], 0)))
        loop = target_state in cfg.loop_guard_states and entries >= cfg.loop_guard_reentries
        checks["loop_guard"] = {"fired": loop, "state": target_state, "entries": entries,
                                "limit": cfg.loop_guard_reentries}
        if loop:
            fired.append(("loop_guard", f"state {target_state} entered {entries} times this session"))

        verdict = EscalationVerdict(checks=checks, counters={
            "dissatisfied_streak": streak, "low_confidence_streak": low_streak, "repeat_count": repeats,
            "last_question": None if claimed else text,
        })
        if fired:
            order = {r: i for i, r in enumerate(RULES)}
            rule, reason = min(fired, key=lambda f: order[f[0]])
            verdict.rule, verdict.reason, verdict.priority = rule, reason, cfg.priority(rule)
        return verdict
