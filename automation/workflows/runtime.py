"""What a flow's turn works with: the reply being built, the trace, and the operations steps share.

``FlowRun`` is one instance's turn: the turn's connection, the instance row, the definition it runs
on, the caller, the reply being collected and the engine's services (tools, approvals, similarity).
Step kinds (``steps/``) act through it: read the CEL scope, render a text, move to the next step,
jump, finish, fail, ask again, hand off. It holds the turn's caches (CEL data converted once, a
choice's option rows), so nothing of a turn is stored on the instance row. It never imports the
engine nor the step kinds (the engine lends it the registry): the engine builds it, runs the steps' handlers
with it and saves the row.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

import psycopg

from automation.tools.audit import writes_done
from automation.tools.base import Caller, ToolResult
from automation.workflows import memory as M
from automation.workflows import understand as U
from automation.workflows.outside import PENDING, SILENT, CallPending, Outside, call_outside, inline
from automation.workflows.expr import Envs, Scope, evaluate_bool, render
from automation.workflows.model import Step, Workflow, WorkflowSet
from automation.workflows.store import Instance
from text import personal

log = logging.getLogger("automation.workflows")

# a step handler's result (steps.base.Outcome): "next", "wait", "stop", a step id, or None when the flow is done;
# spelled out here because the step kinds import this module, never the other way round (no sibling cycles)
Outcome = str | None

MAX_ATTEMPTS = 3
# replies a waiting step acknowledged without an answer (something told, "both" where one is asked): no misses,
# but not without end either; counted under the step's id with this suffix
MAX_HEARD, HEARD = 6, "/heard"

# the approval levels in the customer's words ("需要主管审核", never "需要supervisor审核")
TIER_WORDS = {"zh": {"supervisor": "主管", "manager": "经理", "director": "总监", "auto": "自动"},
              "en": {"supervisor": "supervisor", "manager": "manager", "director": "director", "auto": "automatic"}}

TEXT = {
    "retry": {"zh": "抱歉，我没有听明白。", "en": "Sorry, I didn't catch that."},
    "noted": {"zh": "好的，您说的情况我已记下。", "en": "Thanks, I've noted that."},
    "one_at_a_time": {"zh": "抱歉，我一次只能办理其中一个，请问先办理哪一个？办完后可以再办下一个。",
                      "en": "Sorry, I can only do one of these at a time. Which one should I start with? We can do "
                            "the next one after that."},
    "choose_again": {"zh": "有几项都符合，请问是哪一个？", "en": "Several match. Which one do you mean?"},
    "not_among": {"zh": "这几项里没有找到「{thing}」。", "en": "I can't find \"{thing}\" among these."},
    "tool_failed": {"zh": "抱歉，这一步暂时没能完成（{error}）。您回复任意内容我会再试一次。",
                    "en": "I couldn't complete that yet ({error}). Reply and I will try again."},
    "shop_silent": {"zh": "抱歉，商店系统现在没有响应，这一步还没有完成。请稍后回复任意内容，我会再试一次；如果着急，我也可以帮您转人工。",
                    "en": "Sorry, the shop is not answering right now, so this is not done yet. Reply in a little "
                          "while and I'll try again, or ask for a colleague if it's urgent."},
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
    "queued": {"zh": "您的另一项请求（{task}）我会在这一项办完后接着办理。",
               "en": "One thing at a time: your other request ({task}) comes next, once this one is done."},
    "task_of_order": {"zh": "{task}，订单 {order}", "en": "{task}, order {order}"},
    "next_task": {"zh": "接下来办理您的另一项请求（{task}）：", "en": "Now your other request ({task}):"},
    "handed_over": {"zh": "您提到的其他事项（{requests}）我也已一并转交，无需重复说明。",
                    "en": "I've passed on what else you asked too ({requests}), so you won't need to repeat it."},
    "offer_declined": {"zh": "好的，先不办理。还有什么可以帮您的吗？", "en": "All right, I won't start it. Anything else I can help with?"},
    "cancelled_by_staff": {"zh": "抱歉，我们的同事审核后取消了您的这项请求，不会做任何操作。如有疑问请回复我们。",
                           "en": "Sorry, a colleague reviewed your request and cancelled it; nothing was done. "
                                 "Reply if you have any questions."},
}


def t(key: str, lang: str, **kw: Any) -> str:
    """One of the engine's own texts in the customer's language (English where a language lacks it)."""
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
    # the engine's own words for a handoff, said when the step gave none: a caller that tells the customer
    # itself (the router's acknowledgement of the ticket) leaves them out rather than say it twice
    default_line: str | None = None


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
    failure: str | None = None            # why a step failed or the flow escalated (masked), for the trace
    asked: list[str] = field(default_factory=list)   # questions kept beside the task, handed back when it ends

    def as_response(self) -> dict[str, Any]:
        return {"workflow": self.workflow, "instance_id": self.instance_id, "step": self.step,
                "status": self.status, "awaiting": self.awaiting, "pending_action": self.pending_action}


@dataclass
class HandOver:
    """What went to a person with the conversation (``FlowEngine.hand_over``): the reply's sentence saying so and
    the requests for the ticket's context (a task's words, slots and message, or a question)."""

    reply: str
    requests: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Restart:
    """A finished flow that the customer's next message starts again: "sorry, I meant 100241" (a corrected value),
    "and 100242?" (the same question about another value), "the other one" / "那个待付款的呢" (another of the
    options its choice offered). ``slots`` are what the message settled (the option it refers to), ``among`` the
    options a choose step asks among when it named several, ``history`` how they were settled."""

    workflow: str
    slots: dict[str, Any] = field(default_factory=dict)
    among: dict[str, list[int]] = field(default_factory=dict)      # choose step -> option indexes still in question
    history: list[dict[str, Any]] = field(default_factory=list)


class Prompter(Protocol):
    """What a turn needs of a waiting step kind to ask its question (steps.base.StepKind has it)."""

    def prompt(self, run: FlowRun, step: Step, *, with_prompt: bool = True) -> None: ...

    def asks_for(self, step: Step) -> str | None: ...


@dataclass
class Services:
    """What the engine lends a turn: the loaded set, the tool gateway, the approval port, the encoder's
    similarity (for choices by meaning) and the lifecycle observer."""

    workflows: WorkflowSet
    tools: Any
    approvals: ApprovalPort
    similarity: Callable[[str, list[str]], list[float]] | None = None
    observe: Callable[[str, str], None] = lambda workflow, event: None
    kinds: Mapping[str, Prompter] = field(default_factory=dict)   # the step kinds by name (steps.REGISTRY)
    outside: Outside = inline   # where tool calls run (the router: outside the turn's transaction)


class FlowRun:
    """One instance's turn: the reply being built and the operations the step kinds share."""

    def __init__(self, conn: Any, inst: Instance, wf: Workflow, caller: Caller | None, lang: str,
                 services: Services):
        self.conn, self.inst, self.wf, self.caller, self.lang, self.services = conn, inst, wf, caller, lang, services
        self.parts: list[str] = []
        self.quick: list[str] = []
        self.trace: list[StepTrace] = []
        self.handoff: HandoffRequest | None = None
        self.approval: ApprovalRequest | None = None
        self.awaiting: str | None = None
        self.tool_status: str | None = None     # the last call step's status, for its trace line
        self.envs = Envs()                      # the turn's CEL data, converted once
        self.forgotten: set[tuple[str, str]] = set()   # customers whose memory rows the run's save drops (wrote)
        self.memo: dict[str, Any] = {}          # step kinds' per-turn caches (a choice's option rows)
        self.failure: str | None = None         # the turn's failure reason, masked (log and trace)

    # -- the reply

    def say(self, text: str) -> None:
        if text:
            self.parts.append(text)

    def text(self, texts: Any, **extra: Any) -> str:
        """A step's text in the customer's language, its CEL holes filled."""
        if not texts:
            return ""
        template = texts if isinstance(texts, str) else texts.get(self.lang) or texts.get("en") or ""
        return render(template, self.scope(**extra))

    def scope(self, **extra: Any) -> Scope:
        inst, sets = self.inst, self.services.workflows
        data = Scope(inst["bindings"], self.envs)
        data["slots"] = {**dict.fromkeys(self.wf.known_slots or self.wf.slots), **inst["slots"]}   # unset: null
        data["caller"] = inst["caller"]
        data["lang"] = inst["lang"]
        data["approval"] = inst["pending"].get("approval_result") or {}
        data["error"] = inst["pending"].get("error") or {}
        data["message"] = inst["pending"].get("message") or ""
        data["intent"] = inst["pending"].get("intent")   # what the flow was started for (the classifier's name)
        data["notes"] = list(inst["pending"].get("notes") or [])
        if "memory" not in data:
            data["memory"] = M.empty(sets.memory)
        if "done" not in data:
            # read only for a workflow whose expressions or texts name it (spec.py decides at load): a loop of
            # writes would read it again after each one (steps/call.py), for nothing when no step asks
            data["done"] = self.done_writes() if self.wf.reads_done else []
        data["labels"] = sets.labels_for(inst["lang"])
        for loop_id, lp in inst["loops"].items():
            step = self.wf.steps[loop_id]
            if 0 <= lp["index"] < len(lp["items"]):
                data[step.raw["as"]] = lp["items"][lp["index"]]
                data["index"] = lp["index"]
        data.update(extra)
        return data

    def done_writes(self) -> list[dict[str, Any]]:
        """CEL ``done``: the writes earlier flows of this conversation made (tool, arguments and result as the
        audit keeps them, masked; at), read once per turn."""
        done: list[dict[str, Any]] | None = self.memo.get("done")
        if done is None:
            done = []
            if isinstance(self.conn, psycopg.Connection):
                done = jsonable(writes_done(self.conn, self.inst["conversation_id"]))
            self.memo["done"] = done
        return done

    # -- moving on

    def after(self, step: Step, *, transitions: bool = True) -> str | None:
        """The step after `step`: a matching transition, its goto, the next of its sequence, or back to its loop."""
        if transitions:
            for tr in step.get("next") or []:
                if "when" not in tr or evaluate_bool(tr["when"], self.scope()):
                    return str(tr["goto"])
            if "goto" in step.raw:
                return str(step.raw["goto"])
        if step.following:
            return step.following
        if step.parent:
            return step.parent   # the foreach moves to its next item
        return None

    def jump(self, target: dict[str, Any]) -> None:
        inst, wf = self.inst, self.wf
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

    # -- ending

    def finish(self, status: str, outcome: str) -> None:
        inst = self.inst
        self.services.observe(inst["workflow"], status)
        inst["status"], inst["outcome"], inst["step"] = status, outcome, None
        inst["pending"].pop("action", None)
        inst["history"].append({"event": status, "outcome": outcome, "at": time.time()})

    def cancel(self) -> None:
        """The customer called it off in the middle of a step (a "no" at a confirmation)."""
        self.say(t("cancelled", self.lang))
        self.finish("cancelled", "cancelled")

    def failed(self, reason: str) -> None:
        """A failure reason for the operator: logged at WARNING and put in the turn's trace, masked (a CEL
        error or a tool's message can quote the customer's data)."""
        masked = personal.mask(reason) or ""
        self.failure = masked
        log.warning("workflow %s (instance %s, step %s): %s", self.wf.name, self.inst["id"], self.inst["step"],
                    masked)

    def escalate(self, tier: str, reason: str, *, say: str | None = None) -> None:
        inst = self.inst
        if self.failure is None:
            self.failed(reason)
        self.services.observe(inst["workflow"], "escalated")
        line = say if say is not None else t("handoff", self.lang)
        self.handoff = HandoffRequest(tier=tier, reason=reason, flow_state=self.state(),
                                      default_line=line if say is None else None)
        self.say(line)
        inst["status"], inst["outcome"] = "escalated", "escalated"
        inst["history"].append({"event": "escalated", "tier": tier, "reason": reason, "step": inst["step"],
                                "at": time.time()})

    def fail(self, step: Step, error: str) -> Outcome:
        """A step that failed: its on_error, else wait and retry, and a human after the third failure."""
        inst = self.inst
        inst["pending"]["error"] = {"step": step.id, "error": error}
        n = inst["attempts"].get(step.id, 0) + 1
        inst["attempts"][step.id] = n
        inst["history"].append({"step": step.id, "event": "failed", "error": error, "attempt": n, "at": time.time()})
        self.failed(f"step {step.id} failed (attempt {n}): {error}")
        handler = step.get("on_error")
        if handler == "handoff" or n >= MAX_ATTEMPTS:
            self.escalate("L2", f"step {step.id} failed {n} time(s): {error}")
            return "stop"
        if isinstance(handler, dict):
            self.jump(handler)
            return str(handler["goto"])
        if self.tool_status in SILENT:
            self.say(t("shop_silent", self.lang))
        else:
            self.say(t("tool_failed", self.lang, error=_short_error(error, self.lang)))
        return "wait"

    #: what the customer told beside the questions, kept for the flow (CEL ``notes``: the last two, each cut to
    #: 200 characters, so a tool's reason field of a few hundred characters always takes them joined)
    NOTES_KEPT, NOTE_CHARS = 2, 200

    def retry(self, step: Step, why: str, *, quiet: bool = False, told: str | None = None) -> Outcome:
        """An answer the step could not read: ask again (with "sorry, I didn't catch that"), a person at the third.
        ``told``: the message, when it may tell something about the case instead ("it's broken" where an amount
        is asked, understand.tells_something): it is kept (``notes``, the history) and acknowledged, then the
        question asked again with its hint, never "I didn't catch that"; a mere go-on ("ok then go ahead") gets the
        question again, plainly."""
        inst = self.inst
        quiet = quiet or (told is not None and U.only_consents(told))
        # "全退", "refund both" where one option is asked for: the step takes one at a time, and says so
        every = told is not None and step.kind == "choose" and U.means_every(told)
        noted = told if told is not None and not every and U.tells_something(told) else None
        if noted is not None:
            notes = inst["pending"].setdefault("notes", [])
            notes.append(noted.strip()[:self.NOTE_CHARS])
            del notes[:-self.NOTES_KEPT]
            inst["history"].append({"step": step.id, "event": "noted", "at": time.time()})
        # a statement acknowledged, or a reply the bot answered, is no failed attempt; only their number is
        # bounded (a customer who tells and tells, never answering, still reaches a person in the end)
        heard = noted is not None or every
        key = step.id if not heard else f"{step.id}{HEARD}"
        n = inst["attempts"].get(key, 0) + 1
        inst["attempts"][key] = n
        if n >= (MAX_ATTEMPTS if not heard else MAX_HEARD):
            self.escalate("L2", f"{why} after {n} attempts at step {step.id}")
            return "stop"
        if every:
            self.say(t("one_at_a_time", self.lang))
            self.prompt(step, again=False, with_prompt=False)   # the options again, under "which one first?"
            return "wait"
        if noted is not None:
            self.say(t("noted", self.lang))
        self.prompt(step, again=not quiet and noted is None, hint=True)
        return "wait"

    def prompt(self, step: Step, *, again: bool, with_prompt: bool = True, hint: bool = False) -> None:
        """Ask what a waiting step asks (its kind says how); asked again (``again``, ``hint``), with what an
        answer looks like when its slot says (``hint``)."""
        if again:
            self.say(t("retry", self.lang))
        kind = self.services.kinds[step.kind]
        kind.prompt(self, step, with_prompt=with_prompt)
        name = kind.asks_for(step) if again or hint else None
        slot = self.wf.slots.get(name) if name else None
        if slot is not None and slot.hint:
            self.say(self.text(slot.hint))

    def call_tool(self, name: str, args: dict[str, Any], who: Caller, key: str | None, *,
                  repeat: bool = False) -> ToolResult:
        """A step's tool call, outside the turn's transaction where the router offers that (see Services.outside);
        raises :class:`CallPending` in a pass that only notes the call."""
        result = call_outside(self.services.outside, self.services.tools, name, args, who, key, repeat=repeat)
        if result is PENDING:
            raise CallPending(name)
        got: ToolResult = result
        return got

    def wrote(self, who: Caller) -> None:
        """A write of the customer's succeeded: the shop data remembered of them is stale (memory.forget)."""
        if self.conn is not None:   # the rows go with the run's save (a loop of ten writes drops them once)
            M.forget(who)
            self.forgotten.add((who.channel, who.customer_id))

    # -- what a person or a write sees

    def state(self) -> dict[str, Any]:
        """The flow's state for a ticket's context package."""
        inst, wf = self.inst, self.wf
        return {"workflow": wf.name, "version": wf.version, "instance_id": inst["id"], "step": inst["step"],
                "status": inst["status"], "slots": inst["slots"],
                "bindings": sorted(k for k in inst["bindings"] if k != "memory"),
                "error": inst["pending"].get("error"), "risk": wf.risk,
                "notes": list(inst["pending"].get("notes") or []),   # what the customer told beside the questions
                "history": inst["history"][-20:]}

    def idempotency_key(self, step: Step) -> str:
        inst = self.inst
        key = f"flow:{inst['id']}:{step.id}"
        p = step.parent
        chain = []
        while p:
            chain.append(str(inst["loops"].get(p, {}).get("index", 0)))
            p = self.wf.steps[p].parent
        if chain:
            key += ":" + ".".join(reversed(chain))
        if inst["generation"]:
            key += f":g{inst['generation']}"
        return key

    def to_turn(self) -> FlowTurn:
        inst = self.inst
        status = inst["status"]
        action = inst["pending"].get("action") if status == "waiting" else None
        return FlowTurn(reply="\n".join(p for p in self.parts if p), status=status, workflow=self.wf.name,
                        instance_id=inst["id"], step=inst["step"],
                        awaiting=self.awaiting if status == "waiting" else None,
                        quick_replies=self.quick if status == "waiting" else [],
                        pending_action=action, handoff=self.handoff, approval=self.approval, trace=self.trace,
                        outcome=inst.get("outcome"), reasks=inst["attempts"].get("_reasks", 0), failure=self.failure,
                        asked=[] if status in ("waiting", "running", "waiting_approval", "suspended")
                        else list(inst["pending"].get("asked") or []))


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _short_error(error: str, lang: str) -> str:
    status = error.split(":", 1)[-1].strip().split(" ", 1)[0]
    names = {"timeout": ("超时", "the system timed out"), "breaker_open": ("系统暂不可用", "the system is unavailable"),
             "rate_limited": ("请求过多", "too many requests"), "denied": ("没有权限", "not permitted")}
    zh, en = names.get(status, ("系统返回错误", "the system returned an error"))
    return zh if lang == "zh" else en
