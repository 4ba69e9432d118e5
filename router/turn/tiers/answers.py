"""The bot's own answers: L1 from the knowledge base, L2 drafts for an agent, small talk, clarify.

- L1: the knowledge base answers with citations (reply + outbox); no confident answer -> L2. A question of an
  intent that declares ``topics`` is answered from its best passage when retrieval and the classifier agree on
  the topic; when an intent's ``task`` covers the cited article the answer offers it (the waiting flow reads a
  "yes" to the offer like any answer to the bot's own question).
- L2: an assist ticket with a draft built from the best evidence; a human approves it.
- Several requests in one message: the questions are answered first, in order, then the remaining request
  (the workflow side does lookups beside it and keeps a second task for when it ends).
- A question asked beside an answer to the waiting flow ("不用了，谢谢你，我还想问下退货运费" at the optional tax id) is
  answered from the knowledge base before the flow's next question when it is confident; else it is kept on the
  task and routed as its own request when the task ends (the reply says so).
- Small talk (``serve: reply <template>``) from the policy's templates; out of scope: clarify once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rag.types import Answer
from router.classify.base import Classification
from router.classify.intents import Intent
from router.schemas import Decision
from router.turn import plan
from router.turn.passes import per_turn
from router.turn.pipeline import TurnResult
from router.turn.tiers.base import EVIDENCE_LIMIT, citations_of, close_lookup, hit_dict
from router.turn.tiers.tickets import Tickets
from text.form import asks_why, read_form, tells_a_problem

log = logging.getLogger(__name__)

# A question of an intent with topics that the knowledge base declines: when its best passage is from one of the
# intent's own articles (the classifier and retrieval agree on the topic) and the knowledge base's confidence is
# at least this, the passage answers it. Below it retrieval has not found the topic (unanswerable questions of
# the routing set score 0.07-0.14; answerable ones 0.26-0.56 on the bundled pack).
TOPIC_AGREEMENT_FLOOR = 0.25
TOPIC_AGREEMENT_INTENT = 0.6   # ... and the classifier is at least this sure of the intent (both signals agree)
# A short follow-up to a task just done ("能快点吗", "can you make it faster?" after an order's status), read with the
# words of what the task was about (the workflow's ``about``): the knowledge base's best passage answers it when it is
# from the articles of that task's topics and its confidence reaches this (the conversation names the topic, as the
# classifier's agreement does for TOPIC_AGREEMENT_FLOOR; on the bundled pack such follow-ups score 0.22-0.76, a
# follow-up on another topic's words ranks another article first).
FOLLOW_UP_FLOOR = 0.2
# ... and only when the classifier, which places it nowhere, still hears the task's topic in it: one of the task's
# intents among its nearest examples, and it does not hold the message out of scope (p_oos below this). On the bundled
# intents "can you make it faster?", "为什么这么慢", "why is it so slow?" score p_oos 0.29, 0.44, 0.56 with shipping
# intents nearest; "what about the weather" 0.58 (small talk nearest), "tell me a joke", "今天天气怎么样" 0.87-0.94.
FOLLOW_UP_OOS = 0.6
FOLLOW_UP_WINDOW_SECONDS = 1800.0   # the task must have ended this recently (the engine's focus window)
FOLLOW_UP_WORDS = 8                 # at most this many words (or twice as many CJK characters): it leans on context
# The classifier's confidence at which its intent's topic articles are retrieval's prior (a passage of theirs close
# behind the best leads, rag.service.preferred_first): damage told in a sentence ("the screen is cracked on
# arrival", "快递到了盒子都压坏了") is damaged_item at 0.78-0.99; the routing set's questions answered from another
# intent's article than the classified one's are classified at most 0.71 ("is cash on delivery possible?": shipping
# 0.705, answered from the payment methods; "东西坏了怎么申请保修": damaged_item 0.673, answered from the warranty).
TOPIC_PRIOR_INTENT = 0.75
# A question of an intent whose task the bot does ("毛巾能开个发票吗", "the boots are too small, can I return them?")
# that the knowledge base cannot answer: when the classifier is at least this sure of the intent, the task is
# offered instead of a colleague being asked (the same bar as a topic answer's: an offer does nothing before a
# yes, so it needs no surer reading than an answer does); a question it barely places goes to a person as before.
OFFER_INSTEAD_INTENT = TOPIC_AGREEMENT_INTENT


@dataclass(frozen=True)
class FlowPart:
    """Which one of a message's several parts the waiting flow takes (``flow_part``), a value handed on to the
    turn's routing rather than a flag left on the turn. ``index``: the part the flow takes; None with ``others``:
    no part is the flow's (each is another request or a question, served as when no flow waits); None without:
    the flow reads the whole message as one (more than one part is its, or it cannot tell)."""

    index: int | None = None
    restated: bool = False   # the part only asks for the flow's own task again: no failed try, the step asks again
    others: bool = False


def _joined(reply: dict[str, Any] | None, other: dict[str, Any] | None, *, first: bool) -> dict[str, Any] | None:
    """The webhook's one reply for two sent one after the other: ``other`` before ``reply`` (``first``) or after it,
    one text and the citations of both, ``reply``'s own suggestions and language kept."""
    if other is None:
        return reply
    if reply is None:
        return other
    order = (other, reply) if first else (reply, other)
    return {**reply, "text": "\n\n".join(r["text"] for r in order),
            "citations": [c for r in order for c in r.get("citations") or []]}


