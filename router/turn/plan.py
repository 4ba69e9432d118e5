"""The decider's routing order as a plain plan: what a routed message gets, from facts the turn has gathered.

The decider (router.turn.decider) reads the message and the conversation (classification, the waiting flow's
reading, a correction, the escalation rules' verdict, what the intent declares) into :class:`Facts` and
:class:`Verdict`, asks :func:`frame` and :func:`choose`, and runs the :class:`Route` they return. Nothing here
touches the database, a model or a port, so the order can be checked over a table of cases in microseconds
(tests/router/turn/test_plan.py); an import contract keeps it that way.

Two steps, because the escalation rules need to know where the message is heading before they judge it
(the loop guard counts knowledge-base rounds, a flow's own answers are not unclear turns):

1. :func:`frame`: the message's tier and whether it is a question the knowledge base answers (L1 whatever the
   intent's tier) -> the escalation rules' target state (:func:`target_state`);
2. :func:`choose`: with their verdict, the route: small talk, a corrected task restarted, clarify, a workflow
   not wired, a digression from a waiting flow, a person (L3), or the flow engine then the tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

Tier = Literal["L1", "L2", "L3"]
TIER_STATE: dict[str, str] = {"L1": "l1_resolving", "L2": "l2_assisting", "L3": "l3_queuing"}
# What a waiting flow reads a message as that makes the message the flow's own (automation.workflows.engine
# CLAIMED, repeated here so the plan imports nothing: tests/router/turn/test_plan.py checks they agree)
CLAIMED = frozenset({"answer", "correction", "cancel", "waiting", "unclear"})
IDENTITY_TEMPLATE = "bot_identity"
NEVER_MIND_TEMPLATE = "never_mind"
CONSENT_TEMPLATE = "consent"        # a bare "yes" / "好的" with nothing pending: what can I help with?
ENDED_TEMPLATE = "task_ended"       # a message about the task that just ended refused: why nothing was done
# the reading of a message that belongs to the task that just ended refused, no flow waiting (router.turn.tiers:
# FlowsPort.ended): the router's own, never a waiting flow's (CLAIMED is theirs)
ENDED = "ended"
# rules that only count turns the bot could not place: a harmless message the bot answers is never one of them
COUNTING_RULES = frozenset({"low_confidence", "repeated_question", "loop_guard"})
_TIERS: dict[str, Tier] = {"L1": "L1", "L2": "L2", "L3": "L3"}


@dataclass(frozen=True)
class Facts:
    """What the turn knows about the message before the escalation rules judge it."""

    intent: str | None                    # the classified intent (None: out of scope)
    tier: str                             # the classification's tier ("L1" | "L2" | "L3")
    decided_by: str = "embeddings"        # "rules" | "embeddings"
    served: tuple[str, str] | None = None  # the intent's ``serve:`` ("reply" | "workflow", name), or None
    form: str | None = None               # text.form: "question" | "request" | None (neither)
    problem: bool = False                 # a statement of something failing (text.form.tells_a_problem)
    topics: bool = False                  # the intent declares knowledge-base topics
    own_order: bool = False               # the intent's ``with_order`` and an order number in the message
    security: bool = False                # the intent is one of the escalation config's security intents
    reading: str | None = None            # what the waiting flow reads the message as; None: no flow waits
    restart: str | None = None            # the workflow a correction restarts ("sorry, I meant 100241")
    knowledge_base: bool = True           # a knowledge base is wired
    flows: bool = True                    # the workflow engine is wired
    identity_reply: bool = False          # the policy has the ``bot_identity`` reply template
    clarify_unknown: bool = True          # policy ``unknown: clarify_then_escalate``
    drops_task: bool = False              # "never mind" / "算了，不退了" with nothing waiting (and a reply for it)
    close_question: bool = False          # a lookup the classifier barely preferred to a question with topics
    consents: bool = False                # a bare "yes" / "ok" / "好的" with nothing waiting (and a reply for it)

    @property
    def in_flow(self) -> bool:
        return self.reading is not None


@dataclass(frozen=True)
class Frame:
    """Where the message heads before any escalation rule: :func:`frame`'s answer."""

    served: tuple[str, str] | None
    tier: Tier
    smalltalk: bool     # served by a reply template
    claimed: bool       # the waiting flow's own (an answer, a correction...) or a correction restarting a task
    asking: bool        # a question the knowledge base answers from the intent's topics (L1)


