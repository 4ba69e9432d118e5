"""The turn's record: one message's trip through the router, and what every tier action does with it.

A state move (history and trace), a reply queued in the turn's transaction, a metric counted once the turn
commits, the decision and the result; the classification (once per turn) and the intent it names.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Container, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, cast

from prometheus_client import Counter

from automation.workflows.listening import OWN, Listening
from automation.workflows.understand import drops_task, only_consents, said_after_dropping
from automation.workflows.runtime import Restart
from automation.workflows.store import Flows, Instance
from rag.types import Answer, Hit
from router.classify.base import Classification
from router.classify.intents import Intent
from router.outbox.store import enqueue_outbound
from router.schemas import Decision, Escalation
from router.telemetry.metrics import Metrics
from router.turn import language, plan
from router.turn import state as sm
from router.turn.escalation import EscalationPolicy, EscalationVerdict, Policy
from router.turn.guards import Harness
from router.turn.passes import per_turn
from router.turn.pipeline import TurnContext, TurnResult
from router.turn.ports import ClassifierPort, Conn, EncoderPort, FlowsPort, HandoffPort, KnowledgePort
from text.form import tells_a_problem

log = logging.getLogger(__name__)


EVIDENCE_LIMIT = 5


class Wiring(Protocol):
    """What a turn reads of its decider (router.turn.decider.Decider): the policy and the ports."""

    policy: Policy
    harness: Harness
    escalation: EscalationPolicy
    classifier: ClassifierPort
    rag: KnowledgePort | None
    handoff: HandoffPort | None
    encoder: EncoderPort | None
    metrics: Metrics | None
    flows: FlowsPort | None
    workflows: Container[str] | None


def hit_dict(hit: Hit) -> dict[str, Any]:
    chunk = getattr(hit, "chunk", None)
    d: dict[str, Any] = {"chunk_id": hit.chunk_id, "score": round(float(hit.score), 4), "rank": hit.rank,
                         "scores": {k: round(float(v), 4) for k, v in (hit.scores or {}).items()}}
    if chunk is not None:
        d.update({"doc_id": chunk.doc_id, "title": chunk.title, "section": chunk.section, "lang": chunk.lang,
                  "source": chunk.source, "text": chunk.text})
    return d


def citations_of(citations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("doc_id", "chunk_id", "title", "section", "source", "score")
    return [{k: c.get(k) for k in keys if c.get(k) is not None} for c in citations if c.get("doc_id")]


def served_by(intent: Intent | None, c: Classification) -> tuple[str, str] | None:
    """What serves the classified intent: its ``serve:``, or its ``with_order`` workflow for one of the
    customer's own orders."""
    if intent is None:
        return None
    if intent.with_order and (c.entities or {}).get("order_numbers"):
        return "workflow", intent.with_order.split(" ", 1)[1]   # about one of the customer's own orders
    return intent.served_by


# The classifier's top two intents this close (head probability): "when will my refund show on my Visa?" reads as
# the customer's refund status (0.57) and as the refund-times question (0.02 behind). Measured on the bundled
# intents, lookups said plainly ("has my refund been processed?", "where is my parcel?") stand 0.5-0.8 ahead.
CLOSE_MARGIN = 0.1


def close_question(r: Wiring, c: Classification, intent: Intent | None, form: str | None) -> Intent | None:
    """The question intent a lookup of the customer's own data barely beat: a message that reads as a question,
    names no order, classified by the embeddings to an intent served by a workflow (``serve: workflow``) with an
    intent that declares knowledge-base topics CLOSE_MARGIN behind. Both readings are likely, so the knowledge
    base may answer it first and the lookup is offered after (router.turn.tiers.answers.answer_first)."""
    if (intent is None or form != "question" or c.decided_by != "embeddings" or (c.entities or {}).get("order_numbers")
            or intent.served_by is None or intent.served_by[0] != "workflow"):
        return None
    alt = _close_runner_up(r, c)
    return alt if alt is not None and alt.topics and alt.served_by is None else None


def _close_runner_up(r: Wiring, c: Classification) -> Intent | None:
    """The intent the embeddings placed second, CLOSE_MARGIN or less behind the first; None: none that close."""
    runner, margin = c.explanation.get("runner_up"), c.explanation.get("margin")
    if not runner or margin is None or float(margin) >= CLOSE_MARGIN:
        return None
    return next((i for i in r.classifier.config.intents if i.name == runner), None)


