"""L3 and the handoff tickets: opening one with its context package, and a conversation a person holds.

- L3 (by intent or by an escalation rule): a handoff ticket with reason and priority; what the knowledge base
  says goes with it as evidence for the agent.
- While a person holds the conversation (or reviews a draft) the customer's messages are added to the ticket;
  in ``l2_assisting`` the escalation rules still run, so "转人工" or a big refund reaches a person.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from router.classify.base import Classification
from router.schemas import Decision
from router.turn import state as sm
from automation.tools.base import Caller
from router.turn.passes import AFTER_COMMIT, in_passes
from router.turn.pipeline import Connect, TurnResult
from router.turn.ports import FlowsPort, HandoffPort
from router.turn.tiers.base import EVIDENCE_LIMIT, TurnBase, hit_dict

log = logging.getLogger(__name__)

TRANSCRIPT_LIMIT = 50     # messages of the conversation in a ticket's context package
TRAIL_LIMIT = 20          # earlier decisions in the context package
TOOL_CALL_LIMIT = 20      # recent tool calls of the conversation in the context package


class Tickets(TurnBase):
    """The turn's handoff side: tickets opened and held conversations."""

    def active_ticket(self) -> dict[str, Any] | None:
        if self.r.handoff is None:
            return None
        return self.r.handoff.active_ticket(self.conn, self.conv["id"])

    def to_ticket(self, ticket: dict[str, Any]) -> None:
        handoff = self.r.handoff
        assert handoff is not None, "a ticket is found only through the handoff service"
        with self.stage("handoff"):
            handoff.add_customer_message(self.conn, ticket["id"], self.text, notes=self.queue_notes(),
                                         message_id=self.message_id)
        self.trace["added_to_ticket"] = str(ticket["id"])

    def tag_transition(self, ticket_id: Any) -> None:
        """Record the ticket on the transition that opened it (history and trace)."""
        if self.transitions and ticket_id is not None:
            self.flush_moves()
            last = self.transitions[-1]
            last["ticket_id"] = str(ticket_id)
            self.conn.execute("UPDATE conversation_transitions SET ticket_id = %s WHERE id = %s",
                              (str(ticket_id), last["id"]))

    # -- a person holds the conversation --

    def while_held(self, ticket: dict[str, Any]) -> TurnResult:
        """A human holds the conversation (or reviews a draft): the message goes to the ticket.

        In l2_assisting the escalation rules still run, so "转人工" or a big refund reaches a person.
        """
        state = self.conv["state"]
        if state == "l2_assisting":
            classification = self.classify()
            self.flush_moves()
            counters = sm.load_counters(self.conn, self.conv)
            verdict = self.r.escalation.evaluate(text=self.text, classification=classification, counters=counters,
                                                 target_state=None)
            self.save_verdict(verdict)
            esc = verdict.as_escalation()
            if esc is not None:
                decision = self.decision_of(classification, "L3", esc)
                ticket_id = self.open_l3(decision, reason=esc.reason, priority=esc.priority,
                                         classification=classification)
                reply = self.send(self.say("ack_l3"), kind="ack")
                return self.result(decision, reply=reply, ticket_id=ticket_id)
            self.to_ticket(ticket)
            # a draft nobody has taken up yet: the customer hears that the message arrived, as in the queue
            reply = self.still_waiting() if ticket.get("status") == "queued" else None
            return self.result(self.decision_of(classification, "L2", None), reply=reply, ticket_id=ticket["id"])
        self.to_ticket(ticket)
        reply = self.still_waiting() if state == "l3_queuing" else None
        return self.result(Decision(tier="L3", channel="state",
                                    explanation={"state": state, "note": "a person holds the conversation"}),
                           reply=reply, ticket_id=ticket["id"])

    def still_waiting(self) -> dict[str, Any] | None:
        """"hello? anyone there?" while nobody has taken the ticket yet (a queued L3 ticket, or an L2 draft no
        agent has claimed): one short word that the message arrived,
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

    # -- opening tickets --

    def open_l3(self, decision: Decision, *, reason: str, priority: str, classification: Classification | None = None,
                via_classifying: bool = False) -> Any:
        state = self.conv["state"]
        if via_classifying and state in sm.ROUTABLE:
            self.move("classifying", "harness")
        self.move("l3_queuing", reason)
        evidence: list[dict[str, Any]] = []
        if classification is not None and classification.intent is not None and classification.tier in ("L1", "L2") \
                and self.served_by(classification) is None:
            answer = self.retrieve()   # what the knowledge base says helps the agent too
            evidence = [hit_dict(h) for h in (answer.passages if answer else [])[:EVIDENCE_LIMIT]]
        ticket_id = self.open_ticket("handoff", decision, reason=reason, priority=priority,
                                     classification=classification, evidence=evidence)
        self.tag_transition(ticket_id)
        return ticket_id

    def open_ticket(self, kind: str, decision: Decision, *, reason: str, priority: str,
                    classification: Classification | None = None, evidence: list[dict[str, Any]] | None = None,
                    draft: dict[str, Any] | None = None) -> Any:
        """Open (or join) the conversation's ticket; its id, or None when no handoff service is wired."""
        if self.r.handoff is None:
            log.warning("no handoff service: %s ticket not opened (%s)", kind, reason)
            self.trace["ticket"] = {"kind": kind, "opened": False, "reason": reason}
            return None
        entities = (classification.entities if classification is not None else None) or {}
        amounts = entities.get("amounts") or []
        biggest = max(amounts, key=lambda a: a.get("value") or 0) if amounts else None
        self.flush_moves()     # the package shows the transitions with their ids
        context = self.context_package(decision, entities, evidence or [])
        kept = self.hand_over()
        if kept:
            context["kept_requests"] = kept
        with self.stage("handoff"):
            ticket = self.r.handoff.open_ticket(
                self.conn, kind=kind, conversation_id=str(self.conv["id"]), channel=self.conv["channel"],
                customer_id=self.conv["customer_id"], reason=reason, priority=priority, context=context,
                draft=draft, amount=biggest.get("value") if biggest else None,
                currency=biggest.get("currency") if biggest else None, notes=self.queue_notes())
        self.trace["ticket"] = {"kind": kind, "id": str(ticket["id"]), "priority": priority, "reason": reason}
        # a package with its memory to come ("pending") is filled when someone first needs it: an agent reading
        # or claiming the ticket (MemoryOnDemand, wired on the handoff service); never in the customer's turn
        return ticket["id"]

    def hand_over(self) -> list[dict[str, Any]]:
        """A person takes the conversation: the tasks the bot kept for later and the questions kept beside a task
        go to them (FlowEngine.hand_over), for the ticket's context; the acknowledgement says so."""
        engine = self.r.flows
        if engine is None:
            return []
        with self.stage("workflow"):
            kept = engine.hand_over(self.conn, str(self.conv["id"]), self.flow_lang, self.kept_questions)
        self.kept_questions = []
        if kept is None:
            return []
        self.flow_moved()
        self.handed_over = kept.reply
        self.trace["handed_over"] = [{k: v for k, v in r.items() if k != "slots"} for r in kept.requests]
        return kept.requests

    def context_package(self, decision: Decision, entities: dict[str, Any],
                        evidence: list[dict[str, Any]]) -> dict[str, Any]:
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
            # the session memory comes when an agent first reads or claims the ticket (MemoryOnDemand): "pending"
            "memory": None,
            **({"memory_status": "pending"} if self.memory_caller() is not None else {}),
            "tool_calls": self.tool_calls(first_turn=not trail),
        }

    def memory_caller(self) -> Caller | None:
        """Whom the session memory is loaded for (the conversation's verified customer), if a workflow side is
        wired; None: the package has no memory to wait for."""
        from router.turn.flows import caller_of

        if self.r.flows is None or self.r.handoff is None:
            return None
        return caller_of(self.conv)

    def tool_calls(self, *, first_turn: bool = False) -> list[dict[str, Any]]:
        """The conversation's recent tool calls as audited (redacted): tool, status, latency, attempts, data,
        the error of a failed one; read on the turn's connection, which sees the committed audit rows.
        ``first_turn``: the conversation has no earlier turn; if this one ran no flow and waited for no outside
        work either, nothing has called a tool for it yet (a first "转人工"), and nothing is read."""
        engine = self.r.flows
        if engine is None or (first_turn and self.flow is None and not self.ctx.outside_runs):
            return []
        from automation.tools.audit import calls_for_conversation, summarise

        flush = getattr(engine.tools, "flush_audit", None)
        if flush is not None:   # the conversation's reads are written by the audit thread: wait for those only
            flush(2.0, conversation_id=str(self.conv["id"]))
        try:
            with self.conn.transaction():   # a savepoint: a failed read must not abort the turn
                rows = calls_for_conversation(self.conn, str(self.conv["id"]), limit=TOOL_CALL_LIMIT)
        except Exception:  # noqa: BLE001 - the ticket opens without them
            log.exception("the tool calls of the context package could not be read")
            return []
        return [{**c, "this_turn": c.get("turn_id") == self.ctx.turn_id} for c in summarise(rows)]


