"""The turn and the workflow engine: one entry for a turn (``FlowsPort.on_message``), and what the router asks
around it.

- A waiting flow reads the message first (``read_in_flow``): an answer to its own question, a correction or a
  change of mind is the flow's, whatever the classifier guessed; a digression (a confident other topic) is served
  as its own request, then the flow asks again; another task interrupts it and it resumes when that task ends.
- "sorry, I meant 100241" right after "I couldn't find order 100999" restarts the same task (``correcting``).
- An open offer ("Shall I start it?") that a message does not answer lapses (``settle_offer``).
- A flow's handoff opens the L2/L3 ticket with the flow's state as evidence (``flow_outcome``).
- Nothing kept is lost: a task kept for after another starts when the turn ends with nothing running
  (``start_kept``), questions kept beside a task are served when it ends (``questions_after``), and whatever is
  kept goes to the person who takes the conversation (``Tickets.hand_over``).
"""

from __future__ import annotations

from typing import Any

from automation.workflows.listening import OWN
from automation.workflows.runtime import FlowTurn
from automation.workflows.store import ACTIVE
from router.classify.base import Classification
from router.classify.intents import Intent
from router.turn import plan
from router.turn.pipeline import TurnResult
from router.turn import state as sm
from router.turn.plan import Route
from router.turn.ports import FlowsPort
from router.turn.tiers.answers import Answers, FlowPart
from text.form import read_form


def task_workflow(engine: FlowsPort | None, intent: Intent | None, c: Classification,
                  served: tuple[str, str] | None) -> str | None:
    """The workflow a message of intent ``c`` starts when no flow is active (see Workflows.task_workflow)."""
    if engine is None or c.intent is None:
        return None
    if served is not None and served[0] == "workflow" and served[1] in engine.workflows.workflows:
        return served[1]
    if intent is not None and intent.task and intent.task in engine.workflows.workflows:
        return intent.task
    wf = engine.workflows.for_intent(c.intent)
    return wf.name if wf is not None else None


def flow_language(lang: str, text: str) -> str:
    """The language a flow started by ``text`` speaks (its texts are English and Chinese)."""
    from rag.chunk import detect_lang

    return lang if lang in ("zh", "en") else (detect_lang(text) or "en")


