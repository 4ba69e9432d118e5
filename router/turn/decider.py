"""The router's decider: harness -> classifier -> escalation -> state -> the tier's action.

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
import time
from contextlib import contextmanager
from typing import Any

from automation.workflows.engine import CLAIMED
from router.telemetry.metrics import TURN_OUTCOMES
from router.turn import language
from text.form import read_form
from router.turn import state as sm
from router.turn.escalation import EscalationPolicy, Policy
from router.turn.guards import Harness, Verdict
from router.outbox.store import enqueue_outbound
from router.turn.passes import per_turn
from router.turn.pipeline import TurnContext, TurnResult
from router.problems import Problem
from router.schemas import Decision, Escalation, InboundMessage
from text import LONG_MESSAGE_CHARS

log = logging.getLogger(__name__)

TIER_STATE = {"L1": "l1_resolving", "L2": "l2_assisting", "L3": "l3_queuing"}
TRANSCRIPT_LIMIT = 50     # messages of the conversation in a ticket's context package
TRAIL_LIMIT = 20          # earlier decisions in the context package
EVIDENCE_LIMIT = 5
TOOL_CALL_LIMIT = 20      # recent tool calls of the conversation in the context package
OUTCOMES = TURN_OUTCOMES   # what a turn did for the customer (the deflection metric and report)
# A question of an intent with topics that the knowledge base declines: when its best passage is from one of the
# intent's own articles (the classifier and retrieval agree on the topic) and the knowledge base's confidence is
# at least this, the passage answers it. Below it retrieval has not found the topic (unanswerable questions of
# the routing set score 0.07-0.14; answerable ones 0.26-0.56 on the bundled pack).
TOPIC_AGREEMENT_FLOOR = 0.25
TOPIC_AGREEMENT_INTENT = 0.6   # ... and the classifier is at least this sure of the intent (both signals agree)


def _hit_dict(hit) -> dict[str, Any]:
    chunk = getattr(hit, "chunk", None)
    d = {"chunk_id": hit.chunk_id, "score": round(float(hit.score), 4), "rank": hit.rank,
         "scores": {k: round(float(v), 4) for k, v in (hit.scores or {}).items()}}
    if chunk is not None:
        d.update({"doc_id": chunk.doc_id, "title": chunk.title, "section": chunk.section, "lang": chunk.lang,
                  "source": chunk.source, "text": chunk.text})
    return d


def _citations(citations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("doc_id", "chunk_id", "title", "section", "source", "score")
    return [{k: c.get(k) for k in keys if c.get(k) is not None} for c in citations if c.get("doc_id")]


class Decider:
    """The :data:`router.turn.pipeline.Decider` of the gateway (one instance per process, thread-safe)."""

    # Every reply a turn returns was queued (transcript + outbox) in the turn's own transaction, so
    # the channel gateway need not look for it afterwards.
    queues_replies = True

    def __init__(self, *, policy: Policy, classifier: Any, rag: Any = None, handoff: Any = None,
                 encoder: Any = None, metrics: Any = None, workflows: Any = None, flows: Any = None):
        self.policy = policy
        self.flows = flows          # automation.workflows FlowEngine, or None (no tools configured)
        if flows is not None:       # its tool calls and memory loads run outside the turn's transaction
            from router.turn.passes import tool_port

            flows.outside = tool_port(lambda: flows.tools.turn_deadline() if hasattr(flows.tools, "turn_deadline")
                                      else 5.0)
        # ``serve: workflow <name>`` intents without an engine fall back here (name -> workflow); None: not wired
        self.harness = Harness(policy.harness)
        self.escalation = EscalationPolicy(policy.escalation, policy.feedback, encoder)
        self.encoder = encoder
        self.classifier = classifier
        self.rag = rag
        self.handoff = handoff
        self.metrics = metrics
        self.workflows = workflows
        config = getattr(classifier, "config", None)
        missing = sorted({i.served_by[1] for i in (config.intents if config is not None else [])
                          if i.served_by and i.served_by[0] == "reply"} - policy.replies.names())
        if missing:
            raise ValueError("intents are served by reply templates the policy lacks: "
                             + ", ".join(f"replies.{m}" for m in missing))

    def __call__(self, ctx: TurnContext) -> TurnResult:
        return _Turn(self, ctx).run()

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


class _Turn:
    """One message's trip through the router; collects the trace as it goes."""

    def __init__(self, router: Decider, ctx: TurnContext):
        self.r = router
        self.ctx = ctx
        self.conn = ctx.conn
        self.conv = ctx.conversation
        self.text = ctx.inbound.text
        self.message_id = ctx.message["id"]
        self.transitions: list[dict[str, Any]] = []
        self.trace: dict[str, Any] = {"transitions": self.transitions}
        self.flags: dict[str, Any] = {}
        self.rag_error: str | None = None
        self.flow: dict[str, Any] | None = None     # the workflow's part of the response
        self.listening: Any = None                   # the waiting flow and its reading of the message (engine.listen)
        self._notes: list[str] | None = None
        self.outcome: str | None = None
        self.asking = None          # the intent config whose topics answer this message (a question), if any
        known = (self.conv.get("metadata") or {}).get("lang")
        self.lang = language.choose(self.text, known, router.policy.default_language)
        self.trace["lang"] = self.lang
        if self.lang != known:   # remembered for the next short message ("ok", "👍")
            self.conn.execute("UPDATE conversations SET metadata = COALESCE(metadata, '{}'::jsonb) "
                              "|| jsonb_build_object('lang', %s::text) WHERE id = %s", (self.lang, self.conv["id"]))

    # -- helpers --

    def queue_notes(self) -> list[str]:
        """Where the handoff queue's notifications of this turn collect; sent once the turn has committed."""
        if self._notes is None:
            self._notes = notes = []
            handoff = self.r.handoff
            self.ctx.after_commit.append(lambda conn: handoff.publish(conn, notes))
        return self._notes

    @contextmanager
    def stage(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self.ctx.timings[name] = self.ctx.timings.get(name, 0.0) + dt
            if self.r.metrics is not None and name in ("harness", "retrieval", "handoff"):
                self.r.metrics.stage_seconds.labels(name).observe(dt)

    def move(self, to_state: str, reason: str, ticket_id=None, *, counted: bool = True) -> None:
        t = sm.transition(self.conn, self.conv, to_state, reason=reason, message_id=self.message_id,
                          ticket_id=ticket_id, counted=counted)
        self.transitions.append({"from": t["from"], "to": t["to"], "reason": reason, "id": t["id"]})

    def say(self, key: str) -> str:
        """The policy's reply template ``key`` in this turn's language."""
        return self.r.policy.reply(key, self.lang)

    def send(self, text: str, *, kind: str = "reply", citations: list[dict] | None = None,
             suggestions: list[str] | None = None) -> dict[str, Any] | None:
        """Queue ``text`` to the customer (transcript + outbox, this transaction); the webhook's reply.

        ``suggestions`` are quick replies: the channel senders render them (buttons, keyboards, JSON)."""
        if self.flags.get("do_not_contact"):
            self.trace["suppressed_reply"] = kind
            return None
        payload: dict[str, Any] = {"lang": self.lang}
        if citations:
            payload["citations"] = citations
        if suggestions:
            payload["suggestions"] = suggestions
        enqueue_outbound(self.conn, conversation_id=self.conv["id"], channel=self.conv["channel"], text=text,
                         sender="bot", kind=kind, payload=payload)
        return {"text": text, "citations": citations or [], "suggestions": suggestions or [], "lang": self.lang}

    def count(self, metric) -> None:
        """Increment ``metric`` once the turn commits (a rolled-back pass or attempt counts nothing)."""
        self.ctx.after_commit.append(lambda _conn: metric.inc())

    def result(self, decision: Decision, *, reply=None, ticket_id=None) -> TurnResult:
        if decision.escalation is not None and self.r.metrics is not None:
            self.count(self.r.metrics.escalations.labels(decision.escalation.rule))
        outcome = self.outcome or ("ticketed" if (self.trace.get("ticket") or {}).get("id") else
                                   "held" if ticket_id is not None else "resolved" if reply else "none")
        self.trace["outcome"] = outcome
        if self.r.metrics is not None:
            self.count(self.r.metrics.deflection.labels(outcome, self.conv["channel"], self.lang))
        return TurnResult(decision=decision, state=self.conv["state"], reply=reply,
                          ticket_id=str(ticket_id) if ticket_id is not None else None, trace=self.trace,
                          lang=self.lang, flow=self.flow)

    def active_ticket(self) -> dict[str, Any] | None:
        if self.r.handoff is None:
            return None
        return self.r.handoff.active_ticket(self.conn, self.conv["id"])

    def to_ticket(self, ticket: dict[str, Any]) -> None:
        with self.stage("handoff"):
            self.r.handoff.add_customer_message(self.conn, ticket["id"], self.text, notes=self.queue_notes(),
                                                message_id=self.message_id)
        self.trace["added_to_ticket"] = str(ticket["id"])

    # -- the turn --

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
            sm.reset_counters(self.conn, self.conv)

        if self.conv["state"] in sm.RESOLVED and self.r.escalation.is_positive_feedback(self.text):
            engine = self.r.flows
            active = engine.active(self.conn, str(self.conv["id"])) if engine is not None else None
            offer = active is not None and engine.offered(active)
            if offer and engine.read(active, self.text) in ("answer", "cancel"):
                return self.route()   # "no thanks" to "shall I start it?" answers the offer
            if active is None or offer:   # "thanks" after an answer: an open offer just lapses
                if active is not None:
                    engine.lapse(self.conn, active)
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
                waiting = self.conv["state"] == "l3_queuing" and v.reply
                return self.result(decision, reply=self.send(v.reply) if waiting else None, ticket_id=ticket_id)
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

    def while_held(self, ticket: dict[str, Any]) -> TurnResult:
        """A human holds the conversation (or reviews a draft): the message goes to the ticket.

        In l2_assisting the escalation rules still run, so "转人工" or a big refund reaches a person.
        """
        state = self.conv["state"]
        if state == "l2_assisting":
            classification = self.classify()
            counters = sm.load_counters(self.conn, self.conv)
            verdict = self.r.escalation.evaluate(text=self.text, classification=classification, counters=counters,
                                                 target_state=None)
            self.save_verdict(verdict)
            if verdict.escalate:
                esc = Escalation(rule=verdict.rule, reason=verdict.reason, priority=verdict.priority)
                decision = self.decision_of(classification, "L3", esc)
                ticket_id = self.open_l3(decision, reason=esc.reason, priority=esc.priority,
                                         classification=classification)
                reply = self.send(self.say("ack_l3"), kind="ack")
                return self.result(decision, reply=reply, ticket_id=ticket_id)
            self.to_ticket(ticket)
            return self.result(self.decision_of(classification, "L2", None), ticket_id=ticket["id"])
        self.to_ticket(ticket)
        reply = self.still_waiting() if state == "l3_queuing" else None
        return self.result(Decision(tier="L3", channel="state",
                                    explanation={"state": state, "note": "a person holds the conversation"}),
                           reply=reply, ticket_id=ticket["id"])

    def still_waiting(self) -> dict[str, Any] | None:
        """"hello? anyone there?" while nobody has taken the ticket yet: one short word that the message arrived,
        when the bot has said nothing for ``still_waiting_seconds`` (the ticket's own acknowledgement counts)."""
        interval = self.r.policy.still_waiting_seconds
        if interval <= 0:
            return None
        row = self.conn.execute(
            "SELECT now() - max(received_at) > make_interval(secs => %s) AS due, max(received_at) IS NULL AS never "
            "FROM messages WHERE conversation_id = %s AND direction = 'out' AND sender = 'bot'",
            (interval, self.conv["id"])).fetchone()
        if row is not None and not (row["due"] or row["never"]):
            return None
        self.trace["served"] = {"reply": "still_waiting"}
        return self.send(" ".join([self.say("still_waiting"), *self.queue_place()]).replace("。 ", "。"),
                         kind="status")

    def queue_place(self) -> list[str]:
        """"You are number 3 in the queue", and the team's usual wait when one is known: what the customer
        can expect, from the queue itself (nothing is promised that the queue does not show)."""
        where = self.r.handoff.queue_position(self.conn, self.conv["id"]) if self.r.handoff is not None else None
        if where is None:
            return []
        out = [self.say("queue_position").replace("{position}", str(where["position"]))]
        if where.get("typical_wait_seconds") is not None:
            minutes = max(1, round(where["typical_wait_seconds"] / 60))
            out.append(self.say("typical_wait").replace("{minutes}", str(minutes)))
        self.trace["served"]["queue"] = {"position": where["position"],
                                         "typical_wait_seconds": where.get("typical_wait_seconds")}
        return out

    def close_with_feedback(self) -> TurnResult:
        if self.conv["state"] != "feedback_pending":
            self.move("feedback_pending", "customer_confirmed")
        self.move("closed", "positive_feedback")
        sm.save_counters(self.conn, self.conv["id"], feedback="positive", last_question=None, repeat_count=0,
                         dissatisfied_streak=0, low_confidence_streak=0, state_entries={})
        reply = self.send(self.say("closing"), kind="reply")
        return self.result(Decision(channel="state", explanation={"feedback": "positive"}), reply=reply)

    def classify(self):
        with self.stage("classify"):   # once per turn: a later pass (after its tool calls) reuses it
            c = per_turn(("classify", self.text), lambda: self.r.classifier.classify(self.text))
        if c.decided_by == "embeddings" and self.r.metrics is not None:   # the rules path: see Pipeline
            self.r.metrics.stage_seconds.labels("embedding").observe(self.ctx.timings["classify"])
        self.note_classification(c)
        return c

    def note_classification(self, c) -> None:
        self.trace["classification"] = {"intent": c.intent, "tier": c.tier, "confidence": round(c.confidence, 4),
                                        "decided_by": c.decided_by, "entities": c.entities}

    def save_verdict(self, verdict) -> None:
        self.trace["escalation"] = {"rule": verdict.rule, "checks": verdict.checks}
        sm.save_counters(self.conn, self.conv["id"], **verdict.counters)

    def decision_of(self, c, tier: str, esc: Escalation | None, **extra) -> Decision:
        return Decision(intent=c.intent, tier=tier, confidence=round(float(c.confidence), 4), channel=c.decided_by,
                        explanation={**c.explanation, **extra}, escalation=esc)

    def route(self) -> TurnResult:
        if self.conv["state"] == "feedback_pending" and self.r.escalation.is_dissatisfied(self.text):
            sm.save_counters(self.conn, self.conv["id"], feedback="negative")
        c = self.classify()
        self.settle_offer(c)
        planned = self.serve_other_requests()
        extras: list[dict] = []
        if planned is not None:   # "cancel 100235 and tell me your return policy": the questions answered, the task next
            extras, c = planned
            self.note_classification(c)
        result = self.route_one(c)
        if extras:
            text = "\n\n".join([e["text"] for e in extras] + ([result.reply["text"]] if result.reply else []))
            citations = [x for e in extras for x in e.get("citations") or []]
            base = result.reply or {"suggestions": [], "lang": self.lang}
            result.reply = {**base, "text": text, "citations": citations + list(base.get("citations") or [])}
        return result

    def settle_offer(self, c) -> None:
        """An open offer ("Shall I start it?") that this message does not answer with a yes or a no lapses now,
        so the message is routed as a new one (a question, another task), never read as the offer's answer."""
        engine = self.r.flows
        if engine is None:
            return
        active = engine.active(self.conn, str(self.conv["id"]))
        if not engine.offered(active):
            return
        reading = engine.read(active, self.text, c.entities or {}, intent=c.intent,
                              intent_confidence=float(c.confidence))
        if reading not in ("answer", "cancel"):
            engine.lapse(self.conn, active)
            self.trace["offer"] = {"workflow": active["workflow"], "lapsed": True}

    def intent_config(self, c):
        config = getattr(self.r.classifier, "config", None)
        return config.intent(c.intent) if config is not None and c.intent else None

    def serve_other_requests(self):
        """Several requests in one message (router.classify.segments): each question the knowledge base answers
        is answered now, in order, and the turn goes on with the remaining request (``self.text`` becomes it).
        Returns (the answers sent, the remaining request's classification); None when the message is one request
        (or its parts are not all requests the bot can place)."""
        from router.classify.segments import split_requests

        engine = self.r.flows
        if self.r.rag is None or (engine is not None and engine.active(self.conn, str(self.conv["id"])) is not None):
            return None
        parts = split_requests(self.text)
        if len(parts) < 2:
            return None
        with self.stage("classify"):
            placed = [(p, self.r.classifier.classify(p)) for p in parts]
        if any(x.intent is None for _, x in placed) or len({x.intent for _, x in placed}) < 2:
            return None
        if any(self.r.escalation.asks_for_person(p) for p in parts):
            return None
        kinds = []
        for p, x in placed:
            served = self.served_by(x)
            kinds.append("talk" if served is not None and served[0] == "reply" else
                         "question" if x.tier == "L1" and served is None else "request")
        questions = [i for i, k in enumerate(kinds) if k == "question"]
        requests = [i for i, k in enumerate(kinds) if k == "request"]
        if not questions or len(requests) > 1:
            return None
        main = requests[0] if requests else questions[0]
        answers = []
        for i in questions:
            if i == main:
                continue
            with self.stage("retrieval"):
                try:
                    answer = self.r.rag.answer(parts[i])
                except Exception:  # noqa: BLE001 - the main request is still served
                    log.exception("knowledge base failed on one request of several")
                    return None
            if not (answer.answered and answer.text):
                return None   # not confidently answerable: the whole message goes the usual way (a person may look)
            citations = _citations(answer.citations)
            sent = self.send(answer.text, kind="reply", citations=citations)
            if sent is not None:
                answers.append(sent)
        self.trace["requests"] = [{"text": p, "intent": x.intent, "kind": k, "main": i == main}
                                  for i, ((p, x), k) in enumerate(zip(placed, kinds))]
        self.text = parts[main]
        return answers, placed[main][1]

    def route_one(self, c) -> TurnResult:
        served = self.served_by(c)
        counters = sm.load_counters(self.conn, self.conv)
        planned = c.tier if c.tier in TIER_STATE else "L2"
        smalltalk = served is not None and served[0] == "reply"
        # a waiting flow reads the message first: an answer to its own question ("100235", "50", "是的"), a
        # correction or a change of mind is the flow's, whatever the classifier guessed; only a digression
        # (a confident other topic) is served as its own request before the flow asks again
        reading = self.read_in_flow(c)
        in_flow = reading is not None
        # "sorry, I meant 100241" right after "I couldn't find order 100999": the same task again, corrected
        restart = self.correcting(c) if reading is None else None
        claimed = reading in CLAIMED or restart is not None
        # a question of an intent with knowledge-base topics is answered (L1), never started as its task; with an
        # order number and `with_order` it is about that order ("has order 100234 shipped?"): the shop answers
        intent = self.intent_config(c)
        form = read_form(self.text)
        self.trace["form"] = form
        own_order = bool(intent is not None and intent.with_order and (c.entities or {}).get("order_numbers"))
        if (form == "question" and intent is not None and intent.topics and self.r.rag is not None and not own_order
                and reading is None and restart is None and not (served is not None and served[0] == "reply")):
            self.asking = intent
            served, planned = None, "L1"
        task = self.task_workflow(c, served) if self.asking is None else None
        runs_here = task is not None
        # the loop guard counts knowledge-base rounds; a workflow's turns (a fourth task) are normal work
        target = None if (smalltalk or claimed or runs_here) else TIER_STATE[planned]
        verdict = self.r.escalation.evaluate(text=self.text, classification=c, counters=counters,
                                             target_state=target, claimed=claimed)
        # "are you a real person?" matched by a small-talk rule asks who is talking, not for a person
        asks_who = verdict.rule == "human_request" and c.decided_by == "rules"
        if (not in_flow and not verdict.escalate and verdict.checks["human_request"].get("identity_question")
                and not smalltalk and "bot_identity" in self.r.policy.replies.names()):
            served, smalltalk = ("reply", "bot_identity"), True   # the classifier heard "a person"; it was a question
        if smalltalk and not in_flow and (not verdict.escalate or asks_who) \
                and not verdict.checks["dissatisfied"]["signal"]:
            return self.small_talk(c, served[1], verdict)
        self.save_verdict(verdict)
        if (not verdict.escalate and intent is not None and c.intent in self.r.escalation.config.security_intents
                and intent.topics and planned == "L3" and self.r.rag is not None):
            # an account question without a sign of a hacked or frozen account ("I forgot my password"): self-service
            self.asking, planned = intent, "L1"
        if not verdict.escalate and restart is not None:
            self.move("classifying", "message")
            flow = self.run_flow(c, workflow=restart)
            if flow is not None:
                return self.flow_outcome(c, flow)
        if not verdict.escalate and not in_flow and c.intent is None \
                and self.r.policy.unknown == "clarify_then_escalate" and verdict.counters["low_confidence_streak"] <= 1:
            return self.clarify(c)
        if not verdict.escalate and not in_flow and not runs_here and served is not None and served[0] == "workflow":
            return self.serve_workflow(c, served[1])
        if reading == "digression" and not verdict.escalate:
            return self.digression(c, served, verdict, planned, smalltalk)
        self.move("classifying", "message")
        if verdict.escalate:
            esc = Escalation(rule=verdict.rule, reason=verdict.reason, priority=verdict.priority)
            decision = self.decision_of(c, "L3", esc)
            ticket_id = self.open_l3(decision, reason=esc.reason, priority=esc.priority, classification=c)
            return self.result(decision, reply=self.send(self.say("ack_l3"), kind="ack"),
                               ticket_id=ticket_id)
        flow = self.run_flow(c, workflow=task) if self.r.flows is not None and self.asking is None else None
        if flow is not None and not flow.drift:
            return self.flow_outcome(c, flow)
        result = self.small_talk(c, served[1], verdict) if smalltalk else self.route_tier(c, planned)
        if flow is not None and result.ticket_id is None and result.reply is not None:
            # the customer asked something else mid-flow: that is answered, then the question is asked again
            self.send(flow.reply, kind="reply", suggestions=flow.quick_replies)
            result.reply = {**result.reply, "text": f"{result.reply['text']}\n\n{flow.reply}"}
        return result

    def task_workflow(self, c, served) -> str | None:
        """The workflow this message starts when no flow is active: the one serving the intent, or the one
        ``serve: workflow`` / ``with_order`` names; None when the engine has neither."""
        engine = self.r.flows
        if engine is None or c.intent is None:
            return None
        if served is not None and served[0] == "workflow" and served[1] in engine.workflows.workflows:
            return served[1]
        intent = self.intent_config(c)
        if intent is not None and intent.task and intent.task in engine.workflows.workflows:
            return intent.task
        wf = engine.workflows.for_intent(c.intent)
        return wf.name if wf is not None else None

    def resume_interrupted(self, t):
        """A flow that ended this turn gives the floor back to the task it interrupted (its question again)."""
        engine = self.r.flows
        if engine is None or t.status in ("waiting", "waiting_approval"):
            return None
        resumed = engine.resume(self.conn, str(self.conv["id"]), self.lang if self.lang in ("zh", "en") else "en")
        if resumed is not None:
            self.flow = resumed.as_response()
            self.trace.setdefault("workflow", {})["resumed"] = {"workflow": resumed.workflow,
                                                                "instance_id": resumed.instance_id}
        return resumed

    def digression(self, c, served, verdict, planned: str, smalltalk: bool) -> TurnResult:
        """Another topic while a flow waits: served as its own request, then the flow asks its question again.
        Another task of the customer's (a workflow) interrupts the waiting flow, which resumes when it ends."""
        engine = self.r.flows
        task = self.task_workflow(c, served) if not smalltalk else None
        if task is not None and engine is not None:
            waiting = engine.active(self.conn, str(self.conv["id"]))
            if waiting is not None and waiting["workflow"] != task:
                engine.suspend(self.conn, waiting, because=task)
                self.move("classifying", "message")
                flow = self.run_flow(c, workflow=task)
                if flow is not None:
                    return self.flow_outcome(c, flow)
        flow = self.run_flow(c)
        if smalltalk:
            result = self.small_talk(c, served[1], verdict)
        else:
            self.move("classifying", "message")
            result = self.route_tier(c, planned)
        if flow is not None and result.ticket_id is None and result.reply is not None:
            self.send(flow.reply, kind="reply", suggestions=flow.quick_replies)
            result.reply = {**result.reply, "text": f"{result.reply['text']}\n\n{flow.reply}"}
        return result

    def correcting(self, c) -> str | None:
        """The workflow this message restarts with a corrected value (see FlowEngine.correcting), or None."""
        engine = self.r.flows
        if engine is None or (c.intent is not None and c.decided_by == "rules"
                              and engine.workflows.for_intent(c.intent) is None):
            return None
        workflow = engine.correcting(self.conn, str(self.conv["id"]), self.text, c.entities or {})
        if workflow is not None:
            self.trace["reading"] = "correction"
        return workflow

    def read_in_flow(self, c) -> str | None:
        """What the conversation's waiting flow reads this message as (automation.workflows READINGS), or None
        when no flow is active. Nothing changes here; ``run_flow`` then acts on it."""
        engine = self.r.flows
        if engine is None:
            return None
        with self.stage("workflow"):
            self.listening = engine.listen(self.conn, str(self.conv["id"]), self.text, c.entities or {},
                                           intent=c.intent, intent_confidence=float(c.confidence))
        if self.listening is None:
            return None
        self.trace["reading"] = self.listening.reading
        return self.listening.reading

    def route_tier(self, c, planned: str) -> TurnResult:
        if planned == "L1":
            return self.answer_l1(c)
        if planned == "L2":
            return self.assist_l2(c, self.decision_of(c, "L2", None), via="classifying")
        priority = self.r.escalation.config.intent_priorities.get(c.intent or "", "normal")
        decision = self.decision_of(c, "L3", None)
        ticket_id = self.open_l3(decision, reason=f"intent {c.intent or 'unknown'} is handled by a person",
                                 priority=priority, classification=c)
        return self.result(decision, reply=self.send(self.say("ack_l3"), kind="ack"), ticket_id=ticket_id)

    # -- served without the knowledge base --

    def served_by(self, c) -> tuple[str, str] | None:
        intent = self.r.classifier.config.intent(c.intent) if c.intent else None
        if intent is None:
            return None
        if getattr(intent, "with_order", None) and (c.entities or {}).get("order_numbers"):
            return "workflow", intent.with_order.split(" ", 1)[1]   # about one of the customer's own orders
        return intent.served_by

    def small_talk(self, c, template: str, verdict) -> TurnResult:
        """A greeting, thanks, "are you a bot": the template reply; state, counters and any flow untouched."""
        self.trace["escalation"] = {"rule": None, "checks": verdict.checks}
        self.trace["served"] = {"reply": template}
        reply = self.send(self.say(template), kind="reply")
        return self.result(self.decision_of(c, "L1", None, served=f"reply {template}"), reply=reply)

    def clarify(self, c) -> TurnResult:
        """The first message of a run that matches nothing: say what the bot can do, offer suggestions."""
        self.outcome = "clarified"
        self.trace["served"] = {"reply": "clarify"}
        reply = self.send(self.say("clarify"), kind="reply", suggestions=self.r.policy.suggestions_for(self.lang))
        return self.result(self.decision_of(c, None, None, clarify=True), reply=reply)

    def serve_workflow(self, c, name: str) -> TurnResult:
        """The customer's own data (order, delivery, refund status): never a knowledge-base passage.

        The workflow engine is wired by the composition root (``Decider(workflows=...)``); until then the
        bot asks for a missing order number, and with one a person takes it (assist ticket, no draft).
        """
        wired = self.r.workflows is not None and name in self.r.workflows
        self.trace["served"] = {"workflow": name, "wired": wired}
        orders = (c.entities or {}).get("order_numbers") or []
        if not orders:
            self.outcome = "clarified"
            reply = self.send(self.say("ask_order_number"), kind="reply")
            return self.result(self.decision_of(c, "L1", None, served=f"workflow {name}", missing=["order_number"]),
                               reply=reply)
        self.move("classifying", "message")
        decision = self.decision_of(c, "L2", None, served=f"workflow {name}",
                                    workflow={"name": name, "wired": wired})
        return self.assist_l2(c, decision, via="workflow", reason=f"workflow {name} is not wired: a person looks "
                              f"up order {orders[0]}", retrieve=False)

    # -- workflows --

    def run_flow(self, c, workflow: str | None = None):
        """Advance the conversation's active workflow, or start ``workflow`` or the one serving the intent;
        None: no flow."""
        from rag.chunk import detect_lang
        from router.turn.flows import caller_of

        engine = self.r.flows
        caller = caller_of(self.conv, turn_id=self.ctx.turn_id)
        if caller is None:
            return None
        lang = self.lang if self.lang in ("zh", "en") else (detect_lang(self.text) or "en")
        with self.stage("workflow"):
            # the flow that listened moves on with its reading; else `workflow` (or the intent's) starts
            t = engine.on_message(self.conn, caller, self.text, c.entities or {}, lang=lang, listening=self.listening,
                                  workflow=workflow, intent=c.intent, intent_confidence=float(c.confidence))
            self.listening = None
        if t is None:
            return None
        self.flow = t.as_response()
        self.trace["workflow"] = {**self.flow, "outcome": t.outcome, "drift": t.drift, "failure": t.failure,
                                  "steps": [{"step": s.step, "kind": s.kind, "ms": round(s.ms, 2),
                                             "tool_status": s.tool_status, "note": s.note} for s in t.trace]}
        return t

    def flow_outcome(self, c, t) -> TurnResult:
        """The workflow answered this turn: its reply goes out; a handoff opens the L2/L3 ticket."""
        if t.handoff is not None:
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
            text = "\n\n".join(x for x in (t.reply, self.say("ack_l3" if tier == "L3" else "ack_l2")) if x)
            return self.result(decision, reply=self.send(text, kind="ack"), ticket_id=ticket_id)
        # the bot answered this turn (a flow that waits for the customer keeps its place in flow_instances)
        self.move("l1_resolving", f"workflow {t.workflow}", counted=False)   # served: not a loop-guard round
        resumed = self.resume_interrupted(t)
        text = "\n\n".join(x for x in (t.reply, resumed.reply if resumed is not None else None) if x)
        quick = resumed.quick_replies if resumed is not None else t.quick_replies
        reply = self.send(text, kind="reply", suggestions=quick) if text else None
        self.move("l1_resolved", f"workflow {t.workflow} {t.outcome or t.status}")
        decision = self.decision_of(c, "L1", None, workflow=self.flow)
        return self.result(decision, reply=reply)

    def retrieve(self):
        if self.r.rag is None:
            return None
        with self.stage("retrieval"):
            try:
                answer = self.r.rag.answer(self.text)
            except Exception as exc:  # noqa: BLE001 - a broken index must not lose the message: a person takes it
                log.exception("knowledge base failed; routing to L2 without evidence")
                self.trace["rag"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                self.rag_error = f"knowledge base failed ({type(exc).__name__})"
                return None
        self.trace["rag"] = {"answered": answer.answered, "confidence": round(float(answer.confidence), 4),
                             "reason": answer.reason,
                             "passages": [{"chunk_id": h.chunk_id, "score": round(float(h.score), 4)}
                                          for h in answer.passages[:EVIDENCE_LIMIT]],
                             "timings_ms": {k: round(v * 1000, 2) for k, v in (answer.timings or {}).items()}}
        return answer

    def answer_l1(self, c) -> TurnResult:
        self.move("l1_resolving", f"intent {c.intent}")
        answer = self.retrieve()
        text, citations, agreed = None, [], False
        if answer is not None and answer.answered and answer.text:
            text, citations = answer.text, _citations(answer.citations)
        elif answer is not None and self.asking is not None:
            text, citations = self.topic_answer(c, answer)
            agreed = text is not None
        if text:
            offer = self.offer_task(c, citations)
            if offer is not None:
                text = f"{text}\n\n{self.say('offer_task').format(task=offer[0])}"
            reply = self.send(text, kind="reply", citations=citations, suggestions=offer[1] if offer else None)
            self.move("l1_resolved", "answered_from_kb")
            if self.r.metrics is not None:
                self.count(self.r.metrics.l1_resolved)
            facts = {"confidence": round(float(answer.confidence), 4)}
            if agreed:
                facts["topic_agreement"] = True
            decision = self.decision_of(c, "L1", None, answer=facts)
            return self.result(decision, reply=reply)
        why = (self.rag_error or "no knowledge base") if answer is None else (answer.reason or "no confident answer")
        decision = self.decision_of(c, "L2", None, l1_fallback={"from": "L1", "reason": why})
        return self.assist_l2(c, decision, via="l1_resolving", answer=answer, reason=f"L1 could not answer: {why}")

    def topic_answer(self, c, answer) -> tuple[str | None, list[dict[str, Any]]]:
        """A declined answer to a question whose intent declares topics: its best passage answers when it is from
        one of those articles, the knowledge base's confidence reaches TOPIC_AGREEMENT_FLOOR and the classifier's
        TOPIC_AGREEMENT_INTENT; else (None, [])."""
        passages = answer.passages or []
        best = passages[0] if passages else None
        chunk = getattr(best, "chunk", None)
        if (chunk is None or float(answer.confidence) < TOPIC_AGREEMENT_FLOOR or float(c.confidence) < TOPIC_AGREEMENT_INTENT
                or not self.asking.covers(chunk.doc_id)):
            return None, []
        text = getattr(answer, "draft", None) or self.extractive(chunk.text)
        if not text:
            return None, []
        self.trace.setdefault("rag", {})["topic_agreement"] = {"doc_id": chunk.doc_id, "intent": self.asking.name}
        return text, _citations(answer.citations[:1])

    def extractive(self, passage: str) -> str | None:
        """The knowledge base's own extractive answer from ``passage`` (the sentences with the question's words)."""
        from rag.answer import extract

        kb = self.r.rag
        try:
            rw = kb.rewriter.rewrite(self.text)
            return extract(passage, [*rw.keywords, *rw.expansions], kb.tokenizer) or None
        except Exception:  # noqa: BLE001 - no extractive answer: the question goes to a person as before
            log.exception("extractive answer failed")
            return None

    def offer_task(self, c, citations: list[dict[str, Any]]) -> tuple[str, list[str]] | None:
        """After an answer: the task of the intent whose topics hold the cited article (the classified intent's
        first), offered as the waiting flow's question; (the task's words, quick replies) or None."""
        from router.turn.flows import caller_of

        engine = self.r.flows
        config = getattr(self.r.classifier, "config", None)
        doc = citations[0].get("doc_id") if citations else None
        if engine is None or config is None or not doc or engine.active(self.conn, str(self.conv["id"])):
            return None
        mine = self.intent_config(c)
        owners = ([mine] if mine is not None else []) + [i for i in config.intents if i is not mine]
        task = next((i.task for i in owners if i.task and i.covers(doc) and i.task in engine.workflows.workflows),
                    None)
        caller = caller_of(self.conv, turn_id=self.ctx.turn_id)
        if task is None or caller is None:
            return None
        lang = self.lang if self.lang in ("zh", "en") else "en"
        with self.stage("workflow"):
            t = engine.offer(self.conn, task, caller, self.text, c.entities or {}, lang=lang)
        self.flow = t.as_response()
        self.trace["offer"] = {"workflow": task, "instance_id": t.instance_id}
        wf = engine.workflows.workflows[task]
        return (wf.description.get(lang) or wf.description.get("en") or task), t.quick_replies

    def assist_l2(self, c, decision: Decision, *, via: str, answer=None, reason: str | None = None,
                  retrieve: bool = True) -> TurnResult:
        if answer is None and via == "classifying" and retrieve:
            answer = self.retrieve()
        self.move("l2_assisting", reason or f"intent {c.intent or 'unknown'}")
        evidence = [_hit_dict(h) for h in (answer.passages if answer else [])[:EVIDENCE_LIMIT]]
        draft = {
            # the composed answer (rag/compose.py), also when it was not confident enough to send: the agent
            # reviews the same text the bot would have sent; else the best passage
            "text": (answer.text if answer and answer.text else getattr(answer, "draft", None) if answer
                     and getattr(answer, "draft", None) else (evidence[0]["text"] if evidence and
                                                               "text" in evidence[0] else None)),
            "citations": _citations(answer.citations) if answer else [],
            "passages": evidence[:3],
            "intent": c.intent,
            "proposed_action": f"reply to {c.intent or 'the question'} with the draft",
        }
        ticket_id = self.open_ticket("assist", decision, reason=reason or f"intent {c.intent or 'unknown'} needs "
                                     "a reviewed answer", priority="normal", classification=c, evidence=evidence,
                                     draft=draft)
        self.tag_transition(ticket_id)
        return self.result(decision, reply=self.send(self.say("ack_l2"), kind="ack"), ticket_id=ticket_id)

    def tag_transition(self, ticket_id) -> None:
        """Record the ticket on the transition that opened it (history and trace)."""
        if self.transitions and ticket_id is not None:
            last = self.transitions[-1]
            last["ticket_id"] = str(ticket_id)
            self.conn.execute("UPDATE conversation_transitions SET ticket_id = %s WHERE id = %s",
                              (str(ticket_id), last["id"]))

    def open_l3(self, decision: Decision, *, reason: str, priority: str, classification=None,
                via_classifying: bool = False) -> str | None:
        state = self.conv["state"]
        if via_classifying and state in sm.ROUTABLE:
            self.move("classifying", "harness")
        self.move("l3_queuing", reason)
        evidence = []
        if classification is not None and classification.intent is not None and classification.tier in ("L1", "L2") \
                and self.served_by(classification) is None:
            answer = self.retrieve()   # what the knowledge base says helps the agent too
            evidence = [_hit_dict(h) for h in (answer.passages if answer else [])[:EVIDENCE_LIMIT]]
        ticket_id = self.open_ticket("handoff", decision, reason=reason, priority=priority,
                                     classification=classification, evidence=evidence)
        self.tag_transition(ticket_id)
        return ticket_id

    def open_ticket(self, kind: str, decision: Decision, *, reason: str, priority: str, classification=None,
                    evidence=None, draft=None) -> str | None:
        if self.r.handoff is None:
            log.warning("no handoff service: %s ticket not opened (%s)", kind, reason)
            self.trace["ticket"] = {"kind": kind, "opened": False, "reason": reason}
            return None
        entities = (classification.entities if classification is not None else None) or {}
        amounts = entities.get("amounts") or []
        biggest = max(amounts, key=lambda a: a.get("value") or 0) if amounts else None
        context = self.context_package(decision, entities, evidence or [])
        with self.stage("handoff"):
            ticket = self.r.handoff.open_ticket(
                self.conn, kind=kind, conversation_id=str(self.conv["id"]), channel=self.conv["channel"],
                customer_id=self.conv["customer_id"], reason=reason, priority=priority, context=context,
                draft=draft, amount=biggest.get("value") if biggest else None,
                currency=biggest.get("currency") if biggest else None, notes=self.queue_notes())
        self.trace["ticket"] = {"kind": kind, "id": str(ticket["id"]), "priority": priority, "reason": reason}
        return ticket["id"]

    def context_package(self, decision: Decision, entities: dict[str, Any], evidence: list[dict]) -> dict[str, Any]:
        """What the agent sees: transcript, the trail of decisions, evidence, known facts (never invented)."""
        rows = self.conn.execute(   # the recent transcript and decision trail in one round trip
            """
            SELECT 'm' AS part, id AS ord, NULL::uuid AS turn_id, direction, sender, text, NULL AS state,
                   NULL::jsonb AS decision, received_at AS at
              FROM (SELECT * FROM messages WHERE conversation_id = %(c)s ORDER BY id DESC LIMIT %(nm)s) m
            UNION ALL
            SELECT 't', NULL, id, NULL, NULL, NULL, state, decision, created_at
              FROM (SELECT * FROM turns WHERE conversation_id = %(c)s ORDER BY created_at DESC LIMIT %(nt)s) t
            """,
            {"c": self.conv["id"], "nm": TRANSCRIPT_LIMIT, "nt": TRAIL_LIMIT}).fetchall()
        transcript = sorted((r for r in rows if r["part"] == "m"), key=lambda r: r["ord"])
        trail = sorted((r for r in rows if r["part"] == "t"), key=lambda r: r["at"])
        return {
            "conversation": {"id": str(self.conv["id"]), "channel": self.conv["channel"],
                             "external_id": self.conv["external_id"], "session_no": self.conv["session_no"]},
            "customer": {"customer_id": self.conv["customer_id"],
                         "do_not_contact": bool(self.flags.get("do_not_contact")),
                         "sensitive": bool(self.flags.get("sensitive")),
                         "order_numbers": entities.get("order_numbers") or [],
                         "amounts": entities.get("amounts") or []},
            "transcript": [{"message_id": m["ord"], "direction": m["direction"], "sender": m["sender"],
                            "text": m["text"], "at": m["at"].isoformat()} for m in transcript],
            "decisions": [{"turn_id": str(t["turn_id"]), "state": t["state"], "decision": t["decision"],
                           "at": t["at"].isoformat()} for t in trail]
                         + [{"turn_id": None, "state": self.conv["state"],
                             "decision": decision.model_dump(mode="json")}],
            "evidence": evidence,
            "escalation": decision.escalation.model_dump() if decision.escalation else None,
            "harness": self.trace.get("harness"),
            "transitions": list(self.transitions),
            "memory": self.session_memory(),
            "tool_calls": self.tool_calls(),
        }

    def session_memory(self) -> dict[str, Any] | None:
        """The customer's profile, recent orders and earlier outcomes (the workflows' session memory), if wired."""
        from automation.workflows.outside import CallPending
        from router.turn.flows import caller_of

        engine = self.r.flows
        caller = caller_of(self.conv) if engine is not None else None
        if caller is None:
            return None
        try:
            with self.conn.transaction():   # a savepoint: a failure here never spoils the turn
                return engine.memory(self.conn, caller, self.lang if self.lang in ("zh", "en") else "en")
        except CallPending:
            raise   # its tools run outside the transaction; the turn's next pass has the memory
        except Exception:  # noqa: BLE001 - memory is a courtesy to the agent, never a reason to lose the ticket
            log.exception("session memory could not be loaded for the context package")
            return None

    def tool_calls(self) -> list[dict[str, Any]]:
        """The conversation's recent tool calls as audited (redacted): tool, status, latency, attempts, data,
        the error of a failed one; read on the turn's connection, which sees the committed audit rows."""
        engine = self.r.flows
        if engine is None:
            return []
        from automation.tools.audit import calls_for_conversation, summarise

        flush = getattr(engine.tools, "flush_audit", None)
        if flush is not None:
            flush(2.0)   # this turn's reads are written by the audit thread: wait for them
        try:
            with self.conn.transaction():   # a savepoint: a failed read must not abort the turn
                rows = calls_for_conversation(self.conn, str(self.conv["id"]), limit=TOOL_CALL_LIMIT)
        except Exception:  # noqa: BLE001 - the ticket opens without them
            log.exception("the tool calls of the context package could not be read")
            return []
        return [{**c, "this_turn": c.get("turn_id") == self.ctx.turn_id} for c in summarise(rows)]
