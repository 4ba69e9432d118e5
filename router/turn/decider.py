"""The router's decider: harness -> classifier -> escalation -> state -> the tier's action.

The routing order is a plain plan (router.turn.plan) over facts this module gathers; the tier actions live in
router.turn.tiers and reach their collaborators through typed ports (router.turn.ports).

Plugged into :class:`router.turn.pipeline.Pipeline`, it runs inside the turn's transaction, so the
state change, its history, the ticket, the outbox row and the turn all commit together.

- L1: the knowledge base answers with citations (reply + outbox); no confident answer -> L2.
- L2: an assist ticket with a draft built from the best evidence; a human approves it.
- L3 (by intent or by an escalation rule): a handoff ticket with reason and priority.
- For L2/L3 the bot sends one acknowledgement when the ticket opens, and nothing else while a
  human holds the conversation: later messages are added to the ticket.
- A message after ``closed`` starts a new session; a short thank-you after an answer closes it.
- Small talk (intents with ``serve: reply <template>``) is answered from the policy's reply
  templates: no knowledge base, no ticket, the conversation's state and counters untouched.
- Questions about the customer's own data (``serve: workflow <name>``) never get a knowledge-base
  passage: until a workflow is wired the bot asks for the missing order number, or a person
  takes it (an L2 assist ticket without a draft).
- Out of scope (no intent) with ``unknown: clarify_then_escalate``: the first of a run gets a
  clarifying reply with suggestions; the next one reaches a person through the low-confidence
  rule (or the unknown tier).
- A question is answered, a request is done (text.form reads which from the sentence): a message that reads
  as a question, of an intent that declares knowledge-base ``topics``, is answered at L1 whatever the intent's
  tier or workflow; when an intent's ``task`` covers the cited article the answer offers it, and a "yes" to
  the offer (read by the waiting flow, like any answer to the bot's own question) starts it.
- Every reply is in the customer's language (router.turn.language); the turn says which (``lang``).
"""

from __future__ import annotations

import logging
from collections.abc import Container
from typing import Any

from automation.workflows.runtime import FlowTurn
from automation.workflows.understand import after_change_of_mind
from router.classify.base import Classification
from router.problems import Problem
from router.schemas import Decision, Escalation, InboundMessage
from router.telemetry.metrics import Metrics
from router.turn import plan
from router.turn.ahead import flow_ahead
from router.turn import state as sm
from router.turn.escalation import EscalationPolicy, Policy
from router.turn.guards import Harness, Verdict
from router.turn.passes import per_turn
from router.turn.pipeline import Connect, TurnContext, TurnResult
from router.turn.plan import Act
from router.turn.ports import ClassifierPort, EncoderPort, FlowsPort, HandoffPort, KnowledgePort
from router.turn.tiers.base import close_question, plan_facts, verdict_facts
from router.turn.tiers.workflows import Workflows
from text import LONG_MESSAGE_CHARS
from text.form import only_asks, read_form

log = logging.getLogger(__name__)

