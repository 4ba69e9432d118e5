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
import uuid
from dataclasses import fields
from typing import Any, Callable

from automation.tools.base import Caller, ToolGateway
from automation.workflows import memory as M
from automation.workflows import requests as R
from automation.workflows import store
from automation.workflows import understand as U
from automation.workflows.expr import ExpressionError, evaluate_bool
from automation.workflows.listening import (CLAIMED, READINGS, Listening, about_ended, declined_beside,  # noqa: F401
                                            offered, reading as read_message)
from automation.workflows.model import RISK_ORDER, Workflow, WorkflowSet
from automation.workflows.outside import PENDING, CallPending, Outside, inline
from automation.workflows.runtime import (ApprovalPort, ApprovalRequest, FlowRun, FlowTurn, HandoffRequest,  # noqa: F401
                                          HandOver, Restart, Services, StepTrace, t)
from automation.workflows.steps import REGISTRY, WAITING_KINDS, StepContext
from automation.workflows.steps import answers as A
from automation.workflows.steps.confirm import action_slots
from automation.workflows.store import Instance

MAX_STEPS_PER_TURN = 400

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
        # where tool calls and memory loads run (the router points it outside the turn's transaction)
        self.outside: Outside = inline

    # ------------------------------------------------------------------ lifecycle

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

    def _pinned(self, inst: Instance) -> tuple[Workflow, str | None]:
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

    def _flow_run(self, conn: Any, inst: Instance, wf: Workflow, caller: Caller | None,
                  lang: str) -> FlowRun:
        """A turn of one instance; the shop's words for its values (``vocabulary``) are this workflow's."""
        R.VOCABULARY.set(wf.vocabulary)
        R.ADDRESS.set(wf.address or R.DEFAULT_ADDRESS)
        services = Services(self.workflows, self.tools, self.approvals, self.similarity, self._observe, REGISTRY,
                            outside=self.outside)
        return FlowRun(conn, inst, wf, caller, lang, services)

    def _gone(self, conn: Any, run: FlowRun, why: str) -> FlowTurn:
        """The flow's definition or step is gone (a reload removed it): a person takes over, politely."""
        run.inst["pending"].pop("approval", None)
        run.escalate("L2", why, say=t("changed", run.lang))
        store.save(conn, run.inst)
        return run.to_turn()

    def active(self, conn: Any, conversation_id: str) -> Instance | None:
        return store.active(conn, conversation_id)

    def overview(self, conn: Any, conversation_id: str) -> store.Flows:
        """The conversation's active flow, its most recent one and how many it has had, in one read."""
        return store.overview(conn, conversation_id)

    def start(self, conn: Any, workflow: str, caller: Caller, text: str = "", entities: dict[str, Any] | None = None,
              lang: str = "en", *, restart: Restart | None = None, queued: bool = False,
              flows: store.Flows | None = None, order: dict[str, Any] | None = None,
              after: list[dict[str, Any]] | None = None, intent: str | None = None) -> FlowTurn:
        """Start ``workflow`` from the customer's message; ``restart``: what a message that started a finished flow
        again settled for it (the option it referred to, or the options to ask among; see ``correcting``).
        ``queued``: see :meth:`queue`. ``flows``: the conversation's flows as the caller read them in this
        transaction, unchanged since (:meth:`overview`): not read again. One task asked for several orders ("refund
        order 100241 and the lamp one 100240") is done one order at a time: the first named now, each other one
        kept as the same task for that order alone (``order``: the slot it fills; ``after``: the orders kept after
        it, one at a time), started when the one before ends. ``intent``: what the message was classified as (the
        classifier's name), kept for the flow's whole life as CEL ``intent`` (one workflow serving several intents
        answers each: "where is my refund" beside "where is my order")."""
        wf = self.workflows[workflow]
        conversation_id = caller.conversation_id or f"{caller.channel}:{caller.customer_id}"
        slots = A.prefill(wf, text, entities or {}) if order is None else dict(order)
        others = _other_orders(wf, text, slots) if restart is None and not queued and order is None else []
        if restart is not None and restart.workflow == wf.name:
            slots.update(restart.slots)
        focus = self._in_focus(conn, conversation_id, wf, text, slots, flows) if restart is None and order is None \
            else {}
        slots.update(focus)
        remembered = self.memory(conn, caller, lang, stored=flows is None or not flows.new)
        inst = store.create(conn, conversation_id=conversation_id, workflow=wf.name, version=wf.version,
                            step=wf.first, lang=lang, caller=_caller_dict(caller), slots=slots,
                            id=_instance_id(conn, conversation_id, wf.name, caller.turn_id,
                                            flows_so_far=None if flows is None else flows.count),
                            status="suspended" if queued else "running", stored=False)   # inserted by its save
        inst["bindings"]["memory"] = remembered
        inst["history"].append({"event": "started", "at": time.time(), "prefilled": sorted(slots),
                                **({"in_focus": sorted(focus)} if focus else {})})
        if restart is not None and restart.workflow == wf.name:
            inst["history"].extend(restart.history)
            if restart.among:
                inst["pending"]["choose_among"] = {k: list(v) for k, v in restart.among.items()}
        inst["pending"]["message"] = text or ""
        if intent:
            inst["pending"]["intent"] = intent
        run = self._flow_run(conn, inst, wf, caller, lang)
        if queued:
            inst["status"], inst["pending"]["queued"] = "suspended", True
            if after:
                inst["pending"]["orders_after"] = after
            inst["history"][-1]["event"] = "queued"
            run.say(t("queued", lang, task=_task_words(wf, lang, inst)))
            store.save(conn, inst)
            return run.to_turn()
        self._observe(wf.name, "started")
        turn = self._run(run, text=None, entities=entities or {})
        if others:
            kept = self.start(conn, wf.name, caller, text, None, lang, queued=True, order=others[0], after=others[1:],
                              intent=intent)
            turn.reply = "\n".join(x for x in (kept.reply, turn.reply) if x)
        return turn

    def queue(self, conn: Any, workflow: str, caller: Caller, text: str = "", entities: dict[str, Any] | None = None,
              lang: str = "en", *, intent: str | None = None) -> FlowTurn:
        """A second task asked in the same message as the one being served ("refund 100241 and an invoice for
        100240"): kept with its own words (what they fill, as at a start) but not run, so nothing of it happens
        before the first task ends; it starts then (``resume``). The reply says it comes next."""
        return self.start(conn, workflow, caller, text, entities, lang, queued=True, intent=intent)

    def _in_focus(self, conn: Any, conversation_id: str, wf: Workflow, text: str, given: dict[str, Any],
                  flows: store.Flows | None = None, window_seconds: float = 1800.0) -> dict[str, Any]:
        """What a new task takes from the one just finished when the message refers back to it: "where is my order
        100241?" -> "...shipped" -> "I want a refund for it" / "那帮我取消吧" is about order 100241. Only slots the
        message does not fill, read by the same entity (an order number) under the same name, from the
        conversation's last flow that ended well within ``window_seconds``; the new task's own checks judge them."""
        if not U.refers_back(text):
            return {}
        last = store.last(conn, conversation_id) if flows is None else flows.last
        if last is None or last["status"] != "completed" or last["outcome"] not in ("completed", None):
            return {}
        if time.time() - last["updated_at"].timestamp() > window_seconds:
            return {}
        done = self.workflows.workflows.get(last["workflow"])
        if done is None:
            return {}
        taken: dict[str, Any] = {}
        for name, slot in wf.slots.items():
            ent = slot.validate.get("entity")
            before = done.slots.get(name)
            if name in given or not isinstance(ent, str) or ent in ("text", "number", "yes_no") or before is None \
                    or before.validate.get("entity") != ent:
                continue
            value = (last.get("slots") or {}).get(name)
            if value is not None and slot.check(value):
                taken[name] = value
        return taken

    def offer(self, conn: Any, workflow: str, caller: Caller, text: str = "", entities: dict[str, Any] | None = None,
              lang: str = "en", *, intent: str | None = None) -> FlowTurn:
        """Offer the task after an answer ("Shall I start a return for one of your orders?"): the flow waits at
        its first step for the customer's yes (the reading is "answer") or no ("cancel"); nothing runs yet.
        The caller words the offer; the question's values (an order number) and its ``intent`` are kept for the
        task."""
        wf = self.workflows[workflow]
        conversation_id = caller.conversation_id or f"{caller.channel}:{caller.customer_id}"
        slots = A.prefill(wf, text, entities or {})
        # made waiting, with its offer, in one statement
        inst = store.create(conn, conversation_id=conversation_id, workflow=wf.name, version=wf.version,
                            step=wf.first, lang=lang, caller=_caller_dict(caller), slots=slots, status="waiting",
                            pending={"offer": {"message": text or ""}, **({"intent": intent} if intent else {})},
                            history=[{"event": "offered", "at": time.time(), "prefilled": sorted(slots)}])
        run = self._flow_run(conn, inst, wf, caller, lang)
        run.awaiting = "offer"
        run.quick = [t("confirm_yes", lang), t("confirm_no", lang)]
        return run.to_turn()

    def done_lately(self, conn: Any, conversation_id: str, workflow: str, text: str = "",
                    entities: dict[str, Any] | None = None, window_seconds: float = 1800.0) -> bool:
        """Whether ``workflow`` already ended done in this conversation (within ``window_seconds``) for what ``text``
        names: an offer of it after an answer is then not needed ("where's my package" -> its status -> "how long
        does shipping take?" is answered without "Would you like me to help with one of your orders?"). A value the
        message names that the earlier run did not have (another order) is a task still to do."""
        wf = self.workflows.workflows.get(workflow)
        if wf is None:
            return False
        named = A.prefill(wf, text, entities or {})
        return any(all(str((row["slots"] or {}).get(k)) == str(v) for k, v in named.items())
                   for row in store.done_lately(conn, conversation_id, workflow, window_seconds))

    offered = staticmethod(offered)   # is an instance an offer the customer has not taken up yet?

    def lapse(self, conn: Any, instance: Instance) -> None:
        """The customer moved on without answering the offer: it ends quietly (cancelled, outcome ``lapsed``)."""
        inst = store.get(conn, instance["id"], lock=True)
        if inst is None or not self.offered(inst):
            return
        inst["pending"].pop("offer", None)
        inst["status"], inst["outcome"], inst["step"] = "cancelled", "lapsed", None
        inst["history"].append({"event": "offer_lapsed", "at": time.time()})
        store.save(conn, inst)

    # ------------------------------------------------------------------ a customer's turn

    def listen(self, instance: Instance | None, text: str, entities: dict[str, Any] | None = None, *,
               intent: str | None = None, intent_confidence: float | None = None) -> Listening | None:
        """The conversation's active flow (``active``, read by the caller) and what it reads ``text`` as; None when
        no flow is active."""
        if instance is None:
            return None
        heard = Listening(instance, self.read(instance, text, entities, intent=intent,
                                              intent_confidence=intent_confidence))
        if heard.reading == "answer":
            wf, _ = self._pinned(Instance(**{**instance, "history": list(instance.get("history") or [])}))
            split = declined_beside(self._flow_run(None, instance, wf, None, instance.get("lang") or "en"), text)
            if split is not None:
                heard.answer, heard.asked = split
        return heard

    def on_message(self, conn: Any, caller: Caller, text: str, entities: dict[str, Any] | None = None, *,
                   lang: str = "en", listening: Listening | None = None, workflow: str | None = None,
                   intent: str | None = None, intent_confidence: float | None = None,
                   restart: Restart | None = None, flows: store.Flows | None = None) -> FlowTurn | None:
        """The turn's one entry: the flow that listened moves on with the reading it made (never read twice);
        without one (or when it is no longer active) ``workflow``, else the workflow serving ``intent``,
        starts (with what ``restart`` settled, when it restarts that workflow). None: no flow takes the message.
        ``flows``: the conversation's flows as read in this transaction, unchanged since (see :meth:`start`).
        A question the listening still holds (``Listening.asked``: the router could not answer it beside the
        answer) is kept on the flow and handed back when the task ends (``FlowTurn.asked``)."""
        if listening is not None:
            said = listening.answer if listening.answer is not None else text   # a question beside it is the router's
            turn = self.advance(conn, listening.instance, caller, said, entities, lang=lang, intent=intent,
                                intent_confidence=intent_confidence, reading=listening.reading, only_active=True,
                                asked=listening.asked)
            if turn is not None:
                return turn
        wf = (self.workflows.workflows.get(workflow) if workflow else
              self.workflows.for_intent(intent) if intent else None)
        if wf is None:
            return None
        # a flow that listened may have moved on: what was read before is not taken for the start then
        return self.start(conn, wf.name, caller, text, entities, lang=lang, restart=restart,
                          flows=flows if listening is None else None, intent=intent)

    def read(self, instance: Instance, text: str, entities: dict[str, Any] | None = None, *,
             intent: str | None = None, intent_confidence: float | None = None) -> str:
        """What the flow's waiting step reads ``text`` as (one of READINGS), changing nothing.

        The turn asks this before its classifier and escalation rules judge the message: an answer to the
        bot's own question ("50", "是的", an invoice title) is the flow's, never an unclear new message."""
        wf, gone = self._pinned(Instance(**{**instance, "history": list(instance.get("history") or [])}))
        run = self._flow_run(None, instance, wf, None, instance.get("lang") or "en")
        return read_message(run, gone, text, entities or {}, intent, intent_confidence, self.drift_threshold)

    def advance(self, conn: Any, instance: Instance | str, caller: Caller, text: str,
                entities: dict[str, Any] | None = None, lang: str = "en", intent: str | None = None,
                intent_confidence: float | None = None, *, reading: str | None = None,
                only_active: bool = False, asked: str | None = None) -> FlowTurn:
        """The customer's message to a running flow; ``reading`` is what ``listen`` read it as (read here when
        not given). With ``only_active``, a flow that is no longer active gives None (``on_message`` starts
        another task then)."""
        inst = store.get(conn, instance["id"] if isinstance(instance, dict) else instance, lock=True)
        if inst is None:
            raise KeyError(f"no flow instance {instance}")
        entities = entities or {}
        wf, gone = self._pinned(inst)
        run = self._flow_run(conn, inst, wf, caller, lang)
        if inst["status"] not in store.ACTIVE:
            return None if only_active else run.to_turn()   # type: ignore[return-value]
        if reading is None:
            reading = read_message(run, gone, text, entities, intent, intent_confidence, self.drift_threshold)
        inst["lang"] = lang
        inst["pending"]["message"] = text or ""
        if asked:   # "不用了，我还想问下退货运费": the question waits for the task's end, never dropped
            inst["pending"].setdefault("asked", []).append(asked)
        if gone:
            return self._gone(conn, run, gone)
        turn = self._advance(run, reading, text, entities)
        turn.reading = reading
        return turn

    def _advance(self, run: FlowRun, reading: str, text: str, entities: dict[str, Any]) -> FlowTurn:
        inst, wf = run.inst, run.wf
        if inst["status"] == "waiting_approval":
            if reading == "cancel":   # "算了" while a human reviews: the request is withdrawn, nothing runs
                return self._withdraw(run, "the customer cancelled the request")
            # the decision is in a human's hands now: only resolve_approval moves the flow on
            run.say(t("still_reviewing", run.lang))
            return run.to_turn()
        offer = inst["pending"].pop("offer", None)
        if offer is not None:
            return self._answer_offer(run, offer, reading, text, entities)
        step = wf.steps.get(inst["step"]) if inst["step"] else None
        if reading == "cancel":
            return self._cancel(run, "customer")
        if reading == "digression" and step is not None:
            inst["attempts"]["_reasks"] = inst["attempts"].get("_reasks", 0) + 1
            inst["history"].append({"event": "drift", "step": step.id, "at": time.time()})
            run.prompt(step, again=False)
            store.save(run.conn, inst)
            turn = run.to_turn()
            turn.drift = True
            return turn
        return self._run(run, text=U.said_after_dropping(text) or text, entities=entities)

    def _answer_offer(self, run: FlowRun, offer: dict[str, Any], reading: str, text: str,
                      entities: dict[str, Any]) -> FlowTurn:
        """The customer's answer to an offer: "yes" starts the task from its first step, with what the question
        said; "no thanks" (or anything but a yes) ends it, nothing having started."""
        inst = run.inst
        if reading != "answer":
            declined = reading == "cancel"
            run.say(t("offer_declined", run.lang) if declined else "")
            inst["history"].append({"event": "offer_declined" if declined else "offer_lapsed", "at": time.time()})
            inst["status"], inst["step"] = "cancelled", None   # never started: no flow event to count
            inst["outcome"] = "declined" if declined else "lapsed"
            store.save(run.conn, inst)
            return run.to_turn()
        if run.caller is not None:
            inst["bindings"]["memory"] = self.memory(run.conn, run.caller, run.lang)
        # "龙井那个" taken for a yes (listening.answers_offer): said before the task asks, as the question was
        said = "" if U.yes_no(text, entities) is True else (text or "")
        for name, value in (A.prefill(run.wf, said, entities) if said else {}).items():
            inst["slots"].setdefault(name, value)
        inst["pending"]["message"] = "\n".join(w for w in (offer.get("message") or "", said) if w)
        inst["history"].append({"event": "started", "offer": "accepted", "at": time.time(),
                                "prefilled": sorted(inst["slots"])})
        self._observe(inst["workflow"], "started")
        return self._run(run, text=None, entities={})

    # ------------------------------------------------------------------ other tasks, corrections, memory

    def suspend(self, conn: Any, instance: Instance, *, because: str) -> None:
        """Interrupt a waiting flow for another task of the customer's (``because``: that task's workflow); it asks
        its question again once that task ends (``resume``)."""
        inst = store.get(conn, instance["id"], lock=True)
        if inst is None or inst["status"] != "waiting":
            return
        inst["status"] = "suspended"
        inst["history"].append({"event": "suspended", "for": because, "step": inst["step"], "at": time.time()})
        store.save(conn, inst)

    def resume(self, conn: Any, conversation_id: str, lang: str | None, caller: Caller | None = None, *,
               kept_only: bool = False) -> FlowTurn | None:
        """The most recently interrupted flow takes its place again and repeats its question; None when there is
        none or another flow is active. A flow whose definition is gone ends cancelled, quietly. A queued task
        (``queue``) starts now, for ``caller`` (the turn's, else the one it was queued for). ``lang``: the
        turn's language (None outside a turn: the flow's own). ``kept_only``: only a queued task (the turn
        ended with nothing running: the request it waited for was answered, not run as a task)."""
        if store.active(conn, conversation_id) is not None:
            return None
        inst = store.suspended(conn, conversation_id, lock=True)
        if inst is None or (kept_only and not inst["pending"].get("queued")):
            return None
        wf, gone = self._pinned(inst)
        step = wf.steps.get(inst["step"]) if inst["step"] else None
        lang = lang or inst["lang"]
        if inst["pending"].pop("queued", None) and not gone:
            who = caller or _caller_from(inst)
            run = self._flow_run(conn, inst, wf, who, lang)
            inst["lang"] = lang
            inst["bindings"]["memory"] = self.memory(conn, who, lang)   # the first task may have changed it
            inst["history"].append({"event": "started", "queued": True, "at": time.time(),
                                    "prefilled": sorted(inst["slots"])})
            self._observe(wf.name, "started")
            run.say(t("next_task", lang, task=_task_words(wf, lang, inst)))
            more = inst["pending"].pop("orders_after", None)
            turn = self._run(run, text=None, entities={})
            if more:   # the same task for the next order the customer named, kept after this one
                kept = self.start(conn, wf.name, who, inst["pending"].get("message") or "", None, lang, queued=True,
                                  order=more[0], after=more[1:])
                turn.reply = "\n".join(x for x in (turn.reply, kept.reply) if x)
            return turn
        run = self._flow_run(conn, inst, wf, None, lang)
        if gone or step is None or step.kind not in WAITING_KINDS:
            run.finish("cancelled", "cancelled")
            store.save(conn, inst)
            return None
        inst["status"], inst["lang"] = "waiting", lang
        inst["history"].append({"event": "resumed", "step": step.id, "at": time.time()})
        run.say(t("resume", lang, task=_task_words(wf, lang)))
        run.prompt(step, again=False)
        store.save(conn, inst)
        return run.to_turn()

    def hand_over(self, conn: Any, conversation_id: str, lang: str, asked: list[str] | tuple[str, ...] = ()
                  ) -> HandOver | None:
        """A person takes the conversation: what the bot still kept for the customer goes to them. Every suspended
        task (kept for after another, or interrupted by one) ends ``handed_over`` and the questions kept beside a
        task (``on_message``; ``asked``: those of a task that ended this turn) go with it, so the agent sees them in the
        ticket and nothing is started behind the agent's back; the reply says so. None: nothing was kept."""
        requests: list[dict[str, Any]] = []
        questions = list(asked)
        active = store.active(conn, conversation_id, lock=True)
        if active is not None and active["pending"].get("asked"):
            questions += active["pending"].pop("asked")
            store.save(conn, active)
        while (inst := store.suspended(conn, conversation_id, lock=True)) is not None:
            wf, _ = self._pinned(inst)
            questions += inst["pending"].pop("asked", None) or []
            requests.append({"workflow": wf.name, "task": _task_words(wf, lang, inst), "slots": dict(inst["slots"]),
                             "text": inst["pending"].get("message") or "", "instance_id": str(inst["id"]),
                             "kept": "queued" if inst["pending"].get("queued") else "interrupted"})
            inst["status"], inst["outcome"], inst["step"] = "cancelled", "handed_over", None
            inst["history"].append({"event": "handed_over", "at": time.time()})
            store.save(conn, inst)
        requests += [{"question": q} for q in dict.fromkeys(questions)]
        if not requests:
            return None
        said = [r["task"] if "task" in r else f"“{r['question']}”" for r in requests]
        return HandOver(reply=t("handed_over", lang, requests="; ".join(said)), requests=requests)

    def correcting(self, conn: Any, conversation_id: str, text: str, entities: dict[str, Any] | None = None,
                   window_seconds: float = 1800, *, intent: str | None = None,
                   flows: store.Flows | None = None) -> Restart | None:
        """The finished workflow a message starts again, and what it settled for it; None (changes nothing).

        "where is my order 100999?" -> "I couldn't find order 100999." -> "sorry, I meant 100241": the flow ended
        refused a moment ago, and the message gives another value for a slot it had (a correction cue, or little
        more than the value). The same workflow then starts again from that message. So does a follow-up after a
        workflow that only reads: "where is my order 100241?" -> "...shipped" -> "and 100242?" / "那100242呢" (the
        same question about another value), or "the other one" / "what about the first one" / "那个待付款的呢"
        (another of the options its choice offered, ``StepKind.other_option``), unless the classifier heard
        another workflow's task (``intent``). One that writes is never started again by such a message."""
        last = store.last(conn, conversation_id) if flows is None else flows.last
        if last is None or last["status"] != "completed":
            return None
        if time.time() - last["updated_at"].timestamp() > window_seconds:
            return None
        wf = self.workflows.workflows.get(last["workflow"])
        if wf is None:
            return None
        if last["outcome"] == "refused":
            if not (U.is_correction(text) or not U.is_free_value(U.strip_correction(text))):
                return None
            return Restart(wf.name) if A.correction(last, wf, text, entities or {}) is not None else None
        if wf.risk != "read":
            return None
        if U.is_follow_up(text) and A.correction(last, wf, text, entities or {}) is not None:
            return Restart(wf.name)
        heard = self.workflows.for_intent(intent) if intent else None
        if heard is not None and heard.name != wf.name:
            return None   # "I want to return the keyboard": another task, whatever it shares with the options
        return self._other_option(conn, last, text)

    def ended(self, conn: Any, conversation_id: str, text: str, entities: dict[str, Any] | None = None,
              window_seconds: float = 1800, *, intent: str | None = None, intent_confidence: float | None = None,
              flows: store.Flows | None = None) -> str | None:
        """With no flow waiting, a message that belongs to the task that just ended refused (a value for the
        question it never got to ask, or a correction of it: see listening.about_ended): that refusal again, for
        a truthful reply; None otherwise. Changes nothing."""
        last = store.last(conn, conversation_id) if flows is None else flows.last
        if last is None or (flows is not None and flows.active is not None) or last["status"] != "completed" \
                or last.get("outcome") != "refused":
            return None
        if time.time() - last["updated_at"].timestamp() > window_seconds:
            return None
        wf, gone = self._pinned(Instance(**{**last, "history": list(last.get("history") or [])}))
        if gone:
            return None
        other = (intent is not None and intent_confidence is not None and intent_confidence >= self.drift_threshold
                 and not wf.own_topic(intent))
        run = self._flow_run(None, last, wf, None, last.get("lang") or "en")
        try:
            return about_ended(run, text, entities or {}, other=other)
        except ExpressionError:
            return None

    def _other_option(self, conn: Any, last: Instance, text: str) -> Restart | None:
        """The finished flow's latest pick among options it offered, taken again with the option ``text`` refers to."""
        wf, gone = self._pinned(Instance(**{**last, "history": list(last.get("history") or [])}))
        if gone:
            return None
        picked = next((h for h in reversed(last.get("history") or []) if h.get("event") == "chose"), None)
        step = wf.steps.get(picked.get("step")) if picked is not None else None
        if picked is None or step is None or step.kind not in WAITING_KINDS:
            return None
        run = self._flow_run(conn, last, wf, None, last.get("lang") or "en")
        try:
            return REGISTRY[step.kind].other_option(run, step, text, picked)
        except ExpressionError:
            return None   # its options cannot be read now: nothing to refer to

    def memory(self, conn: Any, caller: Caller, lang: str = "en", *, stored: bool = True) -> dict[str, Any]:
        """The session's memory (profile, recent orders, earlier outcomes): loaded once, cached per conversation;
        ``stored``: False when the conversation has no memory row yet (not read)."""
        if caller.conversation_id is None:
            caller = Caller(caller.channel, caller.customer_id, f"{caller.channel}:{caller.customer_id}",
                            caller.turn_id, caller.purpose)
        return M.session(conn, self.workflows.memory, self.tools, caller, lang, tickets=self.tickets,
                         outside=self.outside, stored=stored)

    def ahead(self, conn: Any, workflow: str, caller: Caller, text: str = "", entities: dict[str, Any] | None = None,
              lang: str = "en", *, new: bool = False, first_contact: bool = False) -> str | None:
        """Ask the outside port now for the shop reads that starting ``workflow`` with this message would make
        first. The router does so before the turn that will start the flow, so the turn finds their results at
        hand and needs no pass of its own to discover them. Returns None when nothing was asked, "asked" when
        something was, "again" when the session memory's calls were asked and the flow's first reads, which may
        depend on their answers, are to be asked once they are at hand (a second look).

        First the session memory (its calls, when it is not kept); with the memory at hand, the start is walked
        as :meth:`start` walks it (the slots the message gives, the memory), in memory only, through the steps
        that change nothing (``StepKind.pure``) up to the first read call whose result is not at hand, which is
        asked. The walk ends at a step that waits for the customer, at a write (never made ahead) or at any
        other kind. While the memory's calls run, the same walk over the memory's defaults tells whether a
        second look is worth it: when the walk reaches a read, or passes a step that reads the memory (the single
        recent order picked, a step skipped for a customer with none), the result may differ once it answers. A
        read reached whose step names nothing of the memory is asked at once, beside the memory's calls (one shop
        round, not two); a second look then only when a step on the way read the memory.
        Nothing is stored or counted; the turn decides as always, on its own reading of the same rules: a guess
        it proves wrong (another slot value, a concurrent change) costs the reads only. ``new``: the
        conversation is not stored yet (it has no memory row and no earlier flow to read); ``first_contact``: the
        customer has no other conversation either (no earlier outcome to read: the memory asks the shop only)."""
        wf = self.workflows.workflows.get(workflow)
        if wf is None or caller.conversation_id is None:
            return None
        spec = self.workflows.memory
        try:
            remembered = M.peek(conn, spec, self.tools, caller, lang, tickets=self.tickets, outside=self.outside,
                                stored=not new, earlier=not first_contact)
        except CallPending:    # the memory's calls are asked: may the flow read the shop once they answer?
            noted: dict[Any, Callable[[], Any]] = {}

            def looking(key: Any, compute: Callable[[], Any]) -> Any:
                noted[key] = compute     # asked of nobody yet: the read reached is only noted
                return PENDING

            run = self._draft(conn, wf, caller, text, entities, lang, M.empty(spec), new, outside=looking)
            # over the memory's defaults: a read reached, or a step on the way that reads the memory (the single
            # order picked from it, a step skipped while the customer has no orders) may lead to one
            touched: list[str] = []
            read = _first_reads(run, entities or {}, touched)
            reached = run.inst["step"]
            if read and reached is not None and not wf.steps[reached].reads_memory:
                # the read reached names nothing of the memory ("get_order" of the order the message names): asked
                # now, beside the memory's calls, instead of one shop round after them. A step on the way that reads
                # the memory may still lead elsewhere once it answers (a second look then asks that: this read was a
                # guess that cost a call); with none, the memory cannot change the walk
                for key, compute in noted.items():
                    self.outside(key, compute)
                return "again" if touched else "asked"
            return "again" if read or touched else "asked"
        run = self._draft(conn, wf, caller, text, entities, lang, remembered, new, outside=self.outside)
        return "asked" if _first_reads(run, entities or {}) else None

    def _draft(self, conn: Any, wf: Workflow, caller: Caller, text: str, entities: dict[str, Any] | None, lang: str,
               remembered: dict[str, Any], new: bool, *, outside: Outside) -> FlowRun:
        """A turn of ``wf`` as :meth:`start` would begin it, in memory only (never saved, nothing counted)."""
        assert caller.conversation_id is not None
        slots = A.prefill(wf, text, entities or {})
        if not new:
            slots.update(self._in_focus(conn, caller.conversation_id, wf, text, slots))
        inst = store.draft(conversation_id=caller.conversation_id, workflow=wf.name, version=wf.version,
                           step=wf.first, lang=lang, caller=_caller_dict(caller), slots=slots)
        inst["bindings"]["memory"] = remembered
        inst["pending"]["message"] = text or ""
        R.VOCABULARY.set(wf.vocabulary)
        R.ADDRESS.set(wf.address or R.DEFAULT_ADDRESS)
        services = Services(self.workflows, self.tools, self.approvals, self.similarity, _unseen, REGISTRY,
                            outside=outside)
        return FlowRun(conn, inst, wf, caller, lang, services)

    # ------------------------------------------------------------------ staff: approvals and cancels

    def resolve_approval(self, conn: Any, instance_id: str, approved: bool, approver: str,
                         reason: str | None = None) -> FlowTurn:
        """Apply an approver's decision exactly once; a second decision (or a late one) changes nothing."""
        inst = store.get(conn, instance_id, lock=True)
        if inst is None:
            raise KeyError(f"no flow instance {instance_id}")
        wf, gone = self._pinned(inst)
        run = self._flow_run(conn, inst, wf, _caller_from(inst), inst["lang"])
        if inst["status"] != "waiting_approval" or not inst["pending"].get("approval"):
            turn = run.to_turn()
            turn.outcome = "already_resolved"
            return turn
        if gone or inst["pending"]["approval"].get("step") not in wf.steps:
            return self._gone(conn, run, gone or "the approval step no longer exists")
        pending = inst["pending"].pop("approval")
        decision = {"approved": bool(approved), "approver": approver, "reason": reason or "", "tier": pending["tier"]}
        inst["pending"]["approval_result"] = decision
        inst["history"].append({"event": "approval", "step": pending["step"], **decision, "at": time.time()})
        step = wf.steps[pending["step"]]
        inst["status"] = "running"
        if approved:
            inst["pending"]["approved_call"] = {"step": pending.get("call_step"),
                                                "arguments": pending["proposed_call"]["arguments"]}
            run.say(run.text(step.get("approved")) or t("approved", run.lang))
            inst["step"] = run.after(step)
        else:
            run.say(run.text(step.get("rejected")) or t("rejected", run.lang))
            target = step.get("on_reject")
            if isinstance(target, dict):
                run.jump(target)
            else:
                self._observe(inst["workflow"], "cancelled")
                inst["status"], inst["outcome"], inst["step"] = "cancelled", "rejected", None
                store.save(conn, inst)
                return run.to_turn()
        return self._run(run, text=None, entities={})

    def pending(self, conn: Any, conversation_id: str) -> dict[str, Any] | None:
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
                "editable": sorted(action_slots(step)), "lang": inst["lang"]}

    def complete_pending(self, conn: Any, instance_id: str, arguments: dict[str, Any], *, actor: str) -> FlowTurn:
        """A person confirms the action the flow waits on, for the customer, with the values they corrected:
        the slots take the new values (each checked by its slot's rule), then the flow goes on exactly as after
        the customer's yes, its tool calls audited under ``actor`` (the agent) and keyed as the flow's own, so
        a repeat runs nothing twice. ``outcome`` is "already_resolved" when nothing waits any more. Raises
        ValueError for an argument that is unknown, computed by the flow, or invalid."""
        inst = store.get(conn, instance_id, lock=True)
        if inst is None:
            raise KeyError(f"no flow instance {instance_id}")
        wf, gone = self._pinned(inst)
        c = _caller_from(inst)
        caller = Caller(channel=c.channel, customer_id=c.customer_id, conversation_id=c.conversation_id,
                        turn_id=actor)
        run = self._flow_run(conn, inst, wf, caller, inst["lang"])
        step = wf.steps.get(inst["step"]) if inst["step"] and not gone else None
        action = inst["pending"].get("action")
        if inst["status"] != "waiting" or not action or step is None or step.kind != "confirm":
            turn = run.to_turn()
            turn.outcome = "already_resolved"
            return turn
        slots_of = action_slots(step)
        proposed = action.get("arguments") or {}
        changed: dict[str, Any] = {}
        for arg, value in (arguments or {}).items():
            if arg not in proposed:
                raise ValueError(f"{action.get('tool')} has no argument {arg!r}")
            if value == proposed[arg]:
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
        inst["step"] = run.after(step)
        return self._run(run, text=None, entities={})

    def cancel(self, conn: Any, instance_id: str, lang: str | None = None, reason: str = "customer") -> FlowTurn:
        inst = store.get(conn, instance_id, lock=True)
        if inst is None:
            raise KeyError(f"no flow instance {instance_id}")
        wf, _ = self._pinned(inst)
        run = self._flow_run(conn, inst, wf, None, lang or inst["lang"])
        if inst["status"] not in store.ACTIVE:
            return run.to_turn()
        return self._cancel(run, reason)

    # ------------------------------------------------------------------ the run loop

    def _run(self, run: FlowRun, *, text: str | None, entities: dict[str, Any]) -> FlowTurn:
        inst, wf = run.inst, run.wf
        inst["status"] = "running"
        budget = MAX_STEPS_PER_TURN
        given = text
        try:
            while True:
                sid = inst["step"]
                if sid is None:
                    run.finish("completed", "completed")
                    break
                budget -= 1
                if budget <= 0:
                    run.escalate("L2", "the workflow looped without waiting", say=t("loop", run.lang))
                    break
                step = wf.steps[sid]
                started = self._clock()
                if "when" in step.raw and given is None and not evaluate_bool(step.raw["when"], run.scope()):
                    run.trace.append(StepTrace(step.id, step.kind, _ms(started, self._clock()), note="skipped"))
                    inst["step"] = run.after(step, transitions=False)
                    continue
                beside: dict[str, Any] = {}
                read = given
                if given is not None:
                    beside, read = A.beside(run, step, given)
                outcome = REGISTRY[step.kind].run(StepContext(run, step, read, entities))
                if beside and outcome not in ("wait", "stop"):
                    # the answer was taken: what it also said for later steps is kept ("the boots, 5 dollars")
                    fresh = {n: v for n, v in beside.items() if n not in inst["slots"]}
                    inst["slots"].update(fresh)
                    if fresh:
                        inst["history"].append({"step": step.id, "event": "beside", "slots": sorted(fresh),
                                                "at": time.time()})
                given = None   # the customer's message answers only the step that was waiting
                entities = {}
                run.trace.append(StepTrace(step.id, step.kind, _ms(started, self._clock()), tool_status=run.tool_status))
                run.tool_status = None
                if outcome == "wait":
                    inst["status"] = "waiting"
                    break
                if outcome == "stop":
                    break
                inst["history"].append({"step": step.id, "kind": step.kind, "at": time.time()})
                inst["step"] = outcome if outcome != "next" else run.after(step)
        except ExpressionError as exc:
            run.escalate("L2", f"expression failed: {exc}", say=t("broken", run.lang))
        store.save(run.conn, inst, forget=run.forgotten)   # a write's stale memory rows, in the same statement
        run.forgotten.clear()
        return run.to_turn()

    def _observe(self, workflow: str, event: str) -> None:
        if self.observer is not None:
            try:
                self.observer(workflow, event)
            except Exception:  # noqa: BLE001 - counting must never break a customer's turn
                pass

    def _cancel(self, run: FlowRun, reason: str) -> FlowTurn:
        run.say(t("cancelled" if reason == "customer" else "cancelled_by_staff", run.lang))
        run.finish("cancelled", "cancelled")
        run.inst["history"][-1]["reason"] = reason
        store.save(run.conn, run.inst)
        return run.to_turn()

    def _withdraw(self, run: FlowRun, reason: str) -> FlowTurn:
        """Cancel a flow that waits for an approval and close its approval ticket, in this transaction.

        The flow row is saved cancelled first: the ticket's own cancel hook (which may try to cancel
        the flow again) then finds nothing active. An approver acting later finds the ticket closed
        (409) and ``resolve_approval`` finds no pending approval: the proposed call never runs.
        """
        inst = run.inst
        pending = inst["pending"].pop("approval", None) or {}
        ticket = pending.get("ticket") or inst.get("approval_ticket")
        run.say(t("withdrawn", run.lang))
        run.finish("cancelled", "cancelled")
        inst["history"][-1]["reason"] = reason
        inst["history"].append({"event": "approval_withdrawn", "ticket": ticket, "step": pending.get("step"),
                                "at": time.time()})
        store.save(run.conn, inst)
        withdraw = getattr(self.approvals, "withdraw_approval", None)
        if ticket and withdraw is not None:
            withdraw(run.conn, str(ticket), reason)
        return run.to_turn()