@dataclass(frozen=True)
class Verdict:
    """What the escalation rules said (router.turn.escalation.EscalationVerdict, the parts the order reads)."""

    escalate: bool = False
    rule: str | None = None
    identity_question: bool = False   # the human-request check heard "are you a real person?"
    dissatisfied: bool = False        # a dissatisfied signal in this message
    low_confidence_streak: int = 0    # unclear messages in a row, this one included


class Act(str, Enum):
    SMALL_TALK = "small_talk"          # the reply template; state, counters and any flow untouched
    CLARIFY = "clarify"                # what the bot can do, with suggestions
    SERVE_WORKFLOW = "serve_workflow"  # the customer's own data, no engine to run it: ask for the order or a person
    DIGRESSION = "digression"          # another topic while a flow waits: served, then the flow asks again
    ESCALATE = "escalate"              # an escalation rule fired: an L3 ticket
    TIER = "tier"                      # the flow engine (when ``run_flow``), else the tier's action


@dataclass(frozen=True)
class Route:
    """The plan for one message: ``restart`` first (when a corrected task runs no flow, ``act`` follows)."""

    act: Act
    tier: Tier = "L1"
    template: str | None = None           # the reply template (small talk, or a template served mid-flow)
    workflow: str | None = None           # SERVE_WORKFLOW: the workflow named; TIER: the task to start, if any
    served: tuple[str, str] | None = None
    restart: str | None = None
    run_flow: bool = False                # TIER: the flow engine takes the message before the tier
    asking: bool = False                  # the answer comes from the intent's topics
    answer_first: bool = False            # the knowledge base may answer first (its lookup offered after)
    save_verdict: bool = True             # small talk leaves the counters as they were

    @property
    def smalltalk(self) -> bool:
        return self.template is not None


def frame(f: Facts) -> Frame:
    """The message's tier before the escalation rules: a question of an intent with knowledge-base topics (or a
    statement of a problem with something the customer uses) is answered (L1), never started as its task, unless
    it is about the customer's own order (``with_order``), the waiting flow claims it, a correction restarts a
    task, or it is small talk. Asked mid-task (a digression: "wait, how much is shipping normally?") it is
    answered the same way, then the flow asks again."""
    served = f.served
    tier = _TIERS.get(f.tier, "L2")
    smalltalk = served is not None and served[0] == "reply"
    claimed = f.reading in CLAIMED or f.reading == ENDED or f.restart is not None or f.drops_task or f.consents
    # a statement of a problem ("my coupon doesn't work") asks why and what to do, as a question would; not when
    # it is about the customer's own data (a lookup answers it); an account's safety is the escalation rules'
    troubled = f.problem and f.form is None and (served is None or served[0] != "workflow")
    asking = ((f.form == "question" or troubled) and f.topics and f.knowledge_base and not f.own_order
              and f.reading in (None, "digression") and f.restart is None and not smalltalk)
    if asking:
        served, tier = None, "L1"
    return Frame(served=served, tier=tier, smalltalk=smalltalk, claimed=claimed, asking=asking)


def target_state(fr: Frame, *, task: str | None) -> str | None:
    """Where the conversation goes without an escalation; None: it stays (the loop guard counts only
    knowledge-base rounds: small talk, the flow's own answers and a workflow's turns are normal work)."""
    return None if (fr.smalltalk or fr.claimed or task is not None) else TIER_STATE[fr.tier]