def memory_status(memory: dict[str, Any], declared: int) -> str:
    """``loaded``, ``partial`` (some of the shop's reads failed) or ``unavailable`` (none of ``declared`` answered)."""
    failed = [f for f in memory.get("failed") or [] if f.get("tool") != "tickets"]
    if not memory.get("failed"):
        return "loaded"
    return "unavailable" if declared and len(failed) >= declared else "partial"


def fill_session_memory(connect: Connect, engine: FlowsPort, handoff: HandoffPort, caller: Caller, lang: str,
                        ticket_id: Any, conversation: str) -> None:
    """Load the session memory as a turn would (its tool calls between passes, with no connection held, within
    the gateway's tool deadline) and write it into the ticket's package; a failure writes ``unavailable``."""
    spec = getattr(engine.workflows, "memory", None)
    declared = len(getattr(spec, "calls", None) or [])

    def step() -> str:
        with connect() as conn, conn.transaction():
            memory = engine.memory(conn, caller, lang)   # CallPending on a first pass: its tools run, then again
            status = memory_status(memory, declared)
            handoff.fill_memory(conn, ticket_id, memory, status)
            return status

    try:
        status = in_passes(step)
    except Exception:  # noqa: BLE001 - the ticket stands without its memory; the agent sees it unavailable
        log.warning("session memory of ticket %s (conversation %s) could not be loaded", ticket_id, conversation,
                    exc_info=True)
        try:
            with connect() as conn, conn.transaction():
                handoff.fill_memory(conn, ticket_id, None, "unavailable")
        except Exception:  # noqa: BLE001 - the database is away too: the package stays "pending" (logged)
            log.warning("ticket %s: its memory could not be marked unavailable", ticket_id, exc_info=True)
        return
    if status != "loaded":
        log.info("session memory of ticket %s is %s", ticket_id, status)


