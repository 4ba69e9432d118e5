"""A flow's first shop reads, asked before the turn that starts it (FlowEngine.ahead): the start is walked in
memory up to the first read not at hand; a write is never asked, nothing is stored, and the calls name the
caller's conversation and turn. The second shop through the real gateway, on real Postgres."""

from __future__ import annotations

import pytest

from automation.tools import Caller
from automation.workflows.engine import FlowEngine
from automation.workflows.outside import PENDING, CallPending
from automation.workflows.spec import parse_workflows

AHEAD = """
workflows:
  look_then_cancel:
    slots:
      order_ref: {validate: {entity: order_id, regex: "^W[0-9]{4}$"}, prompt: {zh: 订单号, en: Order number}}
    steps:
      - {id: ask_order, ask: order_ref}
      - {id: load, call: get_order_details, args: {order_ref: slots.order_ref}, bind: order}
      - {id: pending, check: 'order.status == "pending"', refuse: {zh: 不能取消, en: "{{ order.order_ref }} cannot be cancelled"}}
      - {id: cancel, call: cancel_pending_order, args: {order_ref: slots.order_ref, reason: '"no longer needed"'}}
      - {id: done, reply: {zh: 已取消, en: "{{ slots.order_ref }} is cancelled"}}
      - end: completed
  cancel_at_once:
    slots:
      order_ref: {validate: {entity: order_id, regex: "^W[0-9]{4}$"}, prompt: {zh: 订单号, en: Order number}}
    steps:
      - {id: ask_order, ask: order_ref}
      - {id: cancel, call: cancel_pending_order, args: {order_ref: slots.order_ref, reason: '"no longer needed"'}}
      - end: completed
"""

AVA = Caller(channel="web", customer_id="cus_ava", conversation_id="conv-ahead", turn_id="turn-ahead")


class NotingPort:
    """The engine's outside port as a turn's pass offers it: a call whose result is at hand is answered, any other
    is noted (PENDING) and run later by ``run_noted``, as the router runs a pass's wanted work."""

    def __init__(self):
        self.ready: dict = {}
        self.noted: dict = {}

    def __call__(self, key, compute):
        if key in self.ready:
            return self.ready[key]
        self.noted[key] = compute
        return PENDING

    def run_noted(self) -> list[str]:
        tools = [key[1] for key in self.noted]
        for key, compute in self.noted.items():
            self.ready[key] = compute()
        self.noted = {}
        return tools


def _engine(shop, approvals) -> tuple[FlowEngine, NotingPort]:
    engine = FlowEngine(parse_workflows(AHEAD, file="ahead.yaml", tools=shop.gateway), shop.gateway, approvals)
    port = NotingPort()
    engine.outside = port
    return engine, port


def _stored(db) -> int:
    with db() as conn:
        return conn.execute("SELECT count(*) AS n FROM flow_instances").fetchone()["n"]


def test_the_first_read_is_asked_ahead_and_the_walk_stops_before_the_write(shop, approvals, turn, db):
    engine, port = _engine(shop, approvals)
    assert turn(engine.ahead, "look_then_cancel", AVA, "cancel W1001", {}, "en") == "asked"
    assert port.run_noted() == ["get_order_details"]
    # with the read at hand the walk goes on to the write and stops there: nothing more is asked
    assert turn(engine.ahead, "look_then_cancel", AVA, "cancel W1001", {}, "en") is None
    assert port.noted == {}
    calls = shop.calls
    assert [(c["tool"], c["status"]) for c in calls] == [("get_order_details", "ok")], calls
    assert shop.shop("debug_dump")["writes"] == [] and _stored(db) == 0
    with db() as conn:
        (row,) = conn.execute("SELECT conversation_id, turn_id, purpose FROM tool_calls WHERE tool = %s",
                              ("get_order_details",)).fetchall()
    assert (row["conversation_id"], row["turn_id"], row["purpose"]) == ("conv-ahead", "turn-ahead", "look_then_cancel")
    # the turn itself finds the read at hand: its first pass asks for the write only (and is rolled back)
    with pytest.raises(CallPending):
        turn(engine.start, "look_then_cancel", AVA, "cancel W1001", {}, "en")
    assert port.noted and all(key[1] == "cancel_pending_order" for key in port.noted)
    port.run_noted()
    flow = turn(engine.start, "look_then_cancel", AVA, "cancel W1001", {}, "en")
    assert flow.reply == "W1001 is cancelled", flow.reply
    assert [c["tool"] for c in shop.calls if c["tool"] != "debug_dump"] == ["get_order_details", "cancel_pending_order"]


def test_a_write_first_is_never_asked_ahead(shop, approvals, turn, db):
    engine, port = _engine(shop, approvals)
    assert turn(engine.ahead, "cancel_at_once", AVA, "cancel W1001", {}, "en") is None
    assert port.noted == {} and shop.calls == [] and _stored(db) == 0


def test_a_message_without_the_value_the_read_needs_asks_nothing(shop, approvals, turn, db):
    engine, port = _engine(shop, approvals)
    assert turn(engine.ahead, "look_then_cancel", AVA, "I want to cancel an order", {}, "en") is None
    assert port.noted == {} and shop.calls == []


REMEMBERING = AHEAD + """
memory:
  tools:
    orders: {call: list_customer_orders, value: result.orders, default: "[]"}
"""


def test_a_read_that_names_nothing_of_the_memory_is_asked_beside_it(shop, approvals, turn, db):
    """The session memory's calls are asked; the flow's own read, when the walk over the memory's defaults reaches
    one whose step and every step before it name nothing of the memory (the order the message names), is asked at
    the same time: one shop round, no second look. Not for a message that lacks the order."""
    engine = FlowEngine(parse_workflows(REMEMBERING, file="remembering.yaml", tools=shop.gateway), shop.gateway,
                        approvals)
    port = NotingPort()
    engine.outside = port
    assert turn(engine.ahead, "look_then_cancel", AVA, "I want to cancel an order", {}, "en", new=True) == "asked"
    assert [key[1] for key in port.noted] == ["list_customer_orders"]
    port.noted = {}
    assert turn(engine.ahead, "look_then_cancel", AVA, "cancel W1001", {}, "en", new=True) == "asked"
    assert port.run_noted() == ["list_customer_orders", "get_order_details"]
    # a look with both at hand walks on to the write and asks nothing more
    assert turn(engine.ahead, "look_then_cancel", AVA, "cancel W1001", {}, "en", new=True) is None
    assert port.noted == {}
    assert [c["tool"] for c in shop.calls] == ["list_customer_orders", "get_order_details"]
    assert _stored(db) == 0