class Decider:
    """The :data:`router.turn.pipeline.Decider` of the gateway (one instance per process, thread-safe)."""

    # Every reply a turn returns was queued (transcript + outbox) in the turn's own transaction, so
    # the channel gateway need not look for it afterwards.
    queues_replies = True

    def __init__(self, *, policy: Policy, classifier: ClassifierPort, rag: KnowledgePort | None = None,
                 handoff: HandoffPort | None = None, encoder: EncoderPort | None = None,
                 metrics: Metrics | None = None, workflows: Container[str] | None = None,
                 flows: FlowsPort | None = None):
        self.policy = policy
        self.flows = flows          # automation.workflows FlowEngine, or None (no tools configured)
        if flows is not None:       # its tool calls and memory loads run outside the turn's transaction
            from router.turn.passes import tool_port

            def deadline() -> float:   # read at each call: a reload may bring another gateway
                turn_deadline = getattr(flows.tools, "turn_deadline", None)
                return float(turn_deadline()) if turn_deadline is not None else 5.0

            flows.outside = tool_port(deadline)
        self.harness = Harness(policy.harness)
        self.escalation = EscalationPolicy(policy.escalation, policy.feedback, encoder)
        self.encoder = encoder
        self.classifier = classifier
        self.rag = rag
        self.handoff = handoff
        self.metrics = metrics
        # ``serve: workflow <name>`` intents without an engine fall back here (the names wired); None: not wired
        self.workflows = workflows
        missing = sorted({i.served_by[1] for i in classifier.config.intents
                          if i.served_by and i.served_by[0] == "reply"} - policy.replies.names())
        if missing:
            raise ValueError("intents are served by reply templates the policy lacks: "
                             + ", ".join(f"replies.{m}" for m in missing))

    def __call__(self, ctx: TurnContext) -> TurnResult:
        turn = _Turn(self, ctx)
        result = turn.run()
        turn.flush_moves()
        return result

    #: from this length on a message's encoding costs enough to be done before the turn takes its connection
    PREPARE_FROM_CHARS = LONG_MESSAGE_CHARS

    def prepare(self, msg: InboundMessage) -> None:
        """Encode a long message before its turn takes a pooled connection and the conversation's lock.

        The classifier and retrieval encode the message inside the turn; the serving encoder caches each
        query's vector, so doing it here first moves the costly part (tens of ms for a long message, more on
        a busy machine) out of the time a connection is held. Short messages encode in a few ms: not worth it.
        Best effort: on any failure the turn simply encodes as before.
        """
        text = msg.text or ""
        if len(text) < self.PREPARE_FROM_CHARS:
            return
        try:
            from text import personal

            personal.find(text)          # remembered per text: the turn's masking and context package reuse it
            if self.encoder is not None:
                self.encoder.encode_queries([text])
            warm = getattr(self.rag, "warm_query", None)
            if warm is not None:
                warm(text)
        except Exception:  # noqa: BLE001 - an optimisation only; the turn encodes what it needs itself
            log.debug("preparing a message failed", exc_info=True)


    def ahead(self, msg: InboundMessage, connect: Connect) -> bool:
        """Before the turn's first pass: the shop reads a flow this message starts will make first (its session
        memory, the order it names), asked now (router.turn.ahead), so no pass is rolled back only to discover
        them. True: look again once they return (the flow's first reads wait for its memory)."""
        return flow_ahead(self, msg, connect)


