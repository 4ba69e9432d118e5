"""A new flow's first shop reads, asked before the turn's first pass.

A flow's start loads the customer's session memory (their profile and recent orders, read from the shop), and
its first steps often read the shop again (the order the message names). A turn that starts one would run a
pass only to discover each of those calls, be rolled back, and run again once they return. When the message
alone already tells that the turn will start a flow, the calls are asked before the first pass instead, with
nothing held (FlowEngine.ahead: the memory's calls, then, with the memory at hand, the read calls the flow's
first steps make), and the first pass finds them at hand.

The turn's own rules decide it, read ahead with no lock and no write: the classification (computed once per
turn: the passes reuse it), the harness's checks (a message they stop never reaches a tool: STOP or START,
crisis words, do-not-contact, the quota, a sensitive customer), the conversation (none yet, or one no person
holds, with no flow active and its memory not loaded), the escalation rules and the routing plan. The calls
name the conversation and the turn the pass will use (a new conversation's id derives from its message), so
the tool audit attributes them as before. Only reads are asked (a write is never made ahead). A guess proven
wrong by the turn (a concurrent change, another reading of the message) costs the shop calls only: the turn
takes a result only for the very same call, and decides as it always does.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, cast

from automation.tools import Caller
from router.classify.base import Classification
from router.schemas import InboundMessage
from router.turn import language, plan
from router.turn import state as sm
from router.turn.passes import per_turn
from router.turn.pipeline import Connect, ahead_mark, new_conversation_id, turn_id_of
from router.turn.plan import Act
from router.turn.ports import Conn, FlowsPort
from router.turn.tiers.base import Wiring, close_question, plan_facts, verdict_facts
from router.turn.tiers.workflows import flow_language, task_workflow
from text.form import read_form


def flow_ahead(d: Wiring, msg: InboundMessage, connect: Connect) -> bool:
    """Ask for the shop reads a flow this message's turn will start makes first; True when the flow's first reads
    wait for the answers of the session memory's calls asked now (the pipeline then looks again)."""
    engine = d.flows
    text = msg.text or ""
    if engine is None or not msg.customer_id or not d.harness.passes_text(text):
        return False
    looked: dict[str, Any] = per_turn(("ahead", "flow"), dict)
    if "start" in looked:
        # a second look, once the memory's calls are back: the rules were read by the first (what moved since is
        # the turn's to find: ahead_mark), only the flow's start is walked again, over the memory now at hand
        return _again(engine, looked["start"], connect)
    c = per_turn(("classify", text), lambda: d.classifier.classify(text))
    intent = d.classifier.config.intent(c.intent) if c.intent else None
    form = per_turn(("form", text), lambda: read_form(text))    # the turn reads it again: once per turn
    facts = plan_facts(d, c, intent, text, form=form, close=close_question(d, c, intent, form))
    framed = plan.frame(facts)
    task = task_workflow(engine, intent, c, framed.served) if not framed.asking else None
    if task is None:
        return False
    with connect() as raw:
        # each read commits on its own: a guess needs no snapshot, and nothing stays open in a transaction while
        # the rules and the flow's first steps are worked out (the connection goes back as it came)
        raw.autocommit = True
        try:
            return _ahead(d, msg, cast(Conn, raw), c, facts, framed, task, text, looked)   # dict rows (router.db.pool)
        finally:
            if not raw.closed:
                raw.autocommit = False


def _again(engine: FlowsPort, start: tuple[Any, ...], connect: Connect) -> bool:
    """The flow's start walked again with what the first look settled (see flow_ahead). A new conversation of a
    first contact has nothing stored to read (no memory row, no earlier flow or ticket): its second look takes no
    connection unless the walk asks for one."""
    task, caller, text, entities, lang, new, first = start
    with _OnDemand(connect) as conn:
        return engine.ahead(conn, task, caller, text, entities, lang, new=new, first_contact=first) == "again"