class Workflows(Answers):
    """The turn's workflow side."""

    def read_in_flow(self, c: Classification) -> str | None:
        """What the conversation's waiting flow reads this message as (automation.workflows READINGS), or None
        when no flow is active. Nothing changes here; ``run_flow`` then acts on it."""
        engine = self.r.flows
        if engine is None:
            return None
        with self.stage("workflow"):
            heard = self.heard(c)   # what follows a drop, classified alone
            self.listening = engine.listen(self.active_flow(), self.text, c.entities or {},
                                           intent=heard.intent, intent_confidence=float(heard.confidence))
            if self.listening is None and plan.ENDED_TEMPLATE in self.r.policy.replies.names():
                # nothing waits, but the message may belong to the task that just ended refused
                self.ended = engine.ended(self.conn, str(self.conv["id"]), self.text, c.entities or {},
                                          intent=c.intent, intent_confidence=float(c.confidence), flows=self.flows())
        if self.listening is None:
            if self.ended is not None:
                self.trace["reading"] = plan.ENDED
                return plan.ENDED
            return None
        self.trace["reading"] = self.listening.reading
        return self.listening.reading

    def flow_part(self, placed: list[tuple[str, Classification]]) -> FlowPart:
        """The one part of several the waiting flow takes: the only part it reads as its own (an answer, a
        correction, a change of mind), or else the only part that asks for the flow's own task again ("我要退款"
        while the refund waits: the flow then asks its question again, no failed try; ``restated``). ``others``:
        no part is the flow's (each is another request or a question); no part: more than one is, or it cannot
        tell."""
        engine, active = self.r.flows, self.active_flow()
        if engine is None or active is None or active["status"] != "waiting":
            return FlowPart()
        own, again, other = [], [], 0
        with self.stage("workflow"):
            for i, (part, x) in enumerate(placed):
                reading = engine.read(active, part, x.entities or {}, intent=x.intent,
                                      intent_confidence=float(x.confidence))
                if reading in OWN:
                    own.append(i)
                elif reading == "unclear" and x.intent is not None and read_form(part) != "question":
                    wf = engine.workflows.for_intent(x.intent)
                    if wf is not None and wf.name == active["workflow"]:
                        again.append(i)
                elif reading == "digression" or (x.intent is not None and read_form(part) == "question"):
                    other += 1
        if len(own) == 1:
            return FlowPart(own[0])
        if not own and len(again) == 1:
            return FlowPart(again[0], restated=True)
        return FlowPart(others=not own and not again and other == len(placed))

    def correcting(self, c: Classification) -> str | None:
        """The finished workflow this message starts again (a corrected value, the same question about another
        value or another option it offered: see FlowEngine.correcting), or None. What the message settled for
        it is kept for ``run_flow``."""
        engine = self.r.flows
        if engine is None or (c.intent is not None and c.decided_by == "rules"
                              and engine.workflows.for_intent(c.intent) is None):
            return None
        self.restarting = engine.correcting(self.conn, str(self.conv["id"]), self.text, c.entities or {},
                                            intent=c.intent, flows=self.flows())
        if self.restarting is None:
            return None
        self.trace["reading"] = "follow_up" if self.restarting.slots or self.restarting.among else "correction"
        return self.restarting.workflow

    def _workflow_of(self, c: Classification) -> Any:
        engine = self.r.flows
        name = self.task_workflow(c, self.served_by(c)) if engine is not None else None
        return engine.workflows.workflows.get(name) if engine is not None and name else None

    def asks_for_task(self, text: str, c: Classification) -> bool:
        """A request of an intent that has a task ("an invoice for 100240", "给订单100230开个发票"), not asked as a
        question ("how do I get an invoice?" is answered): the task, as the same words alone would start it."""
        return read_form(text) != "question" and self._workflow_of(c) is not None

    def main_request(self, placed: list[tuple[str, Classification]], requests: list[int]) -> int:
        """The first task that changes something (it may wait for a confirmation); the lookups are done beside it."""
        for i in requests:
            wf = self._workflow_of(placed[i][1])
            if wf is not None and wf.risk != "read":
                return i
        return requests[0]

    def can_serve_beside(self, others: list[Classification], main: Classification) -> bool:
        """Every other request is a task of the engine's: lookups (workflows that only read: "cancel order 100242
        and where is order 100241?"), and at most one other task that changes something ("refund 100241 and an
        invoice for 100240"), which waits for the main one to end (two would each wait for the other's questions)."""
        wfs = [self._workflow_of(c) for c in others]
        return all(wf is not None for wf in wfs) and sum(wf.risk != "read" for wf in wfs if wf is not None) <= 1

    def serve_beside(self, text: str, c: Classification, main: Classification) -> dict[str, Any] | None:
        """A lookup asked beside the main task, run on its own words now: its answer goes first; one that needs
        the customer's choice waits until the main task ends, then asks (suspended, as a digression's task).
        Another task that changes something is queued on its own words: nothing of it runs before the main task
        ends (confirmed, declined or cancelled), then it starts; the reply says it comes next."""
        engine = self.r.flows
        wf = self._workflow_of(c)
        if engine is None or wf is None:
            return None
        if wf.risk != "read":
            from router.turn.flows import caller_of

            caller = caller_of(self.conv, turn_id=self.ctx.turn_id)
            if caller is None:
                return None
            with self.stage("workflow"):
                queued = engine.queue(self.conn, wf.name, caller, text, c.entities or {},
                                      lang=flow_language(self.lang, text), intent=c.intent)
            self.flow_moved()
            self.trace["queued"] = {"workflow": wf.name, "instance_id": queued.instance_id}
            return self.send(queued.reply, kind="reply") if queued.reply else None
        whole, self.text = self.text, text
        try:
            flow = self.run_flow(c, workflow=wf.name)
        finally:
            self.text = whole
        if flow is None:
            return None
        if flow.status == "waiting" and flow.instance_id is not None:
            waiting = engine.active(self.conn, str(self.conv["id"]))
            main_wf = self._workflow_of(main)
            if waiting is not None:
                engine.suspend(self.conn, waiting, because=main_wf.name if main_wf is not None else "task")
                self.flow_moved()
            self.flow = None
            return None
        self.flow = None
        return self.send(flow.reply, kind="reply", suggestions=flow.quick_replies) if flow.reply else None

    def settle_offer(self, c: Classification) -> None:
        """An open offer ("Shall I start it?") that this message does not answer with a yes or a no lapses now,
        so the message is routed as a new one (a question, another task), never read as the offer's answer."""
        engine = self.r.flows
        if engine is None:
            return
        active = self.active_flow()
        if active is None or not engine.offered(active):
            return
        reading = engine.read(active, self.text, c.entities or {}, intent=c.intent,
                              intent_confidence=float(c.confidence))
        if reading not in ("answer", "cancel"):
            engine.lapse(self.conn, active)
            self.flow_moved()
            self.trace["offer"] = {"workflow": active["workflow"], "lapsed": True}

    def task_workflow(self, c: Classification, served: tuple[str, str] | None) -> str | None:
        """The workflow this message starts when no flow is active: the one serving the intent, or the one
        ``serve: workflow`` / ``with_order`` names; None when the engine has neither."""
        return task_workflow(self.r.flows, self.intent_config(c), c, served)

    def run_flow(self, c: Classification, workflow: str | None = None) -> FlowTurn | None:
        """Advance the conversation's active workflow, or start ``workflow`` or the one serving the intent;
        None: no flow."""
        from router.turn.flows import caller_of

        engine = self.r.flows
        caller = caller_of(self.conv, turn_id=self.ctx.turn_id)
        if engine is None or caller is None:
            return None
        lang = flow_language(self.lang, self.text)
        with self.stage("workflow"):
            # the flow that listened moves on with its reading; else `workflow` (or the intent's) starts
            restart = self.restarting if self.restarting is not None and self.restarting.workflow == workflow else None
            t = engine.on_message(self.conn, caller, self.text, c.entities or {}, lang=lang, listening=self.listening,
                                  workflow=workflow, intent=c.intent, intent_confidence=float(c.confidence),
                                  restart=restart, flows=self.flows() if self.listening is None else None)
            self.listening = self.restarting = None
            self.flow_moved()
        if t is None:
            return None
        self.flow = t.as_response()
        self.trace["workflow"] = {**self.flow, "outcome": t.outcome, "drift": t.drift, "failure": t.failure,
                                  "steps": [{"step": s.step, "kind": s.kind, "ms": round(s.ms, 2),
                                             "tool_status": s.tool_status, "note": s.note} for s in t.trace]}
        return t

    def flow_outcome(self, c: Classification, t: FlowTurn) -> TurnResult:
        """The workflow answered this turn: its reply goes out; a handoff opens the L2/L3 ticket (with what was
        kept for after the task). A task that ended with questions kept beside it (``FlowTurn.asked``) gives them
        their turn now, each routed as its own request, before a kept task starts."""
        if t.handoff is not None:
            self.kept_questions = list(t.asked)
            tier = "L3" if t.handoff.tier == "L3" else "L2"
            decision = self.decision_of(c, tier, None, workflow=self.flow)
            kind = "handoff" if tier == "L3" else "assist"
            if tier == "L3":
                self.move("l3_queuing", f"workflow {t.workflow}: {t.handoff.reason}")
            else:
                self.move("l2_assisting", f"workflow {t.workflow}: {t.handoff.reason}")
            ticket_id = self.open_ticket(kind, decision, reason=f"workflow {t.workflow}: {t.handoff.reason}",
                                         priority="normal", classification=c,
                                         evidence=[{"workflow": t.handoff.flow_state}],
                                         draft=None if tier == "L3" else {"text": None, "intent": c.intent,
                                                                          "workflow": t.handoff.flow_state})
            self.tag_transition(ticket_id)
            # the ticket's acknowledgement tells the customer a person takes over: the engine's own line saying
            # the same goes ("I'm passing this to a colleague" beside "Let me check this with a colleague")
            told = t.reply or ""
            if t.handoff.default_line:
                told = "\n".join(line for line in told.split("\n") if line.strip() != t.handoff.default_line.strip())
            text = "\n\n".join(x for x in (told.strip(), self.say("ack_l3" if tier == "L3" else "ack_l2")) if x)
            return self.result(decision, reply=self.send(text, kind="ack"), ticket_id=ticket_id)
        # the bot answered this turn (a flow that waits for the customer keeps its place in flow_instances)
        self.move("l1_resolving", f"workflow {t.workflow}", counted=False)   # served: not a loop-guard round
        if t.asked:
            said = self.send(t.reply, kind="reply") if t.reply else None
            self.move("l1_resolved", f"workflow {t.workflow} {t.outcome or t.status}", counted=False)
            done = self.result(self.decision_of(c, "L1", None, workflow=self.flow), reply=said)
            return self.questions_after(t, done)
        resumed = self.resume_interrupted(t)
        text = "\n\n".join(x for x in (t.reply, resumed.reply if resumed is not None else None) if x)
        quick = resumed.quick_replies if resumed is not None else t.quick_replies
        reply = self.send(text, kind="reply", suggestions=quick) if text else None
        self.move("l1_resolved", f"workflow {t.workflow} {t.outcome or t.status}", counted=False)
        decision = self.decision_of(c, "L1", None, workflow=self.flow)
        return self.result(decision, reply=reply)

    def questions_after(self, t: FlowTurn, done: TurnResult) -> TurnResult:
        """The questions kept beside a task that just ended, each routed as its own message would be (answered, or
        a colleague asked: an L2 ticket, which takes what else was kept); then a task kept for after this one."""
        results = [done]
        for n, question in enumerate(t.asked):
            self.kept_questions = list(t.asked[n + 1:])   # should a ticket open, the rest go with it
            results.append(self.route_question(question))
            if results[-1].ticket_id is not None:
                break
        self.kept_questions = []
        last = results[-1]
        if last.ticket_id is None:
            resumed = self.resume_interrupted(t)
            if resumed is not None and resumed.reply:
                results.append(self.result(last.decision, reply=self.send(resumed.reply, kind="reply",
                                                                          suggestions=resumed.quick_replies)))
        said = [r.reply for r in results if r.reply and r.reply.get("text")]
        if said:
            last.reply = {**said[-1], "text": "\n\n".join(r["text"] for r in said),
                          "citations": [x for r in said for x in r.get("citations") or []]}
        last.flow = self.flow
        return last

    def route_question(self, text: str) -> TurnResult:
        """Route ``text`` as its own message in this turn (the decider's routing order)."""
        raise NotImplementedError

    def start_kept(self, result: TurnResult) -> TurnResult:
        """The turn ends with nothing running and nobody holding the conversation, and a task is still kept for
        after the one asked with it (that one was answered from the knowledge base, or never started): it starts
        now, its question after the turn's reply."""
        engine = self.r.flows
        if (engine is None or result.ticket_id is not None or self.conv["state"] in sm.HUMAN_HOLDS
                or self.conv["state"] == "l2_assisting" or (self.flow or {}).get("status") in ACTIVE):
            return result
        from router.turn.flows import caller_of

        with self.stage("workflow"):
            started = engine.resume(self.conn, str(self.conv["id"]), self.flow_lang,
                                    caller=caller_of(self.conv, turn_id=self.ctx.turn_id), kept_only=True)
        if started is None:
            return result
        self.flow_moved()
        self.flow = started.as_response()
        self.trace.setdefault("workflow", {})["kept_started"] = {"workflow": started.workflow,
                                                                 "instance_id": started.instance_id}
        sent = self.send(started.reply, kind="reply", suggestions=started.quick_replies) if started.reply else None
        if sent is not None:
            result.reply = sent if result.reply is None else {
                **sent, "text": f"{result.reply['text']}\n\n{sent['text']}",
                "citations": list(result.reply.get("citations") or [])}
        result.flow = self.flow
        return result

    def resume_interrupted(self, t: FlowTurn) -> FlowTurn | None:
        """A flow that ended this turn gives the floor back to the task it interrupted (its question again)."""
        engine = self.r.flows
        if engine is None or t.status in ("waiting", "waiting_approval"):
            return None
        from router.turn.flows import caller_of

        resumed = engine.resume(self.conn, str(self.conv["id"]), self.flow_lang,
                                caller=caller_of(self.conv, turn_id=self.ctx.turn_id))
        self.flow_moved()
        if resumed is not None:
            self.flow = resumed.as_response()
            self.trace.setdefault("workflow", {})["resumed"] = {"workflow": resumed.workflow,
                                                                "instance_id": resumed.instance_id}
        return resumed

    def with_question_again(self, result: TurnResult, flow: FlowTurn | None) -> TurnResult:
        """The customer asked something else mid-flow: that is answered, then the flow asks its question again."""
        if flow is not None and result.ticket_id is None and result.reply is not None:
            self.send(flow.reply, kind="reply", suggestions=flow.quick_replies)
            result.reply = {**result.reply, "text": f"{result.reply['text']}\n\n{flow.reply}"}
        return result

    def digression(self, c: Classification, route: Route, checks: dict[str, Any]) -> TurnResult:
        """Another topic while a flow waits: served as its own request, then the flow asks its question again.
        Another task of the customer's (a workflow) interrupts the waiting flow, which resumes when it ends."""
        engine = self.r.flows
        task = self.task_workflow(c, route.served) if not (route.smalltalk or route.asking) else None
        if task is not None and engine is not None:
            waiting = engine.active(self.conn, str(self.conv["id"]))
            if waiting is not None and waiting["workflow"] != task:
                engine.suspend(self.conn, waiting, because=task)
                self.flow_moved()
                self.move("classifying", "message")
                flow = self.run_flow(c, workflow=task)
                if flow is not None:
                    return self.flow_outcome(c, flow)
        flow = self.run_flow(c)
        if route.template is not None:
            result = self.small_talk(c, route.template, checks)
        else:
            self.move("classifying", "message")
            result = self.route_tier(c, route.tier)
        return self.with_question_again(result, flow)