def _task_words(wf: Workflow, lang: str, inst: Instance | None = None) -> str:
    """The task in the customer's words ("退款", "issue an invoice"), with the order it is about when ``inst``
    has one ("issue an invoice, order 100240")."""
    task = wf.description.get(lang) or wf.description.get("en") or wf.name
    order = next((inst["slots"][n] for n, s in wf.slots.items()
                  if s.validate.get("entity") == "order_id" and inst["slots"].get(n)), None) if inst else None
    return task if order is None else t("task_of_order", lang, task=task, order=order)


# a number beside an order that is no order: a Chinese mobile, a postcode said as one
_NOT_AN_ORDER = re.compile(r"^1[3-9]\d{9}$")
_POSTCODE = re.compile(r"(?:邮编|邮政编码|\bzip(?:\s*code)?|\bpost(?:al)?\s*code)\D{0,6}(\d{5,6})", re.I)
MAX_ORDERS_PER_TASK = 4


def _other_orders(wf: Workflow, text: str, slots: dict[str, Any]) -> list[dict[str, Any]]:
    """One task asked for several orders ("refund order 100241 and the lamp one 100240", "取消订单100235和100236"): the
    first order named fills the task's order slot (``slots``, in place) and the others are returned, each as the
    slot it fills, to be kept as the same task. Only numbers the slot accepts and that are no postcode or phone
    number count, and not in a correction ("100241, sorry, I meant 100240": the last one is meant)."""
    names = [n for n, s in wf.slots.items() if s.validate.get("entity") == "order_id"]
    if len(names) != 1 or not text or U.is_correction(text):
        return []
    name, slot = names[0], wf.slots[names[0]]
    postcodes = set(_POSTCODE.findall(text))
    said = [v for v in dict.fromkeys(U.order_ids(text))
            if slot.check(v) and v not in postcodes and not _NOT_AN_ORDER.match(v)]
    if not 1 < len(said) <= MAX_ORDERS_PER_TASK:
        return []
    slots[name] = said[0]
    return [{name: v} for v in said[1:]]


