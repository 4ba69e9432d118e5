"""The flow engine: runs a workflow's steps for one conversation, durably, one turn at a time.

A turn hands in its own psycopg connection (its transaction); the engine locks the instance
row, runs steps until one must wait (a question, a confirmation, an approval) or the flow ends,
saves the row and returns a ``FlowTurn`` for the reply. Nothing is committed here: the caller
commits the flow together with the turn and its outbox row, so a crash loses both or neither.

Exactly once: a write call carries an idempotency key made of the instance id, the step id,
the foreach indexes and the plan generation (bumped only when the customer or an approver changes
the plan), so a retried step, a crashed turn or a restarted gateway sends the same key and the
shop does not repeat the write. The bot states an action only from the tool's real result.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol

from automation.tools.base import Caller, ToolGateway
from automation.workflows import memory as M
from automation.workflows import store
from automation.workflows.expr import (Envs, ExpressionError, Scope, same_value, evaluate, evaluate_bool,
                                       evaluate_columns, evaluate_each, evaluate_value, format_value, render,
                                       render_each)
from automation.workflows.spec import RISK_ORDER, Step, Workflow, WorkflowSet
from automation.workflows import requests as R
from automation.workflows import understand as U

MAX_STEPS_PER_TURN = 400
MAX_ATTEMPTS = 3
WAITING_KINDS = ("ask", "split", "choose", "confirm")

# the approval levels in the customer's words ("需要主管审核", never "需要supervisor审核")
TIER_WORDS = {"zh": {"supervisor": "主管", "manager": "经理", "director": "总监", "auto": "自动"},
              "en": {"supervisor": "supervisor", "manager": "manager", "director": "director", "auto": "automatic"}}

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

TEXT = {
    "retry": {"zh": "抱歉，我没有听明白。", "en": "Sorry, I didn't catch that."},
    "choose_again": {"zh": "有几项都符合，请问是哪一个？", "en": "Several match. Which one do you mean?"},
    "tool_failed": {"zh": "抱歉，这一步暂时没能完成（{error}）。您回复任意内容我会再试一次。",
                    "en": "I couldn't complete that yet ({error}). Reply and I will try again."},
    "handoff": {"zh": "我把您的请求转给同事处理，请稍候。", "en": "I'm passing this to a colleague who can help. Please hold on."},
    "cancelled": {"zh": "好的，已停止办理，不会再做后续操作。", "en": "OK, I've stopped here; nothing further will be done."},
    "waiting_approval": {"zh": "您的请求（{amount} {currency}）需要{tier}审核，审核结果出来后我会告诉您。",
                         "en": "Your request ({amount} {currency}) needs a {tier} review. I'll tell you the outcome."},
    "still_reviewing": {"zh": "您的请求仍在审核中，结果出来后我会告诉您。",
                        "en": "Your request is still being reviewed. I'll tell you as soon as there is a decision."},
    "withdrawn": {"zh": "好的，已撤回您的审核申请，不会再做任何操作。",
                  "en": "OK, I've withdrawn your request from review; nothing will be done."},
    "approved": {"zh": "您的请求已通过审核。", "en": "Your request was approved."},
    "rejected": {"zh": "很抱歉，您的请求未通过审核。", "en": "Sorry, your request was not approved."},
    "no_recall": {"zh": "我这里没有您上次的记录。", "en": "I have no record of an earlier one."},
    "confirm_yes": {"zh": "是", "en": "Yes"},
    "confirm_no": {"zh": "否", "en": "No"},
    "loop": {"zh": "流程出现循环，我把您转给同事。", "en": "This is going in circles; I'm passing you to a colleague."},
    "changed": {"zh": "抱歉，这项业务的流程刚刚更新，我把您转给同事继续办理，请稍候。",
                "en": "Sorry, the process for this request has just been updated; a colleague will take it "
                      "from here. Please hold on."},
    "broken": {"zh": "抱歉，这个流程出了问题，我把您转给同事。", "en": "Sorry, something went wrong in this process; a colleague will take over."},
    "resume": {"zh": "回到您刚才的{task}：", "en": "Back to your earlier request ({task}):"},
    "offer_declined": {"zh": "好的，先不办理。还有什么可以帮您的吗？", "en": "All right, I won't start it. Anything else I can help with?"},
    "cancelled_by_staff": {"zh": "抱歉，我们的同事审核后取消了您的这项请求，不会做任何操作。如有疑问请回复我们。",
                           "en": "Sorry, a colleague reviewed your request and cancelled it; nothing was done. "
                                 "Reply if you have any questions."},
}


def _t(key: str, lang: str, **kw: Any) -> str:
    text = TEXT[key].get(lang) or TEXT[key]["en"]
    return text.format(**kw) if kw else text


@dataclass
class ApprovalRequest:
    instance_id: str
    conversation_id: str
    workflow: str
    step: str
    amount: float
    currency: str | None
    tier: str
    order: Any
    proposed_call: dict[str, Any]        # {"tool", "arguments"}
    evidence: Any
    customer: dict[str, Any]             # {"channel", "customer_id"}
    lang: str = "en"


class ApprovalPort(Protocol):
    """Opens a human approval (the router implements it over the handoff queue); returns the ticket id.

    A port may also offer ``withdraw_approval(conn, ticket_id, reason)``: the customer cancelled while
    the approval was pending, so the ticket is closed and a later decision has nothing to apply."""

    def open_approval(self, conn: Any, request: ApprovalRequest) -> str: ...


@dataclass
class HandoffRequest:
    tier: str                             # L2 | L3
    reason: str
    flow_state: dict[str, Any]


@dataclass
class StepTrace:
    step: str
    kind: str
    ms: float
    tool_status: str | None = None
    note: str | None = None


@dataclass
class FlowTurn:
    reply: str
    status: str
    workflow: str
    instance_id: str | None
    step: str | None = None
    awaiting: str | None = None
    quick_replies: list[str] = field(default_factory=list)
    pending_action: dict[str, Any] | None = None
    handoff: HandoffRequest | None = None
    approval: ApprovalRequest | None = None
    trace: list[StepTrace] = field(default_factory=list)
    drift: bool = False                   # a confident other intent: answer it, then ask `reply` again
    reading: str | None = None            # what the waiting step read the message as (see READINGS)
    outcome: str | None = None            # completed | refused | cancelled | rejected | escalated | ...
    reasks: int = 0

    def as_response(self) -> dict[str, Any]:
        return {"workflow": self.workflow, "instance_id": self.instance_id, "step": self.step,
                "status": self.status, "awaiting": self.awaiting, "pending_action": self.pending_action}


class _Stop(Exception):
    """Ends the run loop of this turn (the flow waits or has ended)."""


class _Run:
    """One turn's execution state: the collected reply parts and the trace."""

    def __init__(self, lang: str):
        self.lang = lang
        self.parts: list[str] = []
        self.quick: list[str] = []
        self.trace: list[StepTrace] = []
        self.handoff: HandoffRequest | None = None
        self.approval: ApprovalRequest | None = None
        self.awaiting: str | None = None

    def say(self, text: str) -> None:
        if text:
            self.parts.append(text)