class Answers(Tickets):
    """The turn's answering side: L1, L2, the tier chosen for a message, and the template replies."""

    def route_tier(self, c: Classification, planned: str) -> TurnResult:
        if planned == "L1":
            return self.answer_l1(c)
        if planned == "L2":
            return self.assist_l2(c, self.decision_of(c, "L2", None), via="classifying")
        priority = self.r.escalation.config.intent_priorities.get(c.intent or "", "normal")
        decision = self.decision_of(c, "L3", None)
        ticket_id = self.open_l3(decision, reason=f"intent {c.intent or 'unknown'} is handled by a person",
                                 priority=priority, classification=c)
        return self.result(decision, reply=self.send(self.say("ack_l3"), kind="ack"), ticket_id=ticket_id)

    # -- L1 --

    def answer_l1(self, c: Classification) -> TurnResult:
        self.move("l1_resolving", f"intent {c.intent}")
        prior = self.topic_prior(c)
        answer = self.retrieve(prefer=prior.covers if prior is not None else None)
        text: str | None = None
        citations: list[dict[str, Any]] = []
        agreed = False
        if answer is not None and answer.answered and answer.text:
            text, citations = answer.text, citations_of(answer.citations)
        elif answer is not None and (self.asking or prior) is not None:
            text, citations = self.topic_answer(c, answer, self.asking or prior)
            agreed = text is not None
        if text and answer is not None:
            return self.answered(c, answer, text, citations, topic_agreement=agreed,
                                 task=close_lookup(self.r, c, self.intent_config(c)))
        why = (self.rag_error or "no knowledge base") if answer is None else (answer.reason or "no confident answer")
        offered = self.offer_instead(c, why) if answer is not None else None
        if offered is not None:
            return offered
        decision = self.decision_of(c, "L2", None, l1_fallback={"from": "L1", "reason": why})
        return self.assist_l2(c, decision, via="l1_resolving", answer=answer, reason=f"L1 could not answer: {why}")

    def answered(self, c: Classification, answer: Answer, text: str, citations: list[dict[str, Any]], *,
                 topic_agreement: bool = False, task: str | None = None) -> TurnResult:
        """Send the knowledge base's answer (the task offered after it, see offer_task) and resolve at L1."""
        offer = self.offer_task(c, citations, task=task)
        if offer is not None:
            text = f"{text}\n\n{self.say('offer_task').format(task=offer[0])}"
        reply = self.send(text, kind="reply", citations=citations, suggestions=offer[1] if offer else None)
        self.move("l1_resolved", "answered_from_kb")
        if self.r.metrics is not None:
            self.count(self.r.metrics.l1_resolved)
        facts: dict[str, Any] = {"confidence": round(float(answer.confidence), 4)}
        if topic_agreement:
            facts["topic_agreement"] = True
        decision = self.decision_of(c, "L1", None, answer=facts)
        return self.result(decision, reply=reply)

    def offer_instead(self, c: Classification, why: str) -> TurnResult | None:
        """A question the knowledge base cannot answer, of an intent whose task the bot does for the customer
        ("毛巾能开个发票吗", "can I get an invoice for the hose order?", "the boots I ordered are too small, can I
        return them?"): the customer wants it done more than explained, so the task is offered (a "yes" starts it)
        rather than a colleague asked to answer. Not when it asks why ("why was my refund only partial?"), tells of
        something failing ("my coupon doesn't work": a person looks), or the classifier is unsure of the intent;
        None: the ticket as before. A reason given beside the question ("it's the wrong colour, can I return it?")
        is why the customer wants the task, not a report for a person."""
        intent = self.asking
        if (intent is None or not intent.task or float(c.confidence) < OFFER_INSTEAD_INTENT
                or read_form(self.text) != "question" or asks_why(self.text)
                or per_turn(("problem", self.text), lambda: tells_a_problem(self.text))):
            return None
        offer = self.offer_task(c, [], task=intent.task)
        if offer is None:
            return None
        reply = self.send(self.say("offer_task").format(task=offer[0]), kind="reply", suggestions=offer[1])
        self.trace["offered_instead"] = {"workflow": intent.task, "reason": why}
        self.move("l1_resolved", "task_offered")
        decision = self.decision_of(c, "L1", None, offered_instead={"task": intent.task, "reason": why})
        return self.result(decision, reply=reply)

    def answer_first(self, c: Classification, question: Intent, lookup: str | None) -> TurnResult | None:
        """A lookup the classifier barely preferred to ``question`` (router.turn.tiers.base.close_question),
        answered from the knowledge base when it answers confidently from one of that intent's articles, the
        lookup offered after it ("Card refunds take 3–7 business days … Would you like me to help with one of your
        orders (order status)?"); None: the lookup runs as planned."""
        answer = self.retrieve()
        if answer is None or not answer.answered or not answer.text:
            return None
        citations = citations_of(answer.citations)
        if not citations or not question.covers(str(citations[0]["doc_id"])):
            return None
        self.trace["answer_first"] = {"lookup": c.intent, "question": question.name,
                                      "margin": c.explanation.get("margin")}
        self.asking = question
        self.move("classifying", "message")
        self.move("l1_resolving", f"intent {question.name}")
        return self.answered(c, answer, answer.text, citations, task=lookup)

    def follow_up(self, c: Classification) -> TurnResult | None:
        """A short message placed nowhere on its own, right after a task ended done ("where is my order 100241?" ->
        "...shipped" -> "can you make it faster?" / "能快点吗"), read in that task's context rather than clarified:
        answered from the knowledge base's articles on the task's topics (the intents whose task or lookup it is),
        retrieved with the message and the task's ``about`` words; else, when the task was about an order, what
        cannot be done for it here and who can help. None: the message is not such a follow-up (clarify as before)."""
        import time

        engine, flows = self.r.flows, self.flows()
        last = flows.last
        if engine is None or flows.active is not None or last is None or last["status"] != "completed" \
                or last.get("outcome") not in ("completed", "already_done", None) or not _leans_on_context(self.text) \
                or (c.entities or {}).get("order_numbers") \
                or time.time() - last["updated_at"].timestamp() > FOLLOW_UP_WINDOW_SECONDS:
            return None
        wf = engine.workflows.workflows.get(last["workflow"])
        if wf is None:
            return None
        topics = [i for i in self.r.classifier.config.intents if i.topics and (
            i.task == wf.name or i.name in wf.intents or i.served_by == ("workflow", wf.name))]
        if not _hears_topic(c, {*wf.intents, *(i.name for i in topics)}):
            return None
        about = wf.about.get(self.flow_lang) or ""
        context: dict[str, Any] = {"workflow": wf.name, "about": about, "topics": [i.name for i in topics]}
        self.trace["follow_up"] = context
        answer = None
        if topics and about and self.r.rag is not None:
            query = f"{self.text} {about}"
            with self.stage("retrieval"):
                try:
                    answer = self.r.rag.answer(query, prefer=lambda doc: any(i.covers(doc) for i in topics))
                except Exception:  # noqa: BLE001 - the follow-up is then answered as the knowledge base cannot
                    log.exception("knowledge base failed on a follow-up")
            best = answer.passages[0] if answer is not None and answer.passages else None
            chunk = getattr(best, "chunk", None)
            if answer is not None and chunk is not None and any(i.covers(chunk.doc_id) for i in topics) \
                    and (answer.answered or float(answer.confidence) >= FOLLOW_UP_FLOOR):
                text = (answer.text if answer.answered else None) or getattr(answer, "draft", None) \
                    or self.extractive(chunk.text, query)
                if text:
                    context["answered"] = True
                    self.settled_in_context()
                    self.move("classifying", "message")
                    self.move("l1_resolving", f"follow-up to {wf.name}")
                    citations = citations_of(answer.citations if answer.answered else answer.citations[:1])
                    return self.answered(c, answer, text, citations)
        order = next((str(v) for k, v in (last.get("slots") or {}).items() if v is not None and k in wf.slots
                      and wf.slots[k].validate.get("entity") == "order_id"), None)
        if order is None:
            return None
        context["answered"] = False
        self.settled_in_context()
        reply = self.send(self.say("follow_up_order").replace("{order}", order), kind="reply")
        return self.result(self.decision_of(c, "L1", None, served="follow_up"), reply=reply)

    def settled_in_context(self) -> None:
        """A message understood in the conversation's context is no unclear turn: the low-confidence run ends."""
        from router.turn import state as sm

        sm.save_counters(self.conn, self.conv["id"], low_confidence_streak=0)

    def topic_prior(self, c: Classification) -> Intent | None:
        """The intent whose topic articles retrieval prefers for this message: the question's intent, else the
        classified one, when the knowledge base serves it (L1) with topics and the classifier reaches
        TOPIC_PRIOR_INTENT; else None. An assist intent's topics are some of the articles that answer it, not all
        ("my coupon doesn't work" is technical_issue, answered from the coupons' entry, not its payment articles)."""
        intent = self.asking or self.intent_config(c)
        if (intent is None or not intent.topics or intent.tier != "L1"
                or float(c.confidence) < TOPIC_PRIOR_INTENT):
            return None
        return intent

    def topic_answer(self, c: Classification, answer: Answer,
                     asking: Intent | None) -> tuple[str | None, list[dict[str, Any]]]:
        """A declined answer to a message whose intent (``asking``) declares topics: its best passage (one of
        those articles' when retrieval preferred them) answers when it is from one of those articles, the
        knowledge base's confidence reaches TOPIC_AGREEMENT_FLOOR and the classifier's TOPIC_AGREEMENT_INTENT;
        else (None, [])."""
        passages = answer.passages or []
        best = passages[0] if passages else None
        chunk = getattr(best, "chunk", None)
        if (chunk is None or asking is None or float(answer.confidence) < TOPIC_AGREEMENT_FLOOR
                or float(c.confidence) < TOPIC_AGREEMENT_INTENT or not asking.covers(chunk.doc_id)):
            return None, []
        text = getattr(answer, "draft", None) or self.extractive(chunk.text)
        if not text:
            return None, []
        self.trace.setdefault("rag", {})["topic_agreement"] = {"doc_id": chunk.doc_id, "intent": asking.name}
        return text, citations_of(answer.citations[:1])

    def extractive(self, passage: str, question: str | None = None) -> str | None:
        """The knowledge base's own extractive answer from ``passage`` (the sentences with the question's words;
        ``question``: the turn's text unless given)."""
        from rag.answer import extract

        kb = self.r.rag
        if kb is None:
            return None
        try:
            rw = kb.rewriter.rewrite(question or self.text)
            return extract(passage, [*rw.keywords, *rw.expansions], kb.tokenizer) or None
        except Exception:  # noqa: BLE001 - no extractive answer: the question goes to a person as before
            log.exception("extractive answer failed")
            return None

    def offer_task(self, c: Classification, citations: list[dict[str, Any]],
                   task: str | None = None) -> tuple[str, list[str]] | None:
        """After an answer: ``task``, else the task of the intent whose topics hold the cited article (the
        classified intent's first), offered as the waiting flow's question; (the task's words, quick replies) or
        None."""
        from router.turn.flows import caller_of

        engine = self.r.flows
        config = self.r.classifier.config
        doc = citations[0].get("doc_id") if citations else None
        if engine is None or not (doc or task) or self.trace.get("queued") or self.trace.get("kept_question") \
                or self.active_flow() is not None:
            return None   # a task kept this turn starts next instead; a question said in passing gets its answer
        mine = self.intent_config(c)
        owners = ([mine] if mine is not None else []) + [i for i in config.intents if i is not mine]
        if task is not None and task not in engine.workflows.workflows:
            return None
        if task is None:
            task = next((i.task for i in owners if i.task and i.covers(doc) and i.task in engine.workflows.workflows),
                        None)
        caller = caller_of(self.conv, turn_id=self.ctx.turn_id)
        if task is None or caller is None:
            return None
        if engine.done_lately(self.conn, str(self.conv["id"]), task, self.text, c.entities or {}):
            self.trace["offer"] = {"workflow": task, "skipped": "done_lately"}
            return None   # its result was given in this conversation a moment ago: no need to offer it again
        lang = self.flow_lang
        with self.stage("workflow"):
            t = engine.offer(self.conn, task, caller, self.text, c.entities or {}, lang=lang, intent=c.intent)
        self.flow_moved()
        self.flow = t.as_response()
        self.trace["offer"] = {"workflow": task, "instance_id": t.instance_id}
        wf = engine.workflows.workflows[task]
        return (wf.description.get(lang) or wf.description.get("en") or task), t.quick_replies

    # -- L2 --

    def assist_l2(self, c: Classification, decision: Decision, *, via: str, answer: Answer | None = None,
                  reason: str | None = None, retrieve: bool = True) -> TurnResult:
        if answer is None and via == "classifying" and retrieve:
            answer = self.retrieve()
        self.move("l2_assisting", reason or f"intent {c.intent or 'unknown'}")
        evidence = [hit_dict(h) for h in (answer.passages if answer else [])[:EVIDENCE_LIMIT]]
        draft = {
            # the composed answer (rag/compose.py), also when it was not confident enough to send: the agent
            # reviews the same text the bot would have sent; else the best passage
            "text": (answer.text if answer and answer.text else getattr(answer, "draft", None) if answer
                     and getattr(answer, "draft", None) else (evidence[0]["text"] if evidence and
                                                               "text" in evidence[0] else None)),
            "citations": citations_of(answer.citations) if answer else [],
            "passages": evidence[:3],
            "intent": c.intent,
            "proposed_action": f"reply to {c.intent or 'the question'} with the draft",
        }
        ticket_id = self.open_ticket("assist", decision, reason=reason or f"intent {c.intent or 'unknown'} needs "
                                     "a reviewed answer", priority="normal", classification=c, evidence=evidence,
                                     draft=draft)
        self.tag_transition(ticket_id)
        return self.result(decision, reply=self.send(self.say("ack_l2"), kind="ack"), ticket_id=ticket_id)

    # -- several requests in one message --

    def serve_other_requests(self) -> tuple[tuple[list[dict[str, Any]], Classification] | None, FlowPart]:
        """Several requests in one message (router.classify.segments): each question the knowledge base answers
        is answered now and each other task that only reads is done now (:meth:`serve_beside`), in the message's
        order, and the turn goes on with the main request (``self.text`` becomes it: its own words only, so
        "退款订单100234，另外查一下订单100235的物流" refunds 100234). Returns (the replies sent and the main request's
        classification, or None when the message is one request or its parts are not all requests the bot can
        place; the part a waiting flow takes, whose ``restated`` the turn's routing reads even when the message
        stays whole)."""
        from router.classify.segments import split_requests

        engine = self.r.flows
        if self.r.rag is None:
            return None, FlowPart()
        waiting = engine is not None and self.active_flow() is not None
        parts = split_requests(self.text, asks=self.asks_for_something, answers=self.answers_waiting_step)
        if len(parts) < 2:
            return None, FlowPart()
        with self.stage("classify"):
            placed = [(p, self.r.classifier.classify(p)) for p in parts]
        if waiting:
            mine = self.flow_part(placed)
            if not mine.others:
                return self.questions_beside_flow(placed, mine), mine
        return self.requests_beside(placed, waiting=waiting), FlowPart()

    def requests_beside(self, placed: list[tuple[str, Classification]], *, waiting: bool
                        ) -> tuple[list[dict[str, Any]], Classification] | None:
        """No flow waits, or none of the parts is the waiting flow's ("查订单100270的物流，另外退货运费谁出？" at "which
        order should be refunded?"): the questions answered, the main request served (a digression of the flow).
        (The replies sent, the main request's classification), or None (see :meth:`serve_other_requests`)."""
        parts = [p for p, _ in placed]
        if any(x.intent is None for _, x in placed) or len({x.intent for _, x in placed}) < 2:
            return None
        if any(self.r.escalation.asks_for_person(p) for p in parts):
            return None
        kinds = []
        for p, x in placed:
            served = self.served_by(x)
            kinds.append("talk" if served is not None and served[0] == "reply" else
                         "question" if x.tier == "L1" and served is None and not self.asks_for_task(p, x)
                         else "request")
        questions = [i for i, k in enumerate(kinds) if k == "question"]
        requests = [i for i, k in enumerate(kinds) if k == "request"]
        if not questions and len(requests) < 2:
            return None
        main = self.main_request(placed, requests) if requests else questions[0]
        others = [i for i in requests if i != main]
        if waiting and others:
            return None   # one request at a time beside a waiting flow: it is the flow's digression
        if others and not self.can_serve_beside([placed[i][1] for i in others], placed[main][1]):
            return None
        answered: dict[int, Answer] = {}
        for i in questions:
            if i == main:
                continue
            answer = self.confident_answer(parts[i], failed="one request of several")
            if answer is None:
                return None   # not confidently answerable: the whole message goes the usual way (a person may look)
            answered[i] = answer
        answers = []
        for i in range(len(parts)):
            if i in answered:
                sent = self.send(answered[i].text or "", kind="reply", citations=citations_of(answered[i].citations))
            elif i in others:
                sent = self.serve_beside(parts[i], placed[i][1], placed[main][1])
            else:
                continue
            if sent is not None:
                answers.append(sent)
        self.trace["requests"] = [{"text": p, "intent": x.intent, "kind": k, "main": i == main}
                                  for i, ((p, x), k) in enumerate(zip(placed, kinds))]
        self.text = parts[main]
        return answers, placed[main][1]

    def questions_beside_flow(self, placed: list[tuple[str, Classification]], mine: FlowPart
                              ) -> tuple[list[dict[str, Any]], Classification] | None:
        """Several requests while a flow waits ("50，另外退款多久到账？" at the amount, "我要退款，还有发票怎么开？" at
        "which order?"): each question the knowledge base answers with confidence is answered first, and the turn
        goes on with the one part the flow takes (:meth:`flow_part`: its answer, a correction, a change of mind,
        or its own task asked for again). None when the parts are anything else: the flow reads the whole message
        as one (a question it cannot place stays unanswered rather than half served)."""
        if mine.index is None or self.r.rag is None:
            return None
        answered: dict[int, Answer] = {}
        for i, (part, _) in enumerate(placed):
            if i == mine.index:
                continue
            if read_form(part) != "question":
                return None
            answer = self.confident_answer(part, failed="a question beside a waiting flow")
            if answer is None:
                return None
            answered[i] = answer
        sent = [r for r in (self.send(answered[i].text or "", kind="reply", citations=citations_of(answered[i].citations))
                            for i in sorted(answered)) if r is not None]
        self.trace["requests"] = [{"text": p, "intent": x.intent, "kind": "flow" if i == mine.index else "question",
                                   "main": i == mine.index} for i, (p, x) in enumerate(placed)]
        self.text = placed[mine.index][0]
        return sent, placed[mine.index][1]

    def flow_part(self, placed: list[tuple[str, Classification]]) -> FlowPart:
        """Which one of several parts the waiting flow takes (none here: no engine; the message stays whole)."""
        return FlowPart()

    def asks_for_something(self, words: str) -> bool:
        """Whether ``words`` (a part of a message without its order numbers) ask for something: the classifier
        places them. "the lamp one", "台灯那个" place nothing: they name another order of the request before."""
        if not words:
            return False
        with self.stage("classify"):
            return self.r.classifier.classify(words).intent is not None

    def asks_for_task(self, text: str, c: Classification) -> bool:
        """Whether one request of several asks for a task to be done rather than a question answered (none
        here: only questions are answered beside the main request)."""
        return False

    def answer_beside(self, question: str) -> dict[str, Any] | None:
        """A question asked beside an answer to the waiting flow: the knowledge base's answer, sent, when it is
        confident; else None (the flow's reply goes alone: nobody is handed over for a question said in passing)."""
        answer = self.confident_answer(question, failed="a question beside an answer", noted="asked_beside")
        if answer is None:
            return None
        return self.send(answer.text or "", kind="reply", citations=citations_of(answer.citations))

    def advice_beside(self, intent: Intent) -> dict[str, Any] | None:
        """What to do about the problem the message reports, beside the task it started ("the tracking says
        delivered but nothing came": the order's status, then what to do): the knowledge base's answer to the
        message, sent, when it is confident and drawn from one of the intent's ``advice`` articles; else None (the
        task's reply goes alone)."""
        answer = self.confident_answer(self.text, failed="advice beside a task", noted="advice")
        citations = citations_of(answer.citations) if answer is not None else []
        if answer is None or not citations or not intent.advises(str(citations[0]["doc_id"])):
            return None
        return self.send(answer.text or "", kind="reply", citations=citations)

    def with_advice_after(self, advice: dict[str, Any] | None, result: TurnResult) -> TurnResult:
        """The task's answer with the advice sent after it (``advice_beside``)."""
        result.reply = _joined(result.reply, advice, first=False)
        return result

    def confident_answer(self, question: str, *, failed: str, noted: str | None = None) -> Answer | None:
        """The knowledge base's answer to one question of the turn when it is confident (answered, with text);
        None when it declines, fails (logged as failing on ``failed``) or is not wired: the caller then gives up
        its own way, the rest of the turn still served. ``noted``: the trace key that records whether the
        knowledge base answered (left unset when it failed)."""
        kb = self.r.rag
        if kb is None:
            return None
        with self.stage("retrieval"):
            try:
                answer = kb.answer(question)
            except Exception:  # noqa: BLE001 - one question of the turn: the rest of the turn is still served
                log.exception("knowledge base failed on %s", failed)
                return None
        confident = bool(answer.answered and answer.text)
        if noted is not None:
            self.trace[noted] = {"text": question, "answered": confident}
        return answer if confident else None

    def with_answer_first(self, beside: dict[str, Any] | None, result: TurnResult) -> TurnResult:
        """The turn's reply with the answer sent before it (``answer_beside``) in front."""
        result.reply = _joined(result.reply, beside, first=True)
        return result

    def main_request(self, placed: list[tuple[str, Classification]], requests: list[int]) -> int:
        """Which of several requests the turn goes on with (the others are served beside it): the first."""
        return requests[0]

    def can_serve_beside(self, others: list[Classification], main: Classification) -> bool:
        """Whether requests other than the main one can all be served in this turn (none here: only questions)."""
        return False

    def serve_beside(self, text: str, c: Classification, main: Classification) -> dict[str, Any] | None:
        """Serve one request besides the main one; the reply sent, or None."""
        return None

    # -- served without the knowledge base --

    def small_talk(self, c: Classification, template: str, checks: dict[str, Any]) -> TurnResult:
        """A greeting, thanks, "are you a bot": the template reply; state, counters and any flow untouched."""
        self.trace["escalation"] = {"rule": None, "checks": checks}
        self.trace["served"] = {"reply": template}
        said = self.say(template)
        if template == plan.ENDED_TEMPLATE:   # the task that just ended: its refusal, in its own words
            said = said.replace("{refusal}", self.ended or "").strip()
        reply = self.send(said, kind="reply")
        return self.result(self.decision_of(c, "L1", None, served=f"reply {template}"), reply=reply)

    def clarify(self, c: Classification) -> TurnResult:
        """The first message of a run that matches nothing: say what the bot can do, offer suggestions."""
        self.outcome = "clarified"
        self.trace["served"] = {"reply": "clarify"}
        reply = self.send(self.say("clarify"), kind="reply", suggestions=self.r.policy.suggestions_for(self.lang))
        return self.result(self.decision_of(c, None, None, clarify=True), reply=reply)

    def serve_workflow(self, c: Classification, name: str) -> TurnResult:
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


def _leans_on_context(text: str) -> bool:
    """A message short enough to lean on what was just said ("能快点吗", "any way to speed it up?"): at most
    FOLLOW_UP_WORDS words, or twice as many characters when written in CJK."""
    words = text.split()
    cjk = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
    return 0 < len(words) <= FOLLOW_UP_WORDS and (cjk == 0 or len(text.strip()) <= 2 * FOLLOW_UP_WORDS)


def _hears_topic(c: Classification, intents: set[str]) -> bool:
    """Whether the classifier, placing the message nowhere, still hears one of ``intents`` in it: among its nearest
    examples, and the message not held out of scope (FOLLOW_UP_OOS)."""
    explanation = c.explanation or {}
    oos = (explanation.get("signals") or {}).get("p_oos")
    return oos is not None and float(oos) < FOLLOW_UP_OOS and any(
        n.get("intent") in intents for n in explanation.get("nearest") or [])