def _unseen(workflow: str, event: str) -> None:
    """The observer of a look ahead's walk: what it runs is not counted (the turn counts its own)."""


def _first_reads(run: FlowRun, entities: dict[str, Any], touched: list[str] | None = None) -> bool:
    """Walk a drafted flow from its first step as :meth:`FlowEngine._run` would, through pure steps and read
    calls, until a read call not at hand is asked (True) or a step waits, writes, ends or is of another kind.
    ``touched`` gets the ids of the steps walked whose expressions read the session memory."""
    inst, wf, tools = run.inst, run.wf, run.services.tools
    for _ in range(MAX_STEPS_PER_TURN):
        sid = inst["step"]
        if sid is None:
            return False
        step = wf.steps[sid]
        kind = REGISTRY[step.kind]
        if touched is not None and step.reads_memory:
            touched.append(step.id)
        try:
            if "when" in step.raw and not evaluate_bool(step.raw["when"], run.scope()):
                inst["step"] = run.after(step, transitions=False)
                continue
            if not kind.pure and not (step.kind == "call" and
                                      RISK_ORDER.get(getattr(tools.spec(step.arg), "risk", "read"), 2) == 0):
                return False
            outcome = kind.run(StepContext(run, step, None, entities))
        except CallPending:
            return True
        except (ExpressionError, LookupError):
            return False
        entities = {}
        if outcome in ("wait", "stop"):
            return False
        inst["step"] = outcome if outcome != "next" else run.after(step)
    return False