class FlowEngine:
    def __init__(self, workflows: WorkflowSet, tools: ToolGateway, approvals: ApprovalPort, *,
                 similarity: Callable[[str, list[str]], list[float]] | None = None,
                 drift_threshold: float = 0.75, clock: Callable[[], float] = time.perf_counter,
                 tickets: M.TicketHistory | None = None):
        self.workflows = workflows
        self.tools = tools
        self.approvals = approvals
        self.tickets = tickets      # the customer's earlier tickets (handoff's read function), for memory
        # every loaded definition by (name, version): a running flow keeps the version it started with
        self._versions: dict[tuple[str, int], Workflow] = {(w.name, w.version): w for w in workflows.workflows.values()}
        self.similarity = similarity
        self.drift_threshold = drift_threshold
        self._clock = clock
        # observer(workflow, event): started | completed | cancelled | escalated (the router counts them)
        self.observer: Callable[[str, str], None] | None = None

    # ------------------------------------------------------------------ public API

    def reload(self, workflows: WorkflowSet, tools: ToolGateway | None = None) -> list[str]:
        """Serve new definitions from now on (SIGHUP); running flows keep theirs. Returns warnings:
        a workflow whose content changed under the same version number moves its running flows along."""
        warnings = []
        for wf in workflows.workflows.values():
            old = self._versions.get((wf.name, wf.version))
            if old is not None and _digest(old) != _digest(wf):
                warnings.append(f"workflow {wf.name!r} changed but kept version {wf.version}: its running flows "
                                "follow the new definition (raise `version` to keep them on the old one)")
            self._versions[(wf.name, wf.version)] = wf
        if tools is not None:
            self.tools = tools
        self.workflows = workflows   # one assignment: a turn sees the old set or the new one, never half
        return warnings

    def _pinned(self, inst: dict) -> tuple[Workflow, str | None]:
        """The definition a flow runs on: the version it started with, else the current one if its step
        still exists there; the second value says why neither fits (the flow then goes to a person)."""
        name, version = inst["workflow"], inst["version"]
        wf = self._versions.get((name, version))
        if wf is not None and (inst["step"] is None or inst["step"] in wf.steps):
            return wf, None
        current = self.workflows.workflows.get(name)
        if current is not None and inst["step"] is not None and inst["step"] in current.steps:
            inst["version"] = current.version
            inst["history"].append({"event": "version_moved", "from": version, "to": current.version,
                                    "at": time.time()})
            return current, None
        stub = current or wf or Workflow(name=name, version=version, steps={}, first="", slots={})
        why = (f"workflow {name} version {version} is no longer loaded" if current is None or wf is None
               else f"step {inst['step']} of workflow {name} version {version} no longer exists")
        return stub, why

    def _gone(self, conn, inst: dict, wf: Workflow, run: _Run, why: str) -> FlowTurn:
        """The flow's definition or step is gone (a reload removed it): a person takes over, politely."""
        inst["pending"].pop("approval", None)
        self._escalate(inst, wf, run, "L2", why, say=_t("changed", run.lang))
        store.save(conn, inst)
        return self._turn(inst, wf, run)

    def active(self, conn, conversation_id: str) -> dict | None:
        return store.active(conn, conversation_id)

    def start(self, conn, workflow: str, caller: Caller, text: str = "", entities: dict | None = None,
              lang: str = "en") -> FlowTurn:
        wf = self.workflows[workflow]
        conversation_id = caller.conversation_id or f"{caller.channel}:{caller.customer_id}"
        slots = self._prefill(wf, text, entities or {})
        remembered = self.memory(conn, caller, lang)
        inst = store.create(conn, conversation_id=conversation_id, workflow=wf.name, version=wf.version,
                            step=wf.first, lang=lang, caller=_caller_dict(caller), slots=slots)
        inst["bindings"]["memory"] = remembered
        inst["history"].append({"event": "started", "at": time.time(), "prefilled": sorted(slots)})
        inst["pending"]["message"] = text or ""
        R.VOCABULARY.set(wf.vocabulary)
        self._observe(wf.name, "started")
        run = _Run(lang)
        return self._run(conn, inst, wf, caller, run, text=None, entities=entities or {})

    def offer(self, conn, workflow: str, caller: Caller, text: str = "", entities: dict | None = None,
              lang: str = "en") -> FlowTurn:
        """Offer the task after an answer ("Shall I start a return for one of your orders?"): the flow waits at
        its first step for the customer's yes (``read`` says "answer") or no ("cancel"); nothing runs yet.
        The caller words the offer; the question's values (an order number) are kept for the task."""
        wf = self.workflows[workflow]
        conversation_id = caller.conversation_id or f"{caller.channel}:{caller.customer_id}"
        inst = store.create(conn, conversation_id=conversation_id, workflow=wf.name, version=wf.version,
                            step=wf.first, lang=lang, caller=_caller_dict(caller),
                            slots=self._prefill(wf, text, entities or {}))
        inst["status"] = "waiting"
        inst["pending"]["offer"] = {"message": text or ""}
        inst["history"].append({"event": "offered", "at": time.time(), "prefilled": sorted(inst["slots"])})
        store.save(conn, inst)
        run = _Run(lang)
        run.awaiting = "offer"
        run.quick = [_t("confirm_yes", lang), _t("confirm_no", lang)]
        return self._turn(inst, wf, run)

    @staticmethod
    def offered(instance: dict | None) -> bool:
        """Is ``instance`` an offer the customer has not taken up yet?"""
        return bool(instance and instance["status"] == "waiting" and (instance.get("pending") or {}).get("offer"))

    def lapse(self, conn, instance: dict) -> None:
        """The customer moved on without answering the offer: it ends quietly (cancelled, outcome ``lapsed``)."""
        inst = store.get(conn, instance["id"], lock=True)
        if not self.offered(inst):
            return
        inst["pending"].pop("offer", None)
        inst["status"], inst["outcome"], inst["step"] = "cancelled", "lapsed", None
        inst["history"].append({"event": "offer_lapsed", "at": time.time()})
        store.save(conn, inst)

    def read(self, instance: dict, text: str, entities: dict | None = None, *, intent: str | None = None,
             intent_confidence: float | None = None) -> str:
        """What the flow's waiting step reads ``text`` as (one of READINGS), changing nothing.

        The turn asks this before its classifier and escalation rules judge the message: an answer to the
        bot's own question ("50", "是的", an invoice title) is the flow's, never an unclear new message."""
        entities = entities or {}
        wf, gone = self._pinned(dict(instance, history=list(instance.get("history") or [])))
        R.VOCABULARY.set(wf.vocabulary)
        if gone:
            return "unclear"
        if instance["status"] == "waiting_approval":
            return "cancel" if U.is_cancel(text) or U.changes_mind(text) else "waiting"
        if self.offered(instance):   # the bot's own question "shall I start it?": yes, no, or something else
            said = U.yes_no(text, entities)
            if said is True and not U.is_question(text):
                return "answer"
            if said is False or U.is_cancel(text) or U.changes_mind(text, whole=True):
                return "cancel"
            return "digression"
        step = wf.steps.get(instance["step"]) if instance["step"] else None
        if step is None or step.kind not in WAITING_KINDS or instance["status"] != "waiting":
            return "answer"
        try:
            strength = self._answer_strength(instance, wf, step, text, entities)
        except ExpressionError:
            return "unclear"
        free = step.kind in ("ask", "split") and step.arg in wf.slots and _free_text(wf.slots[step.arg])
        mind = U.changes_mind(text, whole=free)
        if mind and step.kind == "confirm" and U.yes_no(text, entities) is not True \
                and not (U.is_correction(text) and self._correction(instance, wf, text, entities) is not None):
            return "cancel"   # "no thanks, leave it as it is" at a confirmation drops the task, not just this value
        if strength != "strong" and (mind or U.is_cancel(text)):
            return "cancel"
        other = (intent is not None and intent_confidence is not None and intent_confidence >= self.drift_threshold
                 and intent not in wf.intents)
        if other and free and not U.is_question(text) and len(U.norm(text).split()) < 4 \
                and len(re.findall(r"[\u4e00-\u9fff]", text)) < 6:
            other = False   # a word or two at a free-text question ("ok" for an address): asked again, not another topic
        if strength == "strong" or (strength == "weak" and not U.is_question(text)):
            return "answer"   # a fuzzy choice ("the one with the boots") answers even when it sounds like a topic
        if U.is_correction(text) and (self._correction(instance, wf, text, entities, skip=step.arg) is not None or (
                step.kind == "confirm" and self._free_correction(instance, wf, step, text) is not None)):
            return "correction"
        if other:
            return "digression"
        return "unclear"

    def suspend(self, conn, instance: dict, *, because: str) -> None:
        """Interrupt a waiting flow for another task of the customer's (``because``: that task's workflow); it asks
        its question again once that task ends (``resume``)."""
        inst = store.get(conn, instance["id"], lock=True)
        if inst is None or inst["status"] != "waiting":
            return
        inst["status"] = "suspended"
        inst["history"].append({"event": "suspended", "for": because, "step": inst["step"], "at": time.time()})
        store.save(conn, inst)

    def resume(self, conn, conversation_id: str, lang: str) -> FlowTurn | None:
        """The most recently interrupted flow takes its place again and repeats its question; None when there is
        none or another flow is active. A flow whose definition is gone ends cancelled, quietly."""
        if store.active(conn, conversation_id) is not None:
            return None
        inst = store.suspended(conn, conversation_id, lock=True)
        if inst is None:
            return None
        wf, gone = self._pinned(inst)
        step = wf.steps.get(inst["step"]) if inst["step"] else None
        run = _Run(lang)
        if gone or step is None or step.kind not in WAITING_KINDS:
            self._finish(inst, "cancelled", "cancelled")
            store.save(conn, inst)
            return None
        R.VOCABULARY.set(wf.vocabulary)
        inst["status"], inst["lang"] = "waiting", lang
        inst["history"].append({"event": "resumed", "step": step.id, "at": time.time()})
        task = wf.description.get(lang) or wf.description.get("en") or wf.name
        run.say(_t("resume", lang, task=task))
        self._prompt(inst, wf, step, run, again=False)
        store.save(conn, inst)
        return self._turn(inst, wf, run)

    def correcting(self, conn, conversation_id: str, text: str, entities: dict | None = None,
                   window_seconds: float = 1800) -> str | None:
        """The workflow a message restarts with a corrected value, or None (changes nothing).

        "where is my order 100999?" -> "I couldn't find order 100999." -> "sorry, I meant 100241": the flow ended
        refused a moment ago, and the message gives another value for a slot it had (a correction cue, or little
        more than the value). The same workflow then starts again from that message."""
        last = store.last(conn, conversation_id)
        if last is None or last["status"] != "completed" or last["outcome"] != "refused":
            return None
        if time.time() - last["updated_at"].timestamp() > window_seconds:
            return None
        wf = self.workflows.workflows.get(last["workflow"])
        if wf is None:
            return None
        if not (U.is_correction(text) or not U.is_free_value(U.strip_correction(text))):
            return None
        return wf.name if self._correction(last, wf, text, entities or {}) is not None else None

    def advance(self, conn, instance: dict | str, caller: Caller, text: str, entities: dict | None = None,
                lang: str = "en", intent: str | None = None, intent_confidence: float | None = None) -> FlowTurn:
        inst = store.get(conn, instance["id"] if isinstance(instance, dict) else instance, lock=True)
        entities = entities or {}
        wf, gone = self._pinned(inst)
        R.VOCABULARY.set(wf.vocabulary)
        run = _Run(lang)
        if inst["status"] not in store.ACTIVE:
            return self._turn(inst, wf, run)
        reading = self.read(inst, text, entities, intent=intent, intent_confidence=intent_confidence)
        inst["lang"] = lang
        inst["pending"]["message"] = text or ""
        if gone:
            return self._gone(conn, inst, wf, run, gone)
        turn = self._advance(conn, inst, wf, caller, run, reading, text, entities)
        turn.reading = reading
        return turn

    def _advance(self, conn, inst: dict, wf: Workflow, caller: Caller, run: _Run, reading: str, text: str,
                 entities: dict) -> FlowTurn:
        if inst["status"] == "waiting_approval":
            if reading == "cancel":   # "算了" while a human reviews: the request is withdrawn, nothing runs
                return self._withdraw(conn, inst, wf, run, "the customer cancelled the request")
            # the decision is in a human's hands now: only resolve_approval moves the flow on
            run.say(_t("still_reviewing", run.lang))
            return self._turn(inst, wf, run)
        step = wf.steps.get(inst["step"]) if inst["step"] else None
        offer = inst["pending"].pop("offer", None)
        if offer is not None:
            if reading != "answer":   # "no thanks" (or anything but a yes): the offer ends, nothing was started
                run.say(_t("offer_declined", run.lang) if reading == "cancel" else "")
                inst["history"].append({"event": "offer_declined" if reading == "cancel" else "offer_lapsed",
                                        "at": time.time()})
                inst["status"], inst["step"] = "cancelled", None   # never started: no flow event to count
                inst["outcome"] = "declined" if reading == "cancel" else "lapsed"
                store.save(conn, inst)
                return self._turn(inst, wf, run)
            # "yes": the task starts now, from its first step, with what the question already said
            inst["bindings"]["memory"] = self.memory(conn, caller, run.lang)
            inst["pending"]["message"] = offer.get("message") or ""
            inst["history"].append({"event": "started", "offer": "accepted", "at": time.time(),
                                    "prefilled": sorted(inst["slots"])})
            self._observe(wf.name, "started")
            return self._run(conn, inst, wf, caller, run, text=None, entities={})
        if reading == "cancel":
            return self._cancel(conn, inst, wf, run, "customer")
        if reading == "digression" and step is not None:
            inst["attempts"]["_reasks"] = inst["attempts"].get("_reasks", 0) + 1
            inst["history"].append({"event": "drift", "step": step.id, "at": time.time()})
            self._prompt(inst, wf, step, run, again=False)
            store.save(conn, inst)
            turn = self._turn(inst, wf, run)
            turn.drift = True
            return turn
        return self._run(conn, inst, wf, caller, run, text=text, entities=entities)

    def memory(self, conn, caller: Caller, lang: str = "en") -> dict:
        """The session's memory (profile, recent orders, earlier outcomes): loaded once, cached per conversation."""
        if caller.conversation_id is None:
            caller = Caller(caller.channel, caller.customer_id, f"{caller.channel}:{caller.customer_id}",
                            caller.turn_id, caller.purpose)
        return M.session(conn, self.workflows.memory, self.tools, caller, lang, tickets=self.tickets)

    def cached_memory(self, conn, conversation_id: str) -> dict | None:
        """What the session already loaded (the ticket's context package), without calling the shop."""
        return M.cached(conn, conversation_id) if self.workflows.memory is not None else None

    def resolve_approval(self, conn, instance_id: str, approved: bool, approver: str, reason: str | None = None) -> FlowTurn:
        """Apply an approver's decision exactly once; a second decision (or a late one) changes nothing."""
        inst = store.get(conn, instance_id, lock=True)
        if inst is None:
            raise KeyError(f"no flow instance {instance_id}")
        wf, gone = self._pinned(inst)
        R.VOCABULARY.set(wf.vocabulary)
        run = _Run(inst["lang"])
        if inst["status"] != "waiting_approval" or not inst["pending"].get("approval"):
            turn = self._turn(inst, wf, run)
            turn.outcome = "already_resolved"
            return turn
        if gone or inst["pending"]["approval"].get("step") not in wf.steps:
            return self._gone(conn, inst, wf, run, gone or "the approval step no longer exists")
        pending = inst["pending"].pop("approval")
        decision = {"approved": bool(approved), "approver": approver, "reason": reason or "", "tier": pending["tier"]}
        inst["pending"]["approval_result"] = decision
        inst["history"].append({"event": "approval", "step": pending["step"], **decision, "at": time.time()})
        step = wf.steps[pending["step"]]
        caller = _caller_from(inst)
        inst["status"] = "running"
        if approved:
            inst["pending"]["approved_call"] = {"step": pending.get("call_step"), "arguments": pending["proposed_call"]["arguments"]}
            run.say(self._text(step.get("approved"), inst, wf, run.lang) or _t("approved", run.lang))
            inst["step"] = self._after(inst, wf, step)
        else:
            run.say(self._text(step.get("rejected"), inst, wf, run.lang) or _t("rejected", run.lang))
            target = step.get("on_reject")
            if isinstance(target, dict):
                self._jump(inst, wf, target)
            else:
                self._observe(inst["workflow"], "cancelled")
                inst["status"], inst["outcome"], inst["step"] = "cancelled", "rejected", None
                store.save(conn, inst)
                return self._turn(inst, wf, run)
        return self._run(conn, inst, wf, caller, run, text=None, entities={}, resume=True)

    def pending(self, conn, conversation_id: str) -> dict | None:
        """The action a flow of the conversation stopped at, waiting for the customer's yes (a person may finish
        it): instance, step, tool, arguments, and which of them a person may change (those taken from a slot)."""
        inst = store.active(conn, conversation_id)
        if inst is None or inst["status"] != "waiting" or not inst["pending"].get("action"):
            return None
        wf, gone = self._pinned(inst)
        step = wf.steps.get(inst["step"]) if inst["step"] and not gone else None
        if step is None or step.kind != "confirm":
            return None
        action = inst["pending"]["action"]
        return {"instance_id": str(inst["id"]), "workflow": wf.name, "step": step.id, "tool": action.get("tool"),
                "arguments": dict(action.get("arguments") or {}), "summary": action.get("summary"),
                "editable": sorted(self._action_slots(step)), "lang": inst["lang"]}

    @staticmethod
    def _action_slots(step: Step) -> dict[str, str]:
        """The confirm step's action arguments taken straight from a slot (``slots.address``): argument -> slot."""
        spec = (step.raw.get("pending_action") or {}).get("arguments") or {}
        out = {}
        for arg, expr in spec.items():
            m = re.fullmatch(r"\s*slots\.([A-Za-z_]\w*)\s*", str(expr))
            if m:
                out[arg] = m.group(1)
        return out

    def complete_pending(self, conn, instance_id: str, arguments: dict[str, Any], *, actor: str) -> FlowTurn:
        """A person confirms the action the flow waits on, for the customer, with the values they corrected:
        the slots take the new values (each checked by its slot's rule), then the flow goes on exactly as after
        the customer's yes, its tool calls audited under ``actor`` (the agent) and keyed as the flow's own, so
        a repeat runs nothing twice. ``outcome`` is "already_resolved" when nothing waits any more. Raises
        ValueError for an argument that is unknown, computed by the flow, or invalid."""
        inst = store.get(conn, instance_id, lock=True)
        if inst is None:
            raise KeyError(f"no flow instance {instance_id}")
        wf, gone = self._pinned(inst)
        R.VOCABULARY.set(wf.vocabulary)
        run = _Run(inst["lang"])
        step = wf.steps.get(inst["step"]) if inst["step"] and not gone else None
        action = inst["pending"].get("action")
        if inst["status"] != "waiting" or not action or step is None or step.kind != "confirm":
            turn = self._turn(inst, wf, run)
            turn.outcome = "already_resolved"
            return turn
        slots_of = self._action_slots(step)
        changed = {}
        for arg, value in (arguments or {}).items():
            if arg not in (action.get("arguments") or {}):
                raise ValueError(f"{action.get('tool')} has no argument {arg!r}")
            if value == action["arguments"][arg]:
                continue
            if arg not in slots_of:
                raise ValueError(f"{arg} is computed by the workflow and cannot be changed here")
            slot = wf.slots.get(slots_of[arg])
            if isinstance(value, str):
                value = " ".join(value.split())
            if slot is not None and not slot.check(value):
                raise ValueError(f"{arg}: {value!r} is not a valid {slots_of[arg]}")
            changed[arg] = value
        for arg, value in changed.items():
            inst["slots"][slots_of[arg]] = value
        if changed:
            inst["generation"] += 1
        inst["pending"].pop("action", None)
        inst["attempts"].pop(step.id, None)
        inst["history"].append({"event": "confirmed_by", "actor": actor, "step": step.id, "changed": sorted(changed),
                                "at": time.time()})
        inst["step"] = self._after(inst, wf, step)
        c = _caller_from(inst)
        caller = Caller(channel=c.channel, customer_id=c.customer_id, conversation_id=c.conversation_id,
                        turn_id=actor)
        return self._run(conn, inst, wf, caller, run, text=None, entities={}, resume=True)

    def cancel(self, conn, instance_id: str, lang: str | None = None, reason: str = "customer") -> FlowTurn:
        inst = store.get(conn, instance_id, lock=True)
        if inst is None:
            raise KeyError(f"no flow instance {instance_id}")
        wf, _ = self._pinned(inst)
        run = _Run(lang or inst["lang"])
        if inst["status"] not in store.ACTIVE:
            return self._turn(inst, wf, run)
        return self._cancel(conn, inst, wf, run, reason)

    # ------------------------------------------------------------------ the run loop

    def _run(self, conn, inst: dict, wf: Workflow, caller: Caller, run: _Run, *, text: str | None,
             entities: dict, resume: bool = False) -> FlowTurn:
        inst["status"] = "running"
        budget = MAX_STEPS_PER_TURN
        given = text
        try:
            while True:
                sid = inst["step"]
                if sid is None:
                    self._finish(inst, "completed", "completed")
                    break
                budget -= 1
                if budget <= 0:
                    self._escalate(inst, wf, run, "L2", "the workflow looped without waiting", say=_t("loop", run.lang))
                    break
                step = wf.steps[sid]
                started = self._clock()
                if "when" in step.raw and given is None and not evaluate_bool(step.raw["when"], self._scope(inst)):
                    run.trace.append(StepTrace(step.id, step.kind, _ms(started, self._clock()), note="skipped"))
                    inst["step"] = self._after(inst, wf, step, transitions=False)
                    continue
                handler = getattr(self, f"_do_{step.kind}")
                outcome = handler(conn, inst, wf, step, caller, run, given, entities)
                given = None   # the customer's message answers only the step that was waiting
                entities = {}
                run.trace.append(StepTrace(step.id, step.kind, _ms(started, self._clock()),
                                           tool_status=getattr(run, "_tool_status", None)))
                run._tool_status = None
                if outcome == "wait":
                    inst["status"] = "waiting"
                    break
                if outcome == "stop":
                    break
                inst["history"].append({"step": step.id, "kind": step.kind, "at": time.time()})
                inst["step"] = outcome if outcome != "next" else self._after(inst, wf, step)
        except ExpressionError as exc:
            self._escalate(inst, wf, run, "L2", f"expression failed: {exc}", say=_t("broken", run.lang))
        store.save(conn, inst)
        return self._turn(inst, wf, run)

    def _after(self, inst: dict, wf: Workflow, step: Step, *, transitions: bool = True) -> str | None:
        """The step after `step`: a matching transition, its goto, the next of its sequence, or back to its loop."""
        if transitions:
            for t in step.get("next") or []:
                if "when" not in t or evaluate_bool(t["when"], self._scope(inst)):
                    return t["goto"]
            if "goto" in step.raw:
                return step.raw["goto"]
        if step.following:
            return step.following
        if step.parent:
            return step.parent   # the foreach moves to its next item
        return None

    def _jump(self, inst: dict, wf: Workflow, target: dict) -> None:
        for name in target.get("reset") or []:
            inst["slots"].pop(name, None)
        inst["generation"] += 1
        goto = target["goto"]
        ancestors = {goto}   # going to a foreach moves it to its next item
        p = wf.steps[goto].parent
        while p:
            ancestors.add(p)
            p = wf.steps[p].parent
        for loop in list(inst["loops"]):
            if loop not in ancestors:
                inst["loops"].pop(loop)
        inst["step"] = goto
        inst["history"].append({"event": "jump", "goto": goto, "reset": target.get("reset") or [], "at": time.time()})

    def _observe(self, workflow: str, event: str) -> None:
        if self.observer is not None:
            try:
                self.observer(workflow, event)
            except Exception:  # noqa: BLE001 - counting must never break a customer's turn
                pass

    def _finish(self, inst: dict, status: str, outcome: str) -> None:
        self._observe(inst["workflow"], status)
        inst["status"], inst["outcome"], inst["step"] = status, outcome, None
        inst["pending"].pop("action", None)
        inst["history"].append({"event": status, "outcome": outcome, "at": time.time()})

    def _escalate(self, inst: dict, wf: Workflow, run: _Run, tier: str, reason: str, *, say: str | None = None) -> None:
        self._observe(inst["workflow"], "escalated")
        run.handoff = HandoffRequest(tier=tier, reason=reason, flow_state=self._state(inst, wf))
        run.say(say if say is not None else _t("handoff", run.lang))
        inst["status"], inst["outcome"] = "escalated", "escalated"
        inst["history"].append({"event": "escalated", "tier": tier, "reason": reason, "step": inst["step"], "at": time.time()})

    def _cancel(self, conn, inst: dict, wf: Workflow, run: _Run, reason: str) -> FlowTurn:
        run.say(_t("cancelled" if reason == "customer" else "cancelled_by_staff", run.lang))
        self._finish(inst, "cancelled", "cancelled")
        inst["history"][-1]["reason"] = reason
        store.save(conn, inst)
        return self._turn(inst, wf, run)

    def _withdraw(self, conn, inst: dict, wf: Workflow, run: _Run, reason: str) -> FlowTurn:
        """Cancel a flow that waits for an approval and close its approval ticket, in this transaction.

        The flow row is saved cancelled first: the ticket's own cancel hook (which may try to cancel
        the flow again) then finds nothing active. An approver acting later finds the ticket closed
        (409) and ``resolve_approval`` finds no pending approval: the proposed call never runs.
        """
        pending = inst["pending"].pop("approval", None) or {}
        ticket = pending.get("ticket") or inst.get("approval_ticket")
        run.say(_t("withdrawn", run.lang))
        self._finish(inst, "cancelled", "cancelled")
        inst["history"][-1]["reason"] = reason
        inst["history"].append({"event": "approval_withdrawn", "ticket": ticket, "step": pending.get("step"),
                                "at": time.time()})
        store.save(conn, inst)
        withdraw = getattr(self.approvals, "withdraw_approval", None)
        if ticket and withdraw is not None:
            withdraw(conn, str(ticket), reason)
        return self._turn(inst, wf, run)

    def _fail(self, inst: dict, wf: Workflow, step: Step, run: _Run, error: str) -> str:
        """A step that failed: its on_error, else wait and retry, and a human after the third failure."""
        inst["pending"]["error"] = {"step": step.id, "error": error}
        n = inst["attempts"].get(step.id, 0) + 1
        inst["attempts"][step.id] = n
        inst["history"].append({"step": step.id, "event": "failed", "error": error, "attempt": n, "at": time.time()})
        handler = step.get("on_error")
        if handler == "handoff" or n >= MAX_ATTEMPTS:
            self._escalate(inst, wf, run, "L2", f"step {step.id} failed {n} time(s): {error}")
            return "stop"
        if isinstance(handler, dict):
            self._jump(inst, wf, handler)
            return handler["goto"]
        run.say(_t("tool_failed", run.lang, error=_short_error(error, run.lang)))
        return "wait"

    # ------------------------------------------------------------------ data in scope

    def _scope(self, inst: dict, **extra: Any) -> Scope:
        # the turn's CEL environments live on the loaded row (never saved): data converted once per turn
        envs = inst.get("_envs")
        if envs is None:
            envs = inst["_envs"] = Envs()
        data = Scope(inst["bindings"], envs)
        data["slots"] = dict(inst["slots"])
        data["caller"] = inst["caller"]
        data["lang"] = inst["lang"]
        data["approval"] = inst["pending"].get("approval_result") or {}
        data["error"] = inst["pending"].get("error") or {}
        data["message"] = inst["pending"].get("message") or ""
        if "memory" not in data:
            data["memory"] = M.empty(self.workflows.memory)
        data["labels"] = self.workflows.labels_for(inst["lang"])
        wf = self._versions.get((inst["workflow"], inst["version"])) or self.workflows[inst["workflow"]]
        for loop_id, lp in inst["loops"].items():
            step = wf.steps[loop_id]
            if 0 <= lp["index"] < len(lp["items"]):
                data[step.raw["as"]] = lp["items"][lp["index"]]
                data["index"] = lp["index"]
        data.update(extra)
        return data

    def _text(self, texts: Any, inst: dict, wf: Workflow, lang: str, **extra: Any) -> str:
        if not texts:
            return ""
        if isinstance(texts, str):
            template = texts
        else:
            template = texts.get(lang) or texts.get("en") or ""
        return render(template, self._scope(inst, **extra))

    def _state(self, inst: dict, wf: Workflow) -> dict[str, Any]:
        """The flow's state for a ticket's context package."""
        return {"workflow": wf.name, "version": wf.version, "instance_id": inst["id"], "step": inst["step"],
                "status": inst["status"], "slots": inst["slots"],
                "bindings": sorted(k for k in inst["bindings"] if k != "memory"),
                "error": inst["pending"].get("error"), "risk": wf.risk,
                "history": inst["history"][-20:]}

    def _idempotency_key(self, inst: dict, wf: Workflow, step: Step) -> str:
        key = f"flow:{inst['id']}:{step.id}"
        p = step.parent
        chain = []
        while p:
            chain.append(str(inst["loops"].get(p, {}).get("index", 0)))
            p = wf.steps[p].parent
        if chain:
            key += ":" + ".".join(reversed(chain))
        if inst["generation"]:
            key += f":g{inst['generation']}"
        return key

    def _prefill(self, wf: Workflow, text: str, entities: dict) -> dict:
        slots = {}
        for name, slot in wf.slots.items():
            ent = slot.validate.get("entity")
            if ent in (None, "text", "number", "yes_no"):
                if name in entities and slot.check(entities[name]):
                    slots[name] = entities[name]
                continue
            value = entities.get(name) if name in entities else U.extract(ent, text, entities)
            if value is not None and not slot.check(value) and ent == "order_id" and name not in entities:
                # "W3003的邮编改成98109": the last number-like token is a zip code; the slot's own rule picks the id
                value = next((v for v in reversed(U.order_ids(text)) if slot.check(v)), None)
            if value is not None and slot.check(value):
                slots[name] = value
        return slots

    # ------------------------------------------------------------------ reading answers

    def _parse_slot(self, wf: Workflow, name: str, text: str, entities: dict) -> Any:
        slot = wf.slots[name]
        v = slot.validate
        value: Any = None
        if name in entities:
            value = entities[name]
        elif "entity" in v:
            value = U.extract(v["entity"], text, entities)
        elif "enum" in v:
            t = U.norm(text)
            exact = [e for e in v["enum"] if U.norm(str(e)) == t]
            last: dict[int, Any] = {}
            for e in v["enum"]:
                for m in re.finditer(rf"(?<!\w){re.escape(U.norm(str(e)))}(?!\w)", t):
                    last[m.start()] = e
            value = exact[0] if exact else (last[max(last)] if last else None)   # the last mention wins
        elif "regex" in v:
            found = [m.group(0) for m in re.finditer(v["regex"].lstrip("^").rstrip("$"), text or "")]
            value = found[-1] if found else None
        else:
            raw = (text or "").strip()
            value = raw or None
            if (v.get("schema") or {}).get("type") not in (None, "string"):
                try:
                    value = json.loads(raw)
                except ValueError:
                    pass
        if value is None or not slot.check(value):
            return None
        return value

    def _free_correction(self, inst: dict, wf: Workflow, step: Step, text: str) -> tuple[str, Any] | None:
        """"No, it should be 21 Oak Road ..." at a confirmation: a new value for the free-text slot the step's
        on_reject would ask again (an address, a title), when the rest of the message is more than a number."""
        target = step.get("on_reject")
        rest = U.strip_correction(text)
        if not isinstance(target, dict) or not U.is_free_value(rest):
            return None   # "不是这个，是100235", "I meant order W1003": an order number, not an address
        if not (U.is_correction(text) or U.yes_no(text) is False):
            return None
        for name in target.get("reset") or []:
            slot = wf.slots.get(name)
            asked = self._ask_step_of(wf, name)
            if slot is not None and _free_text(slot) and asked is not None and asked.kind == "ask" \
                    and name in inst["slots"] and slot.check(rest) and rest != inst["slots"][name]:
                return name, rest
        return None

    def _stated(self, wf: Workflow, name: str, text: str, entities: dict) -> Any:
        """A value the customer states outright for a choose slot with a strict validator (entity or regex)."""
        v = wf.slots[name].validate if name in wf.slots else {}
        if v.get("entity") in (None, "text", "yes_no") and "regex" not in v:
            return None
        return self._parse_slot(wf, name, text, entities)

    def _answers(self, inst: dict, wf: Workflow, step: Step, text: str, entities: dict) -> bool:
        if step.kind == "ask":
            slot = wf.slots[step.arg]
            if slot.recall and M.is_recall(text):
                return True
            if _free_text(slot) and (U.is_bare_cancel(text) or U.is_question(text)):
                return False   # "never mind" or an FAQ question is not an address or a title
            return self._parse_slot(wf, step.arg, text, entities) is not None
        if step.kind == "confirm":
            return U.yes_no(text, entities) is not None
        if step.kind == "split":
            return bool(R.split(text, _kind_words(step)))
        if step.kind == "choose":
            options = self._options(inst, step)
            ids, texts = self._option_texts(inst, step, options)
            return (U.choose(text, ids, texts, similarity=self.similarity).index is not None
                    or self._stated(wf, step.arg, text, entities) is not None)
        return False

    def _answer_strength(self, inst: dict, wf: Workflow, step: Step, text: str, entities: dict) -> str | None:
        """How surely ``text`` answers the waiting ``step``: ``strong`` (a validated value, a yes/no, a choice by
        number, id or name), ``weak`` (free text, a fuzzy or encoder choice: an answer unless the message is
        plainly something else) or None (no answer)."""
        if not self._answers(inst, wf, step, text, entities):
            return None
        if step.kind == "choose":
            if self._stated(wf, step.arg, text, entities) is not None:
                return "strong"
            ids, texts = self._option_texts(inst, step, self._options(inst, step))
            how = U.choose(text, ids, texts, similarity=self.similarity).how
            return "strong" if how in ("number", "id", "exact") else "weak"
        if step.kind == "ask" and _free_text(wf.slots[step.arg]):
            return "weak"
        return "strong"

    def _correction(self, inst: dict, wf: Workflow, text: str, entities: dict,
                    skip: str | None = None) -> tuple[str, Any] | None:
        """A new value for an already filled slot ("不是这个，是100235", "sorry, 25 not 45"): (slot, value)."""
        if U.is_correction(text):
            text = U.drop_negated(text)
        for name, slot in wf.slots.items():
            ent = slot.validate.get("entity")
            if name == skip or name not in inst["slots"] or ent in (None, "text", "yes_no"):
                continue
            value = self._parse_slot(wf, name, text, entities)
            if value is not None and value != inst["slots"][name]:
                return name, value
        return None

    def _ask_step_of(self, wf: Workflow, slot: str) -> Step | None:
        for s in wf.steps.values():
            if s.kind in ("ask", "split", "choose") and s.arg == slot:
                return s
        return None

    # ------------------------------------------------------------------ prompts

    def _prompt(self, inst: dict, wf: Workflow, step: Step, run: _Run, *, again: bool, with_prompt: bool = True) -> None:
        lang = run.lang
        if again:
            run.say(_t("retry", lang))
        if step.kind in ("ask", "split"):
            slot = wf.slots[step.arg]
            run.say(self._text(step.get("prompt") or slot.prompt, inst, wf, lang))
            run.quick = list(slot.quick_replies)
            run.awaiting = step.arg
        elif step.kind == "choose":
            options = self._options(inst, step)
            _, _, by_lang = self._option_rows(inst, step, options)
            labels = by_lang.get(lang) or by_lang.get("en") or next(iter(by_lang.values()))
            only = inst["pending"].get("choose_among", {}).get(step.id)
            shown = [i for i in (only or range(len(options))) if i < len(options)]
            if with_prompt:
                run.say(self._text(step.get("prompt"), inst, wf, lang))
            run.say("\n".join(f"{n + 1}. {labels[i]}" for n, i in enumerate(shown)))   # numbered as answered
            run.quick = [labels[i] for i in shown]
            run.awaiting = step.arg
        elif step.kind == "confirm":
            action = self._pending_action(inst, wf, step, lang)
            inst["pending"]["action"] = action
            run.say(self._text(step.arg, inst, wf, lang))
            run.quick = [_t("confirm_yes", lang), _t("confirm_no", lang)]
            run.awaiting = "confirmation"

    def _pending_action(self, inst: dict, wf: Workflow, step: Step, lang: str) -> dict | None:
        pa = step.get("pending_action")
        if not pa:
            return None
        scope = self._scope(inst)
        if isinstance(pa, list):   # several actions confirmed together: each that applies, in order
            actions = [{"tool": e["tool"], "arguments": _jsonable(evaluate_value(e.get("arguments") or {}, scope)),
                        "summary": self._text(e.get("summary"), inst, wf, lang)}
                       for e in pa if "when" not in e or evaluate_bool(e["when"], scope)]
            return {"actions": actions, "summary": "; ".join(a["summary"] for a in actions if a["summary"])}
        return {"tool": pa["tool"], "arguments": evaluate_value(pa.get("arguments") or {}, scope),
                "summary": self._text(pa.get("summary"), inst, wf, lang)}

    def _options(self, inst: dict, step: Step) -> list:
        options = evaluate(step.raw["options"], self._scope(inst))
        if not isinstance(options, list):
            raise ExpressionError(f"{step.raw['options']}: options must be a list")
        return options

    def _option_rows(self, inst: dict, step: Step, options: list) -> tuple[list[str], list[list[str]], dict[str, list[str]]]:
        """Every option's id, matchable texts and labels; computed once per turn while the data is the same
        (the drift check, the answer and a re-ask all need them)."""
        sig = (step.id, tuple((k, id(v)) for k, v in inst["bindings"].items()),
               tuple((k, id(lp["items"]), lp["index"]) for k, lp in inst["loops"].items()), inst["lang"])
        memo = inst.setdefault("_rows", {})
        hit = memo.get(step.id)
        if hit is not None and hit[0] == sig and same_value(hit[1], options) and same_value(hit[2], inst["slots"]):
            return hit[3]
        rows = self._compute_option_rows(inst, step, options)
        memo[step.id] = (sig, options, dict(inst["slots"]), rows)
        return rows

    def _compute_option_rows(self, inst: dict, step: Step, options: list):
        label = step.raw["label"]
        labels = label if isinstance(label, dict) else {lang: label for lang in ("zh", "en")}
        langs = [lang for lang in ("en", "zh") if labels.get(lang)]
        scope = self._scope(inst)
        templates = ["{{ " + step.raw["option_id"] + " }}" if "option_id" in step.raw else "{{ option }}"]
        templates += [labels[lang] for lang in langs]
        rendered = render_each(options, "option", templates, scope)
        matches = list(step.get("match") or [])
        extra = evaluate_columns(options, "option", matches, scope) if matches else []
        ids, texts, by_lang = [], [], {lang: [] for lang in langs}
        for n, o in enumerate(options):
            oid = rendered[0][n] if "option_id" in step.raw else (o.get("id") if isinstance(o, dict) else rendered[0][n])
            ids.append("" if oid is None else str(oid))
            fields = []
            for j, lang in enumerate(langs):
                by_lang[lang].append(rendered[1 + j][n])
                if rendered[1 + j][n] not in fields:
                    fields.append(rendered[1 + j][n])
            for col in extra:
                v = col[n]
                fields.extend([format_value(x) for x in v] if isinstance(v, list) else [format_value(v)])
            texts.append(fields)
        return ids, texts, by_lang

    def _option_texts(self, inst: dict, step: Step, options: list) -> tuple[list[str], list[list[str]]]:
        ids, texts, _ = self._option_rows(inst, step, options)
        return ids, texts

    # ------------------------------------------------------------------ step kinds

    def _do_ask(self, conn, inst, wf, step, caller, run, text, entities):
        name = step.arg
        if text is None:
            if name in inst["slots"]:
                return "next"
            self._prompt(inst, wf, step, run, again=False)
            return "wait"
        fix = self._fix(inst, wf, step, text, entities)
        if fix:
            return fix
        slot = wf.slots[name]
        if slot.recall and M.is_recall(text):
            # "the same address as last time": the value from memory, or say there is none and ask again
            value = M.recall(slot.recall, self._scope(inst)["memory"], inst["slots"])
            if value is None or not slot.check(value):
                run.say(_t("no_recall", run.lang))
                return self._retry(inst, wf, step, run, f"no remembered {name}", quiet=True)
            inst["history"].append({"step": step.id, "event": "recalled", "slot": name, "at": time.time()})
        else:
            value = self._parse_slot(wf, name, text, entities)
        if value is None:
            return self._retry(inst, wf, step, run, f"no valid {name} in the answer")
        inst["slots"][name] = value
        inst["attempts"].pop(step.id, None)
        return "next"

    def _do_split(self, conn, inst, wf, step, caller, run, text, entities):
        """Several requests in one message: each becomes an item of the slot's list (kind, item, change...)."""
        name = step.arg
        if text is None and name in inst["slots"]:
            return "next"
        if text is not None:
            source = text
        elif "text" in step.raw:
            source = str(evaluate(step.raw["text"], self._scope(inst)) or "")
        else:
            source = inst["pending"].get("message") or ""
        found = R.split(source, _kind_words(step))
        if not found:
            if text is None:
                self._prompt(inst, wf, step, run, again=False)
                return "wait"
            return self._retry(inst, wf, step, run, f"no request of {', '.join(step.raw['kinds'])} in the answer")
        inst["slots"][name] = found
        inst["attempts"].pop(step.id, None)
        inst["history"].append({"step": step.id, "event": "split", "kinds": [r["kind"] for r in found], "at": time.time()})
        return "next"

    def _retry(self, inst, wf, step, run, why: str, *, quiet: bool = False) -> str:
        n = inst["attempts"].get(step.id, 0) + 1
        inst["attempts"][step.id] = n
        if n >= MAX_ATTEMPTS:
            self._escalate(inst, wf, run, "L2", f"{why} after {n} attempts at step {step.id}")
            return "stop"
        self._prompt(inst, wf, step, run, again=not quiet)
        return "wait"

    def _do_choose(self, conn, inst, wf, step, caller, run, text, entities):
        name = step.arg
        if text is None and name in inst["slots"]:
            return "next"
        options = self._options(inst, step)
        if not options:
            if step.get("refuse"):
                run.say(self._text(step.get("refuse"), inst, wf, run.lang))
                self._finish(inst, "completed", "refused")
                return "stop"
            return self._fail(inst, wf, step, run, "there is nothing to choose from")
        if text is None:
            if len(options) == 1 and step.get("auto_single", False):
                inst["slots"][name] = self._value(inst, step, options[0])
                return "next"
            if "text" in step.raw:
                said = evaluate(step.raw["text"], self._scope(inst))
                resolved = self._choose_from_text(inst, wf, step, run, options, str(said or ""))
                if resolved:
                    return resolved
            self._prompt(inst, wf, step, run, again=False)
            return "wait"
        fix = self._fix(inst, wf, step, text, entities)
        if fix:
            return fix
        ids, texts = self._option_texts(inst, step, options)
        stated = self._stated(wf, name, text, entities)
        if stated is not None and str(stated) not in ids:
            # an order number the list does not show is still the customer's answer (never fuzzily another
            # option's number): the steps after the choice check it
            inst["slots"][name] = stated
            inst["attempts"].pop(step.id, None)
            inst["pending"].get("choose_among", {}).pop(step.id, None)
            inst["history"].append({"step": step.id, "event": "stated", "at": time.time()})
            return "next"
        among = inst["pending"].get("choose_among", {}).get(step.id)
        cheap = self._cheapest(inst, step, options, text, among)
        if cheap is not None:
            inst["pending"].get("choose_among", {}).pop(step.id, None)
            inst["slots"][name] = self._value(inst, step, options[cheap])
            inst["attempts"].pop(step.id, None)
            return "next"
        if among:
            sub = U.choose(text, [ids[i] for i in among], [texts[i] for i in among], similarity=self.similarity)
            ch = U.Choice(among[sub.index], [], sub.how) if sub.index is not None else None
        else:
            ch = None
        if ch is None:
            ch = U.choose(text, ids, texts, similarity=self.similarity)
        if ch.index is None:
            if ch.candidates:
                inst["pending"].setdefault("choose_among", {})[step.id] = ch.candidates
                n = inst["attempts"].get(step.id, 0) + 1
                inst["attempts"][step.id] = n
                if n >= MAX_ATTEMPTS:
                    self._escalate(inst, wf, run, "L2", f"choice at {step.id} still ambiguous after {n} attempts")
                    return "stop"
                run.say(_t("choose_again", run.lang))
                self._prompt(inst, wf, step, run, again=False, with_prompt=False)
                return "wait"
            stated = self._stated(wf, name, text, entities)
            if stated is not None:
                # an order number the list does not show is still the customer's answer: the steps after check it
                inst["slots"][name] = stated
                inst["attempts"].pop(step.id, None)
                inst["history"].append({"step": step.id, "event": "stated", "at": time.time()})
                return "next"
            return self._retry(inst, wf, step, run, f"no option of {name} matched")
        inst["pending"].get("choose_among", {}).pop(step.id, None)
        inst["slots"][name] = self._value(inst, step, options[ch.index])
        inst["attempts"].pop(step.id, None)
        inst["history"].append({"step": step.id, "event": "chose", "index": ch.index, "how": ch.how, "at": time.time()})
        return "next"

    def _choose_from_text(self, inst, wf, step, run, options, said: str) -> str | None:
        """Resolve a choice from words the customer already said (a request's item, the first message)
        before asking: one match is taken, several are asked among; ``required: false`` stores null when
        nothing is named and then accepts only what the words state outright (id, exact, the cheapest)."""
        name = step.arg
        optional = step.get("required") is False
        if said.strip():
            cheap = self._cheapest(inst, step, options, said, None)
            if cheap is not None:
                inst["slots"][name] = self._value(inst, step, options[cheap])
                return "next"
            ids, texts = self._option_texts(inst, step, options)
            ch = U.choose(said, ids, texts, similarity=None if optional else self.similarity)
            if ch.index is not None and (not optional or ch.how in ("id", "exact")):
                inst["slots"][name] = self._value(inst, step, options[ch.index])
                inst["history"].append({"step": step.id, "event": "chose", "index": ch.index, "how": f"said:{ch.how}",
                                        "at": time.time()})
                return "next"
            if ch.candidates and (not optional or ch.how == "ambiguous"):
                inst["pending"].setdefault("choose_among", {})[step.id] = ch.candidates
                self._prompt(inst, wf, step, run, again=False)
                return "wait"
        if optional:
            inst["slots"][name] = None
            return "next"
        return None

    def _cheapest(self, inst, step, options, text: str, among: list[int] | None) -> int | None:
        """"the cheapest" / "最便宜的": the option (among those still in question) with the lowest ``cheapest``."""
        if "cheapest" not in step.raw or not R.prefers_cheapest(text):
            return None
        pool = [i for i in (among or range(len(options))) if i < len(options)]
        if not pool:
            return None
        ranks = evaluate_each([options[i] for i in pool], "option", [step.raw["cheapest"]], self._scope(inst))
        best = min(range(len(pool)), key=lambda j: (float(ranks[j][0]), j))
        return pool[best]

    def _fix(self, inst, wf, step, text, entities) -> str | None:
        """A correction of an earlier answer while asked something else: re-plan from that answer's step."""
        if not U.is_correction(text):
            return None
        fix = self._correction(inst, wf, text, entities, skip=step.arg)
        if fix is None:
            return None
        slot, value = fix
        self._apply_correction(inst, wf, step, slot, value)
        ask = self._ask_step_of(wf, slot)
        return ask.id if ask is not None else None

    def _apply_correction(self, inst, wf, step, slot, value) -> None:
        """Set the corrected slot and forget what was collected or computed after it (except what the customer said first)."""
        inst["slots"][slot] = value
        inst["generation"] += 1
        inst["pending"].pop("action", None)
        prefilled = set(next((h.get("prefilled", []) for h in inst["history"] if h.get("event") == "started"), []))
        order = list(wf.steps)
        ask = self._ask_step_of(wf, slot)
        start = order.index(ask.id) if ask is not None else len(order)
        for sid in order[start + 1:]:
            s = wf.steps[sid]
            names = [s.arg] if s.kind in ("ask", "split", "choose") else list(s.arg) if s.kind == "set" else []
            for n in names:
                if n not in prefilled and n != slot:
                    inst["slots"].pop(n, None)
        inst["history"].append({"step": step.id, "event": "correction", "slot": slot, "at": time.time()})

    def _value(self, inst, step, option):
        if "value" in step.raw:
            return evaluate(step.raw["value"], self._scope(inst, option=option))
        return option

    def _do_confirm(self, conn, inst, wf, step, caller, run, text, entities):
        if text is None:
            self._prompt(inst, wf, step, run, again=False)
            return "wait"
        answer = U.yes_no(text, entities)
        if answer is not True:
            fix = self._free_correction(inst, wf, step, text) or self._correction(inst, wf, text, entities)
            if fix is not None and (answer is False or U.is_correction(text) or answer is None):
                slot, value = fix
                self._apply_correction(inst, wf, step, slot, value)
                ask = self._ask_step_of(wf, slot)
                return ask.id if ask is not None else step.id
        if answer is True:
            inst["pending"].pop("action", None)
            inst["attempts"].pop(step.id, None)
            return "next"
        if answer is False:
            inst["pending"].pop("action", None)
            target = step.get("on_reject")
            if isinstance(target, dict):
                self._jump(inst, wf, target)
                return target["goto"]
            self._cancel_in_run(inst, run)
            return "stop"
        return self._retry(inst, wf, step, run, "no yes or no in the answer")

    def _cancel_in_run(self, inst, run):
        run.say(_t("cancelled", run.lang))
        self._finish(inst, "cancelled", "cancelled")

    def _do_call(self, conn, inst, wf, step, caller, run, text, entities):
        name = step.arg
        approved = inst["pending"].get("approved_call") or {}
        if approved.get("step") == step.id:
            args = approved["arguments"]
        else:
            args = evaluate_value(step.get("args") or {}, self._scope(inst))
        risk = getattr(self.tools.spec(name), "risk", "read")
        key = self._idempotency_key(inst, wf, step) if RISK_ORDER.get(risk, 2) > 0 else None
        who = Caller(channel=caller.channel, customer_id=caller.customer_id,
                     conversation_id=caller.conversation_id or inst["conversation_id"],
                     turn_id=caller.turn_id, purpose=wf.name)
        result = self.tools.call(name, args, who, idempotency_key=key)
        run._tool_status = result.status
        inst["history"].append({"step": step.id, "event": "call", "tool": name, "status": result.status,
                                "idempotency_key": key, "call_id": result.call_id, "at": time.time()})
        if not result.ok:
            return self._fail(inst, wf, step, run, f"{name}: {result.status}" + (f" ({result.error})" if result.error else ""))
        if approved.get("step") == step.id:
            inst["pending"].pop("approved_call", None)
        inst["pending"].pop("error", None)
        inst["attempts"].pop(step.id, None)
        if "bind" in step.raw:
            inst["bindings"][step.raw["bind"]] = _jsonable(result.output)
        return "next"

    def _do_set(self, conn, inst, wf, step, caller, run, text, entities):
        scope = self._scope(inst)
        for name, source in step.arg.items():
            inst["slots"][name] = _jsonable(evaluate(source, scope))
            scope["slots"] = dict(inst["slots"])
        return "next"

    def _do_check(self, conn, inst, wf, step, caller, run, text, entities):
        if evaluate_bool(step.arg, self._scope(inst)):
            return "next"
        inst["history"].append({"step": step.id, "event": "check_failed", "at": time.time()})
        if step.get("refuse"):
            run.say(self._text(step.get("refuse"), inst, wf, run.lang))
        target = step.get("on_reject")
        if isinstance(target, dict):
            self._jump(inst, wf, target)
            return target["goto"]
        if "next" in step.raw or "goto" in step.raw:
            return self._after(inst, wf, step)
        self._finish(inst, "completed", "refused")
        return "stop"

    def _do_foreach(self, conn, inst, wf, step, caller, run, text, entities):
        lp = inst["loops"].get(step.id)
        if lp is None:
            items = evaluate(step.arg, self._scope(inst))
            if not isinstance(items, list):
                raise ExpressionError(f"{step.arg}: foreach needs a list")
            lp = {"items": _jsonable(items), "index": 0}
            inst["loops"][step.id] = lp
        else:
            lp["index"] += 1
        for name in step.get("reset") or []:   # each item starts from these slots unfilled
            inst["slots"].pop(name, None)
        if lp["index"] >= len(lp["items"]):
            inst["loops"].pop(step.id)
            return self._after(inst, wf, step) or _END
        return step.body[0]

    def _do_approve(self, conn, inst, wf, step, caller, run, text, entities):
        spec = step.arg
        scope = self._scope(inst)
        amount = float(evaluate(spec["amount"], scope))
        tier = wf.tier_for(amount)
        lowest = min(wf.approval_tiers, key=lambda k: wf.approval_tiers[k]) if wf.approval_tiers else None
        currency = evaluate(spec["currency"], scope) if "currency" in spec else None
        if tier == lowest:
            inst["history"].append({"step": step.id, "event": "auto_approved", "amount": amount, "at": time.time()})
            return "next"
        call_step = spec.get("call")
        proposed = {"tool": None, "arguments": {}}
        if call_step:
            target = wf.steps[call_step]
            proposed = {"tool": target.arg, "arguments": _jsonable(evaluate_value(target.get("args") or {}, scope))}
        request = ApprovalRequest(
            instance_id=inst["id"], conversation_id=inst["conversation_id"], workflow=wf.name, step=step.id,
            amount=amount, currency=currency, tier=tier,
            order=_jsonable(evaluate(spec["order"], scope)) if "order" in spec else None,
            proposed_call=proposed,
            evidence=_jsonable(evaluate(spec["evidence"], scope)) if "evidence" in spec else None,
            customer={"channel": inst["caller"].get("channel"), "customer_id": inst["caller"].get("customer_id")},
            lang=inst["lang"])
        ticket = self.approvals.open_approval(conn, request)
        inst["approval_ticket"] = str(ticket)
        inst["pending"]["approval"] = {"step": step.id, "tier": tier, "amount": amount, "currency": currency,
                                       "proposed_call": proposed, "call_step": call_step, "ticket": str(ticket)}
        inst["status"] = "waiting_approval"
        inst["history"].append({"step": step.id, "event": "approval_requested", "tier": tier, "amount": amount,
                                "ticket": str(ticket), "at": time.time()})
        run.approval = request
        run.say(self._text(step.get("waiting"), inst, wf, run.lang)
                or _t("waiting_approval", run.lang, amount=f"{amount:.2f}", currency=currency or "",
                      tier=TIER_WORDS.get(run.lang, {}).get(tier, tier)))
        return "stop"

    def _do_reply(self, conn, inst, wf, step, caller, run, text, entities):
        run.say(self._text(step.arg, inst, wf, run.lang))
        if step.get("quick_replies"):
            run.quick = list(step.get("quick_replies"))
        return "next"

    def _do_handoff(self, conn, inst, wf, step, caller, run, text, entities):
        say = self._text(step.get("reply"), inst, wf, run.lang) or None
        self._escalate(inst, wf, run, step.arg["tier"], step.arg["reason"], say=say)
        return "stop"

    def _do_end(self, conn, inst, wf, step, caller, run, text, entities):
        run.say(self._text(step.get("reply"), inst, wf, run.lang))
        self._finish(inst, step.arg, step.arg)
        return "stop"

    # ------------------------------------------------------------------ result

    def _turn(self, inst: dict, wf: Workflow, run: _Run) -> FlowTurn:
        status = inst["status"]
        action = inst["pending"].get("action") if status == "waiting" else None
        return FlowTurn(reply="\n".join(p for p in run.parts if p), status=status, workflow=wf.name,
                        instance_id=inst["id"], step=inst["step"],
                        awaiting=run.awaiting if status == "waiting" else None,
                        quick_replies=run.quick if status == "waiting" else [],
                        pending_action=action, handoff=run.handoff, approval=run.approval, trace=run.trace,
                        outcome=inst.get("outcome"), reasks=inst["attempts"].get("_reasks", 0))