def choose(f: Facts, fr: Frame, v: Verdict, *, task: str | None) -> Route:
    """The routing order, first match wins:

    0. a message about the task that just ended refused (``ENDED``): why nothing was done; a bare consent with
       nothing waiting: what can I help with (neither is a turn the counting rules may escalate);
    1. small talk (also "are you a real person?", a question the classifier heard as a request for a person),
       unless a flow waits, a finished task restarts ("actually, the other one", which the embeddings may hear as
       a goodbye), a rule escalates (bar a rule-matched identity question) or the customer is unhappy;
       likewise a change of mind with nothing waiting ("never mind", "算了，不退了"): the ``never_mind`` reply;
    2. a corrected task restarts (``restart``), before anything below;
    3. out of scope, first of a run: clarify;
    4. ``serve: workflow`` with no engine to run it;
    5. a digression from a waiting flow;
    6. an escalation: L3;
    7. the flow engine (the waiting flow, or ``task``), then the tier's action or the small-talk reply.

    A lookup barely preferred to a question with topics (``close_question``) is answered first when the knowledge
    base answers it confidently (``answer_first``, 4 and 7), its lookup offered after; else it runs as planned.
    """
    served, smalltalk = fr.served, fr.smalltalk
    asks_who = v.rule == "human_request" and f.decided_by == "rules"
    counted = v.escalate and v.rule not in COUNTING_RULES   # an escalation a harmless message still gets
    if f.reading == ENDED and not counted:
        # the task that just ended refused, and the message gives it a value ("21 Oak Road…", "不对，地址是…"):
        # why nothing was done, and what else the bot can do; never an unclear turn
        return Route(Act.SMALL_TALK, tier=fr.tier, template=ENDED_TEMPLATE, save_verdict=False)
    if f.consents and not f.in_flow and f.restart is None and not counted and not v.dissatisfied:
        # "yes", "好的" with nothing asked: nothing to agree to, nothing unclear either
        return Route(Act.SMALL_TALK, tier=fr.tier, template=CONSENT_TEMPLATE, save_verdict=False)
    if (not f.in_flow and not v.escalate and v.identity_question and not smalltalk and f.identity_reply):
        served, smalltalk = ("reply", IDENTITY_TEMPLATE), True
    if smalltalk and served is not None and not f.in_flow and f.restart is None and (not v.escalate or asks_who) \
            and not v.dissatisfied:
        return Route(Act.SMALL_TALK, tier=fr.tier, template=served[1], served=served, save_verdict=False)
    if f.drops_task and not f.in_flow and not v.escalate:
        # nothing waits to be stopped: no task is started on the words it names ("不退了"), nothing is unclear
        return Route(Act.SMALL_TALK, tier=fr.tier, template=NEVER_MIND_TEMPLATE, save_verdict=False)
    asking, tier = fr.asking, fr.tier
    if not v.escalate and f.security and f.topics and tier == "L3" and f.knowledge_base \
            and f.reading in (None, "digression") and f.restart is None:
        # an account question without a sign of a hacked or frozen account ("I forgot my password"): self-service;
        # never a waiting flow's answer the classifier heard as one ("不对，是已签收那个" at a confirmation)
        asking, tier = True, "L1"
    template = served[1] if smalltalk and served is not None else None
    restart = f.restart if not v.escalate else None
    if not v.escalate and not f.in_flow and f.intent is None and f.clarify_unknown and v.low_confidence_streak <= 1:
        return Route(Act.CLARIFY, tier=tier, served=served, restart=restart, asking=asking)
    # "when will my refund show on my Visa?": as likely the refund-times question as the customer's own refund
    answer_first = f.close_question and not asking and not f.in_flow and restart is None and not v.escalate
    if not v.escalate and not f.in_flow and task is None and served is not None and served[0] == "workflow":
        return Route(Act.SERVE_WORKFLOW, tier=tier, workflow=served[1], served=served, restart=restart,
                     asking=asking, answer_first=answer_first)
    if f.reading == "digression" and not v.escalate:
        return Route(Act.DIGRESSION, tier=tier, template=template, served=served, restart=restart, asking=asking)
    if v.escalate:
        return Route(Act.ESCALATE, tier=tier, served=served, asking=asking)
    return Route(Act.TIER, tier=tier, template=template, workflow=task, served=served, restart=restart,
                 run_flow=f.flows and not asking, asking=asking, answer_first=answer_first and task is not None)


class Thanks(str, Enum):
    """What a "thanks" / "that's all" after a resolved answer does (the conversation is ``l1_resolved`` or
    waiting for feedback)."""

    ROUTE = "route"                      # routed like any message: it answers an open offer, or a flow is running
    CLOSE = "close"                      # the conversation closes with positive feedback
    LAPSE_AND_CLOSE = "lapse_and_close"  # an open offer ("Shall I start it?") lapses, then it closes


def after_thanks(*, flow_active: bool, offered: bool, offer_reading: str | None) -> Thanks:
    """"no thanks" to "shall I start it?" answers the offer (routed); "thanks" after an answer closes the
    conversation, an open offer just lapsing; a flow still at work gets the message."""
    if offered and offer_reading in ("answer", "cancel"):
        return Thanks.ROUTE
    if not flow_active:
        return Thanks.CLOSE
    return Thanks.LAPSE_AND_CLOSE if offered else Thanks.ROUTE