class MemoryOnDemand:
    """Fills a ticket's session memory when someone first needs it, not for every ticket a turn opens.

    A turn opens an L3 (or L2) ticket with ``memory_status`` ``pending`` and nothing else: most tickets of a busy
    queue are answered from the transcript, and loading every customer's profile and orders from the shop
    after every handoff cost each one two tool calls, their audit rows, a second transaction and a rewrite of
    the ticket's package. The handoff service calls this with a ticket an agent reads or claims
    (``memory_wanted``): a package still ``pending`` is loaded on a background thread (:data:`AFTER_COMMIT`,
    as a turn loads it: its calls between passes, with no connection held, within the tool deadline) and
    written into the package; the agent's screen, which reads the ticket again while it is ``pending``, shows
    it a moment later. One load per ticket at a time in this process; one that failed before writing (the
    database away) leaves the package ``pending`` and the next read asks again.
    """

    def __init__(self, engine: FlowsPort, handoff: HandoffPort, connect: Connect,
                 submit: Callable[[Callable[[], None]], Any] | None = None):
        self.engine, self.handoff, self.connect = engine, handoff, connect
        self.submit = submit or AFTER_COMMIT.submit
        self._lock = threading.Lock()
        self._loading: set[str] = set()

    def __call__(self, ticket: dict[str, Any]) -> bool:
        """Start loading ``ticket``'s memory if its package waits for it; whether a load was started."""
        context = ticket.get("context") or {}
        if context.get("memory_status") != "pending" or not ticket.get("customer_id"):
            return False
        tid, conversation = str(ticket["id"]), str(ticket.get("conversation_id"))
        with self._lock:
            if tid in self._loading:
                return False
            self._loading.add(tid)
        caller = Caller(channel=str(ticket["channel"]), customer_id=str(ticket["customer_id"]),
                        conversation_id=conversation)
        lang = str(ticket["language"]) if ticket.get("language") in ("zh", "en") else "en"

        def run() -> None:
            try:
                fill_session_memory(self.connect, self.engine, self.handoff, caller, lang, tid, conversation)
            finally:
                with self._lock:
                    self._loading.discard(tid)

        try:
            self.submit(run)
        except RuntimeError:   # shutting down: the package stays pending, the next read asks again
            with self._lock:
                self._loading.discard(tid)
            return False
        return True