def close_lookup(r: Wiring, c: Classification, intent: Intent | None) -> str | None:
    """The other way round: the workflow of a lookup (``serve: workflow``) CLOSE_MARGIN behind the question intent
    the embeddings chose ("when will my refund show on my Visa?" as the refund-times question, the customer's own
    refund barely behind), for a message that names no order: the answer offers that lookup after it rather than
    the task of the cited article (a new refund)."""
    if (intent is None or intent.served_by is not None or not intent.topics or c.decided_by != "embeddings"
            or (c.entities or {}).get("order_numbers")):
        return None
    alt = _close_runner_up(r, c)
    if alt is None or alt.served_by is None or alt.served_by[0] != "workflow" or r.flows is None:
        return None
    flows = r.flows.workflows
    if alt.served_by[1] in flows.workflows:
        return alt.served_by[1]
    wf = flows.for_intent(alt.name)      # the bundled order_status serves refund_status, order_query, ...
    return wf.name if wf is not None else None


def plan_facts(r: Wiring, c: Classification, intent: Intent | None, text: str, *, form: str | None,
               close: Intent | None, reading: str | None = None, restart: str | None = None) -> plan.Facts:
    """What the routing plan reads of a message: the classification, the intent's declarations, the flow's
    reading and restart, the question a lookup barely beat (``close``, from close_question: the caller keeps
    it to answer first). The turn, and the look ahead of router.turn.ahead, read it the same way: what the
    message's words alone tell is read once per turn (per_turn), by whichever asks first."""
    return plan.Facts(
        intent=c.intent, tier=c.tier, decided_by=c.decided_by, served=served_by(intent, c), form=form,
        # an intent with a task of its own ("I can't change my address", "电子发票没收到") wants it done: the task
        # starts as before; a lookup's report ("delivered but I never got it") is its workflow's (plan.frame)
        problem=not (intent is not None and intent.task) and per_turn(("problem", text), lambda: tells_a_problem(text)),
        topics=bool(intent is not None and intent.topics),
        own_order=bool(intent is not None and intent.with_order and (c.entities or {}).get("order_numbers")),
        security=c.intent in r.escalation.config.security_intents,
        reading=reading, restart=restart, knowledge_base=r.rag is not None, flows=r.flows is not None,
        identity_reply=plan.IDENTITY_TEMPLATE in r.policy.replies.names(),
        drops_task=(reading is None and restart is None and plan.NEVER_MIND_TEMPLATE in r.policy.replies.names()
                    and per_turn(("drops task", text), lambda: drops_task(text))),
        clarify_unknown=r.policy.unknown == "clarify_then_escalate",
        close_question=reading is None and restart is None and close is not None,
        consents=(reading is None and restart is None and plan.CONSENT_TEMPLATE in r.policy.replies.names()
                  and per_turn(("consents", text), lambda: only_consents(text) and not _THANKS.search(text))))


_THANKS = re.compile(r"thank|thx|\bty\b|谢|多谢|感谢", re.I)   # "ok thanks": the thanks reply, not "what can I do?"


def verdict_facts(v: EscalationVerdict) -> plan.Verdict:
    """The parts of the escalation rules' verdict the routing order reads."""
    return plan.Verdict(escalate=v.escalate, rule=v.rule,
                        identity_question=bool(v.checks["human_request"].get("identity_question")),
                        dissatisfied=bool(v.checks["dissatisfied"]["signal"]),
                        low_confidence_streak=int(v.counters["low_confidence_streak"]))