def _ms(a: float, b: float) -> float:
    return round((b - a) * 1000.0, 3)


def _instance_id(conn: Any, conversation_id: str, workflow: str, turn_id: str | None, *,
                 flows_so_far: int | None = None) -> uuid.UUID | None:
    """A flow started by a turn gets an id derived from that turn (and the conversation's flows so far), so
    the turn repeated (its next pass, a repeat after a crash or a lost connection) starts the same instance
    and a write in it sends the same idempotency key: the shop does not repeat it. ``flows_so_far``: their
    number as the caller read it in this transaction (not counted again)."""
    if not turn_id:
        return None
    n = flows_so_far or 0
    if flows_so_far is None:
        row = conn.execute("SELECT count(*) FROM flow_instances WHERE conversation_id = %s",
                           (conversation_id,)).fetchone()
        n = row["count"] if isinstance(row, dict) else row[0]
    return uuid.uuid5(uuid.NAMESPACE_URL, f"switchboard:flow:{turn_id}:{conversation_id}:{workflow}:{n}")


def _caller_dict(c: Caller) -> dict[str, Any]:
    # its fields are plain strings: read as they are (``asdict`` deep-copies, a cost paid several times a turn)
    return {f.name: v for f in fields(c) if (v := getattr(c, f.name)) is not None}


def _caller_from(inst: Instance) -> Caller:
    c = inst["caller"]
    return Caller(channel=c.get("channel", ""), customer_id=c.get("customer_id", ""),
                  conversation_id=c.get("conversation_id") or inst["conversation_id"])


def _digest(wf: Workflow) -> str:
    """A definition's content (steps, slots, tiers), to tell a changed workflow from a reloaded same one."""
    body = {"steps": {k: v.raw for k, v in wf.steps.items()}, "first": wf.first, "tiers": wf.approval_tiers,
            "slots": {k: getattr(v, "validate", None) for k, v in wf.slots.items()}, "intents": wf.intents}
    return json.dumps(body, sort_keys=True, default=str)