class _OnDemand:
    """A pooled connection taken at its first use (each statement commits on its own), given back at the end."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._held: ExitStack | None = None
        self._conn: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._conn is None:
            held = ExitStack()
            raw = held.enter_context(self._connect())
            raw.autocommit = True
            held.callback(lambda: None if raw.closed else setattr(raw, "autocommit", False))
            self._held, self._conn = held, raw
        return getattr(self._conn, name)

    def __enter__(self) -> Conn:
        return cast(Conn, self)

    def __exit__(self, *exc: Any) -> None:
        if self._held is not None:
            self._held.__exit__(*exc)


def _ahead(d: Wiring, msg: InboundMessage, conn: Conn, c: Classification, facts: plan.Facts, framed: plan.Frame,
           task: str, text: str, looked: dict[str, Any]) -> bool:
    """The look ahead's reads and rules on ``conn`` (see flow_ahead); ``looked`` keeps what a second look reuses."""
    engine = d.flows
    assert engine is not None
    # the conversation (if any), whether the delivery was seen before, whether the customer has any conversation
    # and the harness's reads of the customer (flags, quota), in one read
    found = conn.execute("SELECT c.id, c.customer_id, c.state, c.session_no, c.metadata, EXISTS (SELECT 1 FROM"
                         " messages WHERE channel = %(ahead_channel)s AND external_id = %(ahead_message)s) AS seen,"
                         " NOT EXISTS (SELECT 1 FROM conversations o WHERE o.customer_id = %(ahead_customer)s"
                         " AND o.channel = %(ahead_channel)s) AS first_contact,"
                         f" h.* FROM ({d.harness.reads_sql}) AS h LEFT JOIN conversations c"
                         " ON c.channel = %(ahead_channel)s AND c.external_id = %(ahead_conversation)s",
                         {**d.harness.reads_params(msg.channel, msg.customer_id), "ahead_channel": msg.channel,
                          "ahead_message": msg.message_external_id, "ahead_customer": msg.customer_id,
                          "ahead_conversation": msg.conversation_external_id}).fetchone()
    counters: dict[str, Any] = {}
    if found is None or found["seen"]:
        return False         # a delivery seen before: its turn is stored or being routed
    row = found if found["id"] is not None else None
    if row is None:
        conversation_id, known = new_conversation_id(msg.channel, msg.conversation_external_id), None
    else:
        state = row["state"]
        if (row["customer_id"] != msg.customer_id or state in sm.HUMAN_HOLDS or state == "l2_assisting"
                or (state in sm.RESOLVED and d.escalation.is_positive_feedback(text))):
            return False
        conversation_id, known = str(row["id"]), (row["metadata"] or {}).get("lang")
        if engine.active(conn, conversation_id) is not None:
            return False     # a waiting flow reads the message first
        kept = conn.execute("SELECT * FROM conversation_counters WHERE conversation_id = %s",
                            (row["id"],)).fetchone()
        if kept is not None and kept["session_no"] == row["session_no"] and state != "closed":
            counters = dict(kept)
    if not d.harness.would_pass_read(found):   # the message's own checks passed in flow_ahead
        return False
    verdict = d.escalation.evaluate(text=text, classification=c, counters=counters,
                                    target_state=plan.target_state(framed, task=task), claimed=framed.claimed)
    route = plan.choose(facts, framed, verdict_facts(verdict), task=task)
    if route.act is not Act.TIER or not route.run_flow or route.workflow != task:
        return False
    lang = flow_language(language.choose(text, known, d.policy.default_language), text)
    caller = Caller(channel=msg.channel, customer_id=msg.customer_id, conversation_id=conversation_id,
                    turn_id=turn_id_of(msg))
    # a first contact (a new conversation, and no other of the customer's on this channel) has no earlier flow or
    # ticket: the memory's outcomes are not read, here or in a second look
    first = row is None and bool(found["first_contact"])
    asked = engine.ahead(conn, task, caller, text, c.entities or {}, lang, new=row is None, first_contact=first)
    if asked is not None:
        ahead_mark(conn, row)     # the first pass checks that nothing moved on while the calls ran
    if asked == "again":
        looked["start"] = (task, caller, text, c.entities or {}, lang, row is None, first)
    return asked == "again"