_END = None


def _kind_words(step: Step) -> dict[str, list[str]]:
    kinds = step.raw.get("kinds") or {}
    return {k: list(v) if isinstance(v, list) else [w for ws in v.values() for w in ws] for k, v in kinds.items()}
def _free_text(slot) -> bool:
    v = slot.validate
    return v.get("entity") in (None, "text") and "regex" not in v and "enum" not in v


def _ms(a: float, b: float) -> float:
    return round((b - a) * 1000.0, 3)


def _caller_dict(c: Caller) -> dict:
    return {k: v for k, v in asdict(c).items() if v is not None}


def _caller_from(inst: dict) -> Caller:
    c = inst["caller"]
    return Caller(channel=c.get("channel", ""), customer_id=c.get("customer_id", ""),
                  conversation_id=c.get("conversation_id") or inst["conversation_id"])


def _digest(wf: Workflow) -> str:
    """A definition's content (steps, slots, tiers), to tell a changed workflow from a reloaded same one."""
    body = {"steps": {k: v.raw for k, v in wf.steps.items()}, "first": wf.first, "tiers": wf.approval_tiers,
            "slots": {k: getattr(v, "validate", None) for k, v in wf.slots.items()}, "intents": wf.intents}
    return json.dumps(body, sort_keys=True, default=str)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _short_error(error: str, lang: str) -> str:
    status = error.split(":", 1)[-1].strip().split(" ", 1)[0]
    names = {"timeout": ("超时", "the system timed out"), "breaker_open": ("系统暂不可用", "the system is unavailable"),
             "rate_limited": ("请求过多", "too many requests"), "denied": ("没有权限", "not permitted")}
    zh, en = names.get(status, ("系统返回错误", "the system returned an error"))
    return zh if lang == "zh" else en