class _Turn(Workflows):
    """One message's trip through the router: the order of things; the tier actions are inherited."""

    def run(self) -> TurnResult:
        with self.stage("harness"):
            verdict = self.r.harness.screen(self.conn, channel=self.conv["channel"],
                                            customer_id=self.conv["customer_id"], text=self.text,
                                            message_id=self.message_id, lang=self.lang)
        self.flags = verdict.flags
        self.trace["harness"] = {"action": verdict.action, "rule": verdict.rule, **verdict.detail}
        if verdict.action == "throttle":   # refused: nothing about the conversation changes
            return self.harness_outcome(verdict)
        if self.conv["state"] == "closed":
            self.flush_moves()
            t = sm.start_new_session(self.conn, self.conv, message_id=self.message_id)
            self.transitions.append({"from": t["from"], "to": t["to"], "reason": "new_session"})
        if not verdict.passed:
            return self.harness_outcome(verdict)

        state = self.conv["state"]
        if state in sm.HUMAN_HOLDS or state == "l2_assisting":
            ticket = self.active_ticket()
            if ticket is not None:
                return self.while_held(ticket)
            # the ticket is gone without the port telling us (e.g. deleted): the bot takes over again
            self.move("idle", "no_active_ticket")
            self.flush_moves()
            sm.reset_counters(self.conn, self.conv)

        if self.conv["state"] in sm.RESOLVED and self.r.escalation.is_positive_feedback(self.text):
            engine = self.r.flows
            active = engine.active(self.conn, str(self.conv["id"])) if engine is not None else None
            offered = engine is not None and active is not None and engine.offered(active)
            reading = engine.read(active, self.text) if engine is not None and active is not None and offered \
                else None
            then = plan.after_thanks(flow_active=active is not None, offered=offered, offer_reading=reading)
            if then is plan.Thanks.LAPSE_AND_CLOSE and engine is not None and active is not None:
                engine.lapse(self.conn, active)
                self.flow_moved()
            if then is not plan.Thanks.ROUTE:
                return self.close_with_feedback()
        return self.route()

    def harness_outcome(self, v: Verdict) -> TurnResult:
        if v.action == "throttle":
            problem = Problem(429, f"Too many messages: at most {v.detail['max_messages']} per "
                                   f"{v.detail['window_seconds']} s. Nothing was stored; retry it after "
                                   f"{v.retry_after} s.", title="Too Many Requests",
                              headers={"Retry-After": str(v.retry_after)}, retry_after=v.retry_after)
            return TurnResult(decision=Decision(channel="harness", explanation={"rule": "quota", **v.detail}),
                              state=self.conv["state"], reject=problem)
        explanation = {"rule": v.rule, **v.detail}
        held = self.active_ticket() if self.conv["state"] in sm.HUMAN_HOLDS | {"l2_assisting"} else None
        if v.action in ("stop", "start", "do_not_contact"):
            if held is not None:
                self.to_ticket(held)
            reply = self.send(v.reply, kind="status") if v.reply else None
            return self.result(Decision(channel="harness", explanation=explanation), reply=reply,
                               ticket_id=held["id"] if held else None)
        if v.action == "crisis":
            esc = Escalation(rule="crisis", reason=f"crisis words ({v.detail['matched']})", priority="urgent")
            decision = Decision(tier="L3", channel="harness", explanation=explanation, escalation=esc)
            if held is not None and self.conv["state"] in sm.HUMAN_HOLDS:
                # a person holds it: the message goes to the ticket, whose priority rises to urgent; the
                # safe reply still goes out while the customer waits in the queue (nobody is talking yet)
                self.to_ticket(held)
                ticket_id = self.open_ticket("handoff", decision, reason=esc.reason, priority="urgent")
                waiting = self.send(v.reply) if self.conv["state"] == "l3_queuing" and v.reply else None
                return self.result(decision, reply=waiting, ticket_id=ticket_id)
            ticket_id = self.open_l3(decision, reason=esc.reason, priority="urgent", via_classifying=True)
            reply = self.send(v.reply, kind="reply") if v.reply else None
            return self.result(decision, reply=reply, ticket_id=ticket_id)
        # sensitive customer
        if held is not None and self.conv["state"] in sm.HUMAN_HOLDS:
            self.to_ticket(held)
            return self.result(Decision(tier="L3", channel="harness", explanation=explanation), ticket_id=held["id"])
        if v.reply:   # the standard script, no routing
            return self.result(Decision(channel="harness", explanation=explanation),
                               reply=self.send(v.reply, kind="reply"))
        esc = Escalation(rule="sensitive", reason="the customer is flagged sensitive", priority="high")
        decision = Decision(tier="L3", channel="harness", explanation=explanation, escalation=esc)
        ticket_id = self.open_l3(decision, reason=esc.reason, priority="high", via_classifying=True)
        reply = self.send(self.say("ack_l3"), kind="ack")
        return self.result(decision, reply=reply, ticket_id=ticket_id)

    def close_with_feedback(self) -> TurnResult:
        if self.conv["state"] != "feedback_pending":
            self.move("feedback_pending", "customer_confirmed")
        self.move("closed", "positive_feedback")
        self.flush_moves()
        sm.save_counters(self.conn, self.conv["id"], feedback="positive", last_question=None, repeat_count=0,
                         dissatisfied_streak=0, low_confidence_streak=0, state_entries={})
        reply = self.send(self.say("closing"), kind="reply")
        return self.result(Decision(channel="state", explanation={"feedback": "positive"}), reply=reply)

    def route(self) -> TurnResult:
        if self.conv["state"] == "feedback_pending" and self.r.escalation.is_dissatisfied(self.text):
            self.flush_moves()
            sm.save_counters(self.conn, self.conv["id"], feedback="negative")
        c = self.classify()
        self.settle_offer(c)
        planned, part = self.serve_other_requests()
        extras: list[dict[str, Any]] = []
        if planned is not None:   # "cancel 100235 and tell me your return policy": the questions answered, the task next
            extras, c = planned
            self.note_classification(c)
        result = self.start_kept(self.route_one(c, restated=part.restated))
        if extras:
            text = "\n\n".join([e["text"] for e in extras] + ([result.reply["text"]] if result.reply else []))
            citations = [x for e in extras for x in e.get("citations") or []]
            base = result.reply or {"suggestions": [], "lang": self.lang}
            result.reply = {**base, "text": text, "citations": citations + list(base.get("citations") or [])}
        return result

    def served_instead(self, c: Classification, dropped: FlowTurn) -> TurnResult | None:
        """"哦不用了，我还是想查一下物流", "never mind, how long do refunds take?": the task is dropped (its reply goes out)
        and what the customer asks instead is routed as its own message in the same turn; None when the change of
        mind says nothing more, or nothing the bot can place (the drop's reply then stands alone)."""
        rest = after_change_of_mind(self.text)
        if not rest or read_form(rest) is None:
            return None
        then = self.classify_after_drop(rest)   # as the waiting flow heard it (TurnBase.heard): once per turn
        engine = self.r.flows
        task = engine.workflows.for_intent(then.intent) if engine is not None and then.intent is not None else None
        if then.intent is None or (task is not None and task.name == dropped.workflow):
            return None    # "never mind, cancel it" names the dropped task itself: the drop is the answer
        first = self.flow_outcome(c, dropped)
        self.trace["instead"] = {"text": rest, "intent": then.intent, "dropped": dropped.workflow}
        self.text = rest
        self.note_classification(then)
        result = self.route_one(then)
        said = [r["text"] for r in (first.reply, result.reply) if r and r.get("text")]
        if result.reply is not None and len(said) == 2:
            result.reply = {**result.reply, "text": "\n\n".join(said)}
        elif result.reply is None:
            result.reply = first.reply
        return result

    def route_question(self, text: str) -> TurnResult:
        """A question kept beside a task that has just ended, served now as the question it is: "不用了，我还想问下退货运费"
        at the tax id is answered when the knowledge base (or its intent's topics) can, else a colleague is asked
        (an L2 assist ticket with the draft), as L1 does for a question; it never starts a task of its own."""
        with self.stage("classify"):
            c = self.r.classifier.classify(text)
        self.trace["kept_question"] = {"text": text, "intent": c.intent}
        self.text = text
        self.note_classification(c)
        intent = self.intent_config(c)
        self.asking = intent if intent is not None and intent.topics else None
        self.move("classifying", "kept question")
        return self.answer_l1(c)

    def route_one(self, c: Classification, *, restated: bool = False) -> TurnResult:
        """Gather the facts, ask the plan (router.turn.plan) for the route, run it. ``restated``: one part of the
        message asks for the waiting flow's own task again beside a question (``FlowPart.restated``)."""
        self.flush_moves()
        counters = sm.load_counters(self.conn, self.conv)
        # a waiting flow reads the message first: an answer to its own question ("100235", "50", "是的"), a
        # correction or a change of mind is the flow's, whatever the classifier guessed; only a digression
        # (a confident other topic) is served as its own request before the flow asks again
        reading = self.read_in_flow(c)
        # "sorry, I meant 100241" right after "I couldn't find order 100999": the same task again, corrected
        restart = self.correcting(c) if reading is None else None
        intent = self.intent_config(c)
        form = per_turn(("form", self.text), lambda: read_form(self.text))
        self.trace["form"] = form
        question = close_question(self.r, c, intent, form) if reading is None and restart is None else None
        facts = plan_facts(self.r, c, intent, self.text, form=form, close=question, reading=reading, restart=restart)
        framed = plan.frame(facts)
        task = self.task_workflow(c, framed.served) if not framed.asking else None
        verdict = self.r.escalation.evaluate(text=self.text, classification=c, counters=counters,
                                             target_state=plan.target_state(framed, task=task),
                                             claimed=framed.claimed)
        route = plan.choose(facts, framed, verdict_facts(verdict), task=task)
        if route.asking:
            self.asking = intent
        if route.act is Act.SMALL_TALK and route.template is not None:
            return self.small_talk(c, route.template, verdict.checks)
        self.save_verdict(verdict)
        if route.restart is not None:
            self.move("classifying", "message")
            flow = self.run_flow(c, workflow=route.restart)
            if flow is not None:
                return self.flow_outcome(c, flow)
        if route.act is Act.CLARIFY:
            # "can you make it faster?" right after an order's status: read in that task's context, not clarified
            return self.follow_up(c) or self.clarify(c)
        if route.answer_first and question is not None:
            first = self.answer_first(c, question, route.workflow)
            if first is not None:
                return first
        if route.act is Act.SERVE_WORKFLOW and route.workflow is not None:
            return self.serve_workflow(c, route.workflow)
        if route.act is Act.DIGRESSION:
            return self.digression(c, route, verdict.checks)
        self.move("classifying", "message")
        esc = verdict.as_escalation()
        if route.act is Act.ESCALATE and esc is not None:
            decision = self.decision_of(c, "L3", esc)
            ticket_id = self.open_l3(decision, reason=esc.reason, priority=esc.priority, classification=c)
            return self.result(decision, reply=self.send(self.say("ack_l3"), kind="ack"),
                               ticket_id=ticket_id)
        # What the waiting step cannot read is no failed try (the step asks its question again, as for a
        # digression) when it is
        # - "how do I return it?" at "which order?": a question that names a topic of the knowledge base (its
        #   intent, however unsure, has topics) and that the knowledge base answers with confidence (the answer
        #   goes first). "which one?", "what do you mean?" name no topic: they stay unclear (the question again,
        #   with a hint);
        # - "发票怎么开？还有，我要退款" at "which order should be refunded?": the flow's own task asked for again beside a
        #   question (``restated``: the question was answered before the turn came to the flow's part).
        if reading == "unclear" and route.run_flow and self.listening is not None:
            topical = form == "question" and intent is not None and intent.topics
            answered = self.answer_beside(self.text) if topical else None
            if answered is not None or restated:
                self.listening.reading = self.trace["reading"] = "digression"
                flow = self.run_flow(c, workflow=route.workflow)
                if flow is not None:
                    return self.with_answer_first(answered, self.flow_outcome(c, flow))
        # "不用了，谢谢你，我还想问下退货运费" at the tax id: the decline is the flow's answer, the question is answered first
        asked = self.listening.asked if self.listening is not None and route.run_flow else None
        beside = self.answer_beside(asked) if asked else None
        if asked and self.listening is not None:
            if beside is not None:
                self.listening.asked = None    # answered: nothing to keep
            else:                              # kept on the task: routed as its own request when the task ends
                beside = self.send(self.say("question_kept").replace("{question}", asked), kind="reply")
        flow = self.run_flow(c, workflow=route.workflow) if route.run_flow else None
        if flow is not None and reading == "cancel" and flow.outcome == "cancelled":
            instead = self.served_instead(c, flow)
            if instead is not None:
                return instead
        if flow is not None and not flow.drift:
            # a problem the message reports beside the task it started ("the tracking says delivered but nothing
            # came"): what to do about it, from the intent's advice articles, goes with the task's reply: before
            # the question the task asks (the question comes last), after its answer
            # ("has my lamp been delivered?" only asks how things stand: the status alone)
            advising = intent if (reading is None and restart is None and beside is None and intent is not None
                                  and intent.advice and flow.handoff is None
                                  and not per_turn(("only asks", self.text), lambda: only_asks(self.text))) else None
            if advising is not None and flow.status == "waiting":
                beside, advising = self.advice_beside(advising), None
            result = self.with_answer_first(beside, self.flow_outcome(c, flow))
            if advising is not None and result.ticket_id is None:
                result = self.with_advice_after(self.advice_beside(advising), result)
            return result
        result = (self.small_talk(c, route.template, verdict.checks) if route.template is not None
                  else self.route_tier(c, route.tier))
        return self.with_question_again(result, flow)