class TurnBase:
    """One message's trip through the router; collects the trace as it goes."""

    def __init__(self, router: Wiring, ctx: TurnContext):
        self.r = router
        self.ctx = ctx
        # the pool opens every connection with dict rows (router.db.pool); the pipeline's type says only Connection
        self.conn = cast(Conn, ctx.conn)
        self.conv = ctx.conversation
        self.text = ctx.inbound.text
        self.message_id: int = ctx.message["id"]
        self.transitions: list[dict[str, Any]] = []
        self._moves: list[tuple[dict[str, Any], Any, bool]] = []   # taken, not yet written (flush_moves)
        self.trace: dict[str, Any] = {"transitions": self.transitions}
        self.flags: dict[str, Any] = {}
        self.rag_error: str | None = None
        self.flow: dict[str, Any] | None = None     # the workflow's part of the response
        self.listening: Listening | None = None      # the waiting flow and its reading of the message (engine.listen)
        self.restarting: Restart | None = None       # a finished flow this message starts again (engine.correcting)
        self.ended: str | None = None                # why the task that just ended did nothing (engine.ended)
        # the conversation's flows, read once per pass until one changes (a conversation this pass made has none)
        self._flows: Flows | None = Flows(new=True) if ctx.new_conversation else None
        self._notes: list[str] | None = None
        self.outcome: str | None = None
        self.asking: Intent | None = None   # the intent config whose topics answer this message (a question), if any
        self.kept_questions: list[str] = []     # questions kept beside a task that ended this turn (to a ticket)
        self.handed_over: str | None = None     # what went to a person with the ticket: said with its acknowledgement
        known = (self.conv.get("metadata") or {}).get("lang")
        self.lang = language.choose(self.text, known, router.policy.default_language)
        self.trace["lang"] = self.lang
        if self.lang != known:   # remembered for the next short message ("ok", "👍")
            self.conn.execute("UPDATE conversations SET metadata = COALESCE(metadata, '{}'::jsonb) "
                              "|| jsonb_build_object('lang', %s::text) WHERE id = %s", (self.lang, self.conv["id"]))

    def flows(self) -> Flows:
        """The conversation's flows (the active one, the most recent one, how many), read once per pass in one
        statement: settling an open offer, a message's several requests, the flow's own listening, a correction
        and a new flow's start all ask before anything changes them (``flow_moved`` forgets them)."""
        if self._flows is None:
            engine = self.r.flows
            self._flows = engine.overview(self.conn, str(self.conv["id"])) if engine is not None else Flows()
        return self._flows

    def active_flow(self) -> Instance | None:
        """The conversation's active flow (see ``flows``)."""
        return self.flows().active

    def answers_waiting_step(self, part: str) -> bool:
        """Whether the conversation's waiting flow takes ``part`` of a message (a few characters: "yes", "no", "好",
        "50") as its own (its answer or a change of mind, as ``flow_part`` reads the parts): a part beside a question
        ("yes, and how long will it take to reach my card?"). With no flow waiting a short part is no request of its
        own (router.classify.segments)."""
        engine, active = self.r.flows, self.active_flow()
        if engine is None or active is None or active["status"] != "waiting":
            return False
        with self.stage("workflow"):
            return engine.read(active, part) in OWN

    def flow_moved(self) -> None:
        """This pass changed the conversation's flows: the next ``flows`` reads them again."""
        self._flows = None

    @property
    def flow_lang(self) -> str:
        """The language a workflow speaks in this turn (the engine's texts are English and Chinese)."""
        return self.lang if self.lang in ("zh", "en") else "en"

    def queue_notes(self) -> list[str]:
        """Where the handoff queue's notifications of this turn collect; sent once the turn has committed."""
        if self._notes is None:
            notes: list[str] = []
            self._notes = notes
            handoff = self.r.handoff
            assert handoff is not None, "queue notes are taken only where a handoff service is wired"
            self.ctx.after_commit.append(lambda conn: handoff.publish(conn, notes))
        return self._notes

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self.ctx.timings[name] = self.ctx.timings.get(name, 0.0) + dt
            if self.r.metrics is not None and name in ("harness", "retrieval", "handoff"):
                self.r.metrics.stage_seconds.labels(name).observe(dt)

    def move(self, to_state: str, reason: str, ticket_id: Any = None, *, counted: bool = True) -> None:
        """Move the conversation (the edge is checked now); written with the turn's other moves by
        :meth:`flush_moves`: a turn usually takes two or three edges, and one statement writes them all."""
        from_state = self.conv["state"]
        sm.check_transition(from_state, to_state)
        edge = {"from": from_state, "to": to_state, "reason": reason, "id": None}
        self._moves.append((edge, ticket_id, counted))
        self.conv["state"] = to_state
        self.transitions.append(edge)

    def flush_moves(self) -> None:
        """Write the moves taken since the last flush (state, history, loop-guard counts) in one statement. Called
        before anything that reads what they write (the counters, a transition's id, a ticket's context) and when
        the turn ends; the conversation's row is the turn's (locked) until it commits."""
        if not self._moves:
            return
        moves, self._moves = self._moves, []
        ids = sm.move_along(self.conn, self.conv["id"], [(e["from"], e["to"], e["reason"], t, c) for e, t, c in moves],
                            message_id=self.message_id)
        if ids is None:
            raise RuntimeError(f"conversation {self.conv['id']} is no longer in state {moves[0][0]['from']!r}")
        for (edge, _, _), moved in zip(moves, ids, strict=True):
            edge["id"] = moved

    def say(self, key: str) -> str:
        """The policy's reply template ``key`` in this turn's language."""
        return self.r.policy.reply(key, self.lang)

    def send(self, text: str, *, kind: str = "reply", citations: list[dict[str, Any]] | None = None,
             suggestions: list[str] | None = None) -> dict[str, Any] | None:
        """Queue ``text`` to the customer (transcript + outbox, this transaction); the webhook's reply.

        ``suggestions`` are quick replies: the channel senders render them (buttons, keyboards, JSON). The
        acknowledgement of a ticket (``kind`` "ack") also says what else went to the person with it."""
        if kind == "ack" and self.handed_over:
            text, self.handed_over = f"{text}\n\n{self.handed_over}", None
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

    def count(self, metric: Counter) -> None:
        """Increment ``metric`` once the turn commits (a rolled-back pass or attempt counts nothing)."""
        self.ctx.after_commit.append(lambda _conn: metric.inc())

    def result(self, decision: Decision, *, reply: dict[str, Any] | None = None,
               ticket_id: Any = None) -> TurnResult:
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

    def decision_of(self, c: Classification, tier: str | None, esc: Escalation | None, **extra: Any) -> Decision:
        return Decision(intent=c.intent, tier=tier, confidence=round(float(c.confidence), 4), channel=c.decided_by,
                        explanation={**c.explanation, **extra}, escalation=esc)

    # -- the classification --

    def classify(self) -> Classification:
        with self.stage("classify"):   # once per turn: a later pass (after its tool calls) reuses it
            c: Classification = per_turn(("classify", self.text), lambda: self.r.classifier.classify(self.text))
        if c.decided_by == "embeddings" and self.r.metrics is not None:   # the rules path: see Pipeline
            self.r.metrics.stage_seconds.labels("embedding").observe(self.ctx.timings["classify"])
        self.note_classification(c)
        return c

    def heard(self, c: Classification) -> Classification:
        """What a waiting flow hears the message as: its classification ``c``, or, when the message opens by
        dropping the task and goes on ("算了还是不取消了，帮我查一下大米到哪了", "never mind, don't cancel it - where is
        my lamp?"), the classification of what follows the drop alone. The drop's words blur the whole message's
        (a lookup at 0.46 said whole, 0.86 without them); what follows tells the flow a request of its own, served
        once the task is dropped, from another of its options picked again ("算了，换成另一个订单吧")."""
        rest = said_after_dropping(self.text)
        if not rest:
            return c
        then = self.classify_after_drop(rest)
        self.trace["after_drop"] = {"text": rest, "intent": then.intent, "confidence": round(float(then.confidence), 4)}
        return then

    def classify_after_drop(self, rest: str) -> Classification:
        """What follows a drop (``rest``), classified alone, once per turn (the waiting flow hears it, the router then
        serves it), with the evidence of intents that lead to one task pooled (``task_pools``): said alone, "where is
        my lamp?" splits its evidence between order_query and shipping_status (0.36 and 0.15 by the head, no intent
        either way), both the order lookup; pooled, the lookup is what it asks for."""
        pools = self.task_pools()
        with self.stage("classify"):
            then: Classification = per_turn(("classify after a drop", rest),
                                            lambda: self.r.classifier.classify(rest, pools=pools))
        return then

    def task_pools(self) -> list[list[str]]:
        """The intents that lead to one workflow, per workflow with more than one (none without workflows)."""
        engine = self.r.flows
        if engine is None:
            return []
        return [list(wf.intents) for wf in engine.workflows.workflows.values() if len(wf.intents) > 1]

    def note_classification(self, c: Classification) -> None:
        self.trace["classification"] = {"intent": c.intent, "tier": c.tier, "confidence": round(c.confidence, 4),
                                        "decided_by": c.decided_by, "entities": c.entities}

    def save_verdict(self, verdict: EscalationVerdict) -> None:
        self.trace["escalation"] = {"rule": verdict.rule, "checks": verdict.checks}
        self.flush_moves()
        sm.save_counters(self.conn, self.conv["id"], **verdict.counters)

    def intent_config(self, c: Classification) -> Intent | None:
        return self.r.classifier.config.intent(c.intent) if c.intent else None

    def served_by(self, c: Classification) -> tuple[str, str] | None:
        return served_by(self.intent_config(c), c)

    def retrieve(self, prefer: Callable[[str], bool] | None = None) -> Answer | None:
        """The knowledge base's answer to the turn's text; ``prefer``: the articles the classifier's intent
        names as its topics, which lead when retrieval ranks them close to the best (rag.service.preferred_first)."""
        if self.r.rag is None:
            return None
        with self.stage("retrieval"):
            try:
                answer = self.r.rag.answer(self.text) if prefer is None else self.r.rag.answer(self.text,
                                                                                             prefer=prefer)
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
