"""How a waiting flow reads a customer's message, before any classifier or escalation rule judges it.

The engine asks this once a turn (``FlowEngine.listen``) and hands the reading back to ``on_message``, so a
message is never read twice; it changes nothing.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, replace
from typing import Any

from automation.tools.base import Caller
from automation.workflows import memory as M
from automation.workflows import understand as U
from automation.workflows.expr import ExpressionError, evaluate_bool
from automation.workflows.model import RISK_ORDER, Step
from automation.workflows.runtime import FlowRun
from automation.workflows.steps import REGISTRY, WAITING_KINDS, StepContext
from automation.workflows.steps import answers as A
from automation.workflows.store import Instance
from text.form import read_form

# What a waiting flow reads a customer's message as, before any classifier or escalation rule judges it:
#   answer      a value for the step (a slot, a choice, yes/no)
#   correction  a new value for an earlier answer ("no, make it 30", "不对，地址是…")
#   cancel      a change of mind ("never mind", "算了，不取消了")
#   waiting     a message while a person reviews the request (approval pending)
#   digression  a confident other topic: served, then the flow asks its question again
#   unclear     none of these: the step asks again with a hint (at most MAX_ATTEMPTS, then a person)
# The first five are the flow's own: the router's "unclear turn" and "repeated question" rules never count them.
READINGS = ("answer", "correction", "cancel", "waiting", "digression", "unclear")
CLAIMED = frozenset({"answer", "correction", "cancel", "waiting", "unclear"})
#: the readings by which the waiting flow takes a message (or one part of it) as its own
OWN = frozenset({"answer", "correction", "cancel"})
MAX_WALK = 100   # steps walked to find an offered task's first question
#: how sure the classifier must be that a message naming an option is a request of its own (a rule: 1.0)
OWN_REQUEST = 0.9


@dataclass
class Listening:
    """What the conversation's waiting flow made of this turn's message: read once, before the turn's
    classifier and escalation rules judge it, and handed back to ``on_message`` so it is not read again."""

    instance: Instance
    reading: str
    answer: str | None = None     # the part of the message that answers the step, when it is not all of it
    asked: str | None = None      # a question asked beside that answer, for the router to answer


def offered(instance: Instance | None) -> bool:
    """Is ``instance`` an offer the customer has not taken up yet?"""
    return bool(instance and instance["status"] == "waiting" and (instance.get("pending") or {}).get("offer"))


def first_question(run: FlowRun) -> tuple[FlowRun, Step, list[Step]] | None:
    """What the offered task would ask first, were it started now: walked from its first step on a copy, over the
    customer's session memory and the shop reads on the way (through the turn's outside port), through the steps
    that change nothing, as a start walks them. (the walk, the step that would wait, the waiting steps passed on
    the way without asking: the single order taken for the customer); None when it would write, end or fail
    first. Nothing is kept: the offer stays as it was."""
    inst, wf, services = run.inst, run.wf, run.services
    c = inst["caller"] or {}
    caller = Caller(channel=c.get("channel", ""), customer_id=c.get("customer_id", ""),
                    conversation_id=c.get("conversation_id") or inst["conversation_id"])
    draft = Instance(**copy.deepcopy({**inst, "history": [], "attempts": {}, "loops": {}}))  # type: ignore[typeddict-item]
    draft["status"], draft["step"] = "running", wf.first
    draft["pending"] = {"message": ((inst["pending"] or {}).get("offer") or {}).get("message") or "",
                        **({"intent": inst["pending"]["intent"]} if (inst["pending"] or {}).get("intent") else {})}
    # never an option by meaning alone: the walk asks nothing of the encoder
    walk = FlowRun(None, draft, wf, caller, run.lang, replace(services, similarity=None, observe=_unseen))
    if "memory" not in draft["bindings"]:
        spec = services.workflows.memory
        remembered = M.empty(spec)
        if spec is not None:
            remembered.update(M.shop_part(spec, services.tools, caller, run.lang, services.outside))
        draft["bindings"]["memory"] = remembered
    passed: list[Step] = []
    for _ in range(MAX_WALK):
        sid = draft["step"]
        if sid is None:
            return None
        step = wf.steps[sid]
        kind = REGISTRY[step.kind]
        try:
            if "when" in step.raw and not evaluate_bool(step.raw["when"], walk.scope()):
                draft["step"] = walk.after(step, transitions=False)
                continue
            if not kind.pure and not (step.kind == "call" and RISK_ORDER.get(
                    getattr(services.tools.spec(step.arg), "risk", "write"), 2) == 0):
                return None   # a write (or another kind of step) comes before any question
            outcome = kind.run(StepContext(walk, step, None, {}))
            if outcome == "wait" and kind.waits:
                return walk, step, passed
            if outcome in ("wait", "stop", None):
                return None
            if kind.waits:
                passed.append(step)
            draft["step"] = outcome if outcome != "next" else walk.after(step)
        except (ExpressionError, LookupError):
            return None
    return None


def answers_offer(run: FlowRun, text: str, entities: dict[str, Any], *, other: bool) -> bool:
    """"龙井那个" or "100230" to "shall I issue an invoice for one of your orders?": no yes, but what the task would
    ask first (which order, a value), so a yes all the same; the task starts with it as words already said. Only
    a statement the classifier cannot place elsewhere (``other``: a confident other intent), not a question, that
    gives what the task's first question asks (``StepKind.takes``: an option it names among the customer's
    orders, a value its slot reads), or what a question the task settled on its own on the way asks (the order,
    by its number or its item, when the single order was taken for them). "my sister bought it for me" or "那个快递员
    态度很差" give nothing the task asks: the offer lapses and the message is served as the new message it is.
    A bare reference ("the lamp order", "毛巾那个", "order 100240") is read as the pick it is whatever intent the
    classifier guessed for it (an order named alone sounds like an order-status question to it)."""
    bare = U.is_pointer(text) or (bool(U.order_ids(text)) and not U.content_words(text))
    if (other and not bare) or U.is_question(text) or read_form(text) == "question":
        return False
    if not (U.content_words(text) or U.order_ids(text)):
        return False
    found = first_question(run)
    if found is None:
        return False
    walk, step, passed = found
    return any(REGISTRY[s.kind].takes(walk, s, text, entities) for s in (step, *passed))


# an order named by its word and number ("order 100242", "订单100235", "单号 100235", "#100242"), never a postcode
_NAMES_ORDER = re.compile(r"(?:\border\s*(?:number\s*|no\.?\s*)?|订单号?|单号|#)\s*(?:是|is\s+)?[:：]?\s*\d{4,}", re.I)


def about_ended(run: FlowRun, text: str, entities: dict[str, Any], *, other: bool) -> str | None:
    """"21 Oak Road, Portland" (or "不对，地址是…") right after "order 100243 is already cancelled, so its address can
    no longer be changed": no flow waits, but the message gives a value the task that just ended refused to ask
    for (a slot it never filled, that the value plainly fits), or corrects one: it belongs to that task. The
    refusal again (the step's own words), so the reply can say truthfully why nothing was done; None when the
    message is not about it (a question, a confident other topic, a value of no slot the task had left)."""
    inst, wf = run.inst, run.wf
    if inst["status"] != "completed" or inst.get("outcome") != "refused" or other:
        return None
    if U.is_question(text) or read_form(text) == "question" or U.changes_mind(text) or _NAMES_ORDER.search(text):
        return None   # an order named ("把订单100235的地址改成…") is a task of its own, asked again
    refused = next((h.get("step") for h in reversed(inst.get("history") or []) if h.get("event") == "check_failed"),
                   None)
    step = wf.steps.get(refused) if refused else None
    refusal = step.get("refuse") if step is not None else None
    if not refusal:
        return None
    said = U.strip_correction(text)
    for s in wf.steps.values():
        name = REGISTRY[s.kind].asks_for(s) if s.kind in WAITING_KINDS else None
        slot = wf.slots.get(name) if name else None
        if name is None or slot is None or inst["slots"].get(name) is not None:
            continue
        v = slot.validate
        if "format" in v and slot.check(said):
            break   # an address where the task would have asked for one
        if (v.get("entity") not in (None, "text", "yes_no") or "regex" in v) \
                and A.stated(wf, name, said, entities) is not None and len(U.norm(said).split()) <= 4:
            break   # a bare value of the slot ("50" where the amount would have been asked)
    else:
        return None
    try:
        return run.text(refusal)
    except ExpressionError:
        return None


def _unseen(workflow: str, event: str) -> None:
    """A walk's steps are not the flow's: nothing is counted."""


def declined_beside(run: FlowRun, text: str) -> tuple[str, str] | None:
    """"不用了，谢谢你，我还想问下退货运费" at a question the customer may decline (a slot's ``optional``, a tax id):
    the decline answers it and the task goes on; what follows is a question asked beside it. (the decline, the
    question), or None."""
    instance, wf = run.inst, run.wf
    step = wf.steps.get(instance["step"]) if instance["step"] else None
    if step is None or step.kind not in WAITING_KINDS or instance["status"] != "waiting" or offered(instance):
        return None
    name = REGISTRY[step.kind].asks_for(step)
    slot = wf.slots.get(name) if name else None
    if slot is None or not slot.optional:
        return None
    split = U.declined_then(text)
    if split is None or not (U.is_question(split[1]) or read_form(split[1]) == "question"):
        return None
    return split if U.is_decline(split[0]) and slot.check(split[0]) else None


def reading(run: FlowRun, gone: str | None, text: str, entities: dict[str, Any], intent: str | None,
            intent_confidence: float | None, drift_threshold: float) -> str:
    """What the flow's waiting step reads ``text`` as (one of READINGS), changing nothing; ``gone`` says why the
    flow's definition no longer fits (it then reads nothing). ``intent``: the message's classification, or that
    of what follows when it opens by dropping the task (the router classifies that part alone)."""
    instance, wf = run.inst, run.wf
    if gone:
        return "unclear"
    if instance["status"] == "waiting_approval":
        return "cancel" if U.changes_mind(text) else "waiting"
    if offered(instance):   # the bot's own question "shall I start it?": yes, no, or something else
        if U.defers(text) and not U.is_question(text) and read_form(text) != "question":
            return "cancel"   # "ok I'll think about it", "好的，我再想想", "我先问问我老婆": a no for now, said politely
        if U.closes_with_thanks(text):
            return "digression"   # "ok thanks", "好的谢谢": the exchange closed, no yes; the offer lapses, thanks answered
        said = U.yes_no(text, entities)
        if said is True and not U.is_question(text):
            return "answer"
        if said is False:
            return "cancel"
        confident = intent is not None and intent_confidence is not None and intent_confidence >= drift_threshold
        other = confident and not wf.own_topic(intent)
        if confident and not other and read_form(text) == "request":
            return "answer"   # "cancel my order" to "shall I cancel one of your orders?": the task asked for
        # a cancel word drops the offer ("never mind", "算了"), unless it asks for another task or asks a question:
        # "can I cancel my order?" after an offered lookup is a new request, never "all right, I won't start it"
        if U.changes_mind(text, whole=True) and not other and not U.is_question(text) \
                and read_form(text) != "question":
            return "cancel"
        return "answer" if answers_offer(run, text, entities, other=other) else "digression"
    step = wf.steps.get(instance["step"]) if instance["step"] else None
    if step is None or step.kind not in WAITING_KINDS or instance["status"] != "waiting":
        return "answer"
    kind = REGISTRY[step.kind]
    try:
        strength = kind.strength(run, step, text, entities)
    except ExpressionError:
        return "unclear"
    free = kind.free_text(wf, step)
    other = (intent is not None and intent_confidence is not None and intent_confidence >= drift_threshold
             and not wf.own_topic(intent))
    # dropping the task, then asking something else ("哦不用了，我还是想查一下物流" at the address question, "never mind,
    # where is my order 100241?" at "which order?"); a decline alone ("not needed", "不用了") may be the answer
    rest = U.said_after_dropping(text)
    if rest and declined_beside(run, text) is not None:
        return "answer"   # "不用了，谢谢你，我还想问下退货运费" at the tax id: declined, and a question beside it
    if rest and not free and not other and kind.strength(run, step, rest, entities) == "strong":
        return "answer"   # "forget it, just refund the full amount", "算了，全额退吧": what follows answers the step
    # "算了，换成另一个订单吧": the earlier choice again, not the task dropped. Not when what follows the drop is a
    # request of its own, placed elsewhere by the classifier (``intent``: the router classifies it alone) or asked
    # ("算了还是不取消了，帮我查一下大米到哪了", "never mind, don't cancel it - where's my lamp?"): the task is dropped and
    # the request served, never the order it names picked for the task
    if rest and not other and not U.is_question(rest) and read_form(rest) != "question" \
            and kind.strength(run, step, rest, entities) is None and A.repick(run, step, rest, dry=True, bare=True):
        return "correction"
    if rest and not U.is_correction(rest) and (
            other or U.is_question(rest)
            or (read_form(rest) is not None and (free or kind.strength(run, step, rest, entities) is None))):
        return "cancel"   # unless what follows answers the step ("forget it, refund the full amount")
    mind = U.changes_mind(text, whole=free)
    if mind and step.kind == "confirm" and U.yes_no(text, entities) is not True \
            and not (U.is_correction(text) and A.correction(instance, wf, text, entities) is not None):
        return "cancel"   # "no thanks, leave it as it is" at a confirmation drops the task, not just this value
    if strength != "strong" and mind:
        return "cancel"
    if other and free and not U.is_question(text) and len(U.norm(text).split()) < 4 \
            and len(re.findall(r"[\u4e00-\u9fff]", text)) < 6:
        other = False   # a word or two at a free-text question ("ok" for an address): asked again, not another topic
    if other and U.only_consents(text):
        other = False   # "ok", "好的，继续吧" at "which order?": the customer lets the bot go on, no small talk
    if free and strength is not None and U.is_correction(text) and A.repick(run, step, text, dry=True) is not None:
        return "correction"   # "wait, I meant the second one" at the invoice title: the earlier choice, never a title
    if strength == "strong" and other and (intent_confidence or 0.0) >= OWN_REQUEST and step.kind in ("choose", "ask") \
            and U.order_ids(text) and U.is_free_value(text) and not U.is_correction(text):
        # "where is my order 100241?" at "which order should be refunded?": the number is named inside a request
        # of its own (another task, placed by a rule or nearly as surely), not picked for this one; served, then
        # asked again. "100241, it arrived damaged" (a reason beside the pick, placed loosely) still picks it
        return "digression"
    if strength == "strong" or (strength == "weak" and not U.is_question(text)):
        return "answer"   # a fuzzy choice ("the one with the boots") answers even when it sounds like a topic
    if U.is_correction(text) and (A.correction(instance, wf, text, entities, skip=step.arg) is not None or (
            step.kind == "confirm" and A.free_correction(instance, wf, step, text) is not None)
            or A.repick(run, step, text, dry=True) is not None):
        return "correction"
    if strength is None and not U.is_question(text) and A.repick(run, step, text, dry=True, bare=True) is not None:
        return "correction"   # "不粘锅那个" at the amount question: another of the orders offered, named alone
    if other:
        return "digression"
    return "unclear"
