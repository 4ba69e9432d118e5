"""A slow shop must not slow the gateway: a turn's tool calls and session-memory loads run between its
passes, with no transaction open and no pooled connection held, on the real example shop (MCP over stdio,
started with a latency or hanging) and real Postgres. The conversation may move meanwhile (the customer's
next message, an agent's claim): the newer event wins and the call's result stays only in the audit."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from router.schemas import InboundMessage
from routing_kit import flow_services, make_agent, rows, ticket_memory
from serving_testkit import pool_idle

pytestmark = pytest.mark.slow

LATENCY_MS = "700"
_ids = itertools.count()


@pytest.fixture
def slow(fresh_db, pg_server, template_dsn, e5_encoder, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_SHOP_LATENCY_MS", LATENCY_MS)
    s = flow_services(fresh_db, pg_server, template_dsn, e5_encoder)
    yield s
    s.close()


@pytest.fixture
def held(fresh_db, pg_server, template_dsn, e5_encoder, monkeypatch, tmp_path):
    """The shop holds the calls ``held.hold`` names while it exists (the test releases them); reads may wait 60 s."""
    from automation.tools.config import BUNDLED_TOOLS

    hold = tmp_path / "hold.flag"
    tools = tmp_path / "tools.yaml"
    tools.write_text(BUNDLED_TOOLS.read_text(encoding="utf-8").replace("timeout: 3\n", "timeout: 60\n"),
                     encoding="utf-8")
    monkeypatch.setenv("SWITCHBOARD_SHOP_HOLD_WHILE", str(hold))
    monkeypatch.setenv("SWITCHBOARD_TOOL_DEADLINE_SECONDS", "60")
    s = flow_services(fresh_db, pg_server, template_dsn, e5_encoder, tools_file=tools)
    s.hold = hold
    yield s
    s.close()


@pytest.fixture
def hanging(fresh_db, pg_server, template_dsn, e5_encoder, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_SHOP_HANG", "1")
    monkeypatch.setenv("SWITCHBOARD_TOOL_DEADLINE_SECONDS", "1")
    s = flow_services(fresh_db, pg_server, template_dsn, e5_encoder)
    yield s
    s.close()


def _msg(text: str, *, conv: str = "conv-1", customer: str = "c1", mid: str | None = None) -> InboundMessage:
    return InboundMessage(channel="web", conversation_external_id=conv, customer_id=customer,
                          message_external_id=mid or f"m-{next(_ids)}", text=text)


def _in_thread(fn, *args):
    out: dict = {}

    def run():
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _calls(svc, tool: str) -> list[dict]:
    svc.tools.flush_audit(5.0)
    return rows(svc.pool, "SELECT turn_id, status, idempotency_key FROM tool_calls WHERE tool = %s ORDER BY created_at",
                tool)


def _wait_outside(pipeline_pool, t: threading.Thread) -> None:
    """Until the turn in ``t`` has run a pass and given its connection back (its calls are then running)."""
    pool_idle(pipeline_pool, quiet_for=0.15, timeout=60.0, min_requests=1, alive=t.is_alive)


def _shop_dump(dsn: str) -> dict:
    env = {**os.environ, "SWITCHBOARD_DATABASE_URL": dsn}
    out = subprocess.run([sys.executable, "-m", "examples.shop", "dump", "--json"], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def _warm(svc) -> None:
    """Start the stdio shop (its first session) with another customer's order question."""
    out, _ = svc.pipeline.handle(_msg("where is my order 100241", conv="warm", customer="c2"))
    assert out["flow"]["status"] == "completed", out


def test_the_customers_next_message_during_a_slow_call_wins_and_nothing_is_held(held):
    """The shop holds the first message's call until the test lets it go, so the second message is surely
    routed while that call is out, on any machine."""
    slow = held
    _warm(slow)
    slow.pipeline.handle(_msg("hello", conv="conv-1"))          # the conversation row exists: its lock can be probed
    slow.hold.write_text("get_order\n", encoding="utf-8")   # the second message's own calls are not held
    t, out = _in_thread(slow.pipeline.handle, _msg("where is my order 100234", conv="conv-1"))
    _wait_outside(slow.pool, t)
    assert t.is_alive(), out
    # the call runs with nothing held: the row is free and no session idles in a transaction
    with psycopg.connect(slow.dsn) as probe:
        probe.execute("SET lock_timeout = '300ms'")
        probe.execute("SELECT id FROM conversations WHERE external_id = 'conv-1' FOR UPDATE").fetchone()
        probe.rollback()
        idle = probe.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                             "AND state LIKE 'idle in transaction%%'").fetchone()[0]
    assert idle == 0
    # the customer's next message is routed at once, while the first one's call is still out
    second, _ = slow.pipeline.handle(_msg("thanks, and what are your opening hours?", conv="conv-1"))
    assert t.is_alive() and second["reply"] is not None
    slow.hold.unlink()
    t.join(60)
    assert "error" not in out, out.get("error")
    first, _ = out["value"]
    # the newer message won: the first is stored without a decision, its result only in the audit
    assert first["decision"]["explanation"]["note"] == "superseded" and first["reply"] is None
    assert "newer message" in first["decision"]["explanation"]["why"]
    audited = [c for c in _calls(slow, "get_order") if c["turn_id"] == first["turn_id"]]
    assert [c["status"] for c in audited] == ["ok"]
    assert rows(slow.pool, "SELECT count(*) AS n FROM flow_instances f JOIN conversations c ON c.id::text = "
                           "f.conversation_id WHERE c.external_id = 'conv-1'")[0]["n"] == 0


def test_an_agent_claiming_the_conversation_during_a_call_wins(slow):
    from router.turn.passes import PENDING, outside_transaction
    from router.turn.pipeline import Pipeline

    from automation.tools import Caller

    _warm(slow)
    held, _ = slow.pipeline.handle(_msg("I want to talk to a human", conv="conv-2"))
    assert held["ticket_id"] and held["state"] == "l3_queuing", held

    def decider(ctx):
        """Looks an order up in the shop, outside the transaction, and answers with its status."""
        from router.schemas import Decision
        from router.turn.pipeline import TurnResult

        who = Caller(channel="web", customer_id="c1", conversation_id=str(ctx.conversation["id"]),
                     turn_id=ctx.turn_id, purpose="order_status")
        got = outside_transaction(("order", "100234"),
                                  lambda: slow.tools.call("get_order", {"order_id": "100234"}, who))
        status = None if got is PENDING else got.output["order"]["status"]
        return TurnResult(decision=Decision(channel="workflow", explanation={"status": status}),
                          state=ctx.conversation["state"])

    pipe = Pipeline(slow.pool, slow.metrics, decider)
    t, out = _in_thread(pipe.handle, _msg("where is my order 100234", conv="conv-2"))
    _wait_outside(slow.pool, t)
    agent, _ = make_agent(slow.pool, "li")
    slow.handoff.claim(agent, held["ticket_id"])
    t.join(60)
    assert "error" not in out, out.get("error")
    response, _ = out["value"]
    assert response["decision"]["explanation"]["note"] == "superseded", response
    assert "l3_connected" in response["decision"]["explanation"]["why"] and response["state"] == "l3_connected"
    assert [c["status"] for c in _calls(slow, "get_order") if c["turn_id"] == response["turn_id"]] == ["ok"]


def test_a_connection_lost_between_the_call_and_the_apply_does_not_call_again(slow):
    _warm(slow)
    t, out = _in_thread(slow.pipeline.handle, _msg("where is my order 100234", conv="conv-3"))
    _wait_outside(slow.pool, t)
    # every idle connection of the gateway's pool dies while the shop answers
    pids = [c.info.backend_pid for c in list(slow.pool._pool)]
    assert pids
    with psycopg.connect(slow.dsn, autocommit=True) as probe:
        killed = probe.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                               "WHERE pid = ANY(%s)", (pids,)).fetchone()[0]
    assert killed == len(pids)
    t.join(60)
    assert "error" not in out, out.get("error")
    response, _ = out["value"]
    assert response["flow"]["status"] == "completed" and "SF1402837465299" in response["reply"]["text"]
    mine = [c for c in _calls(slow, "get_order") if c["turn_id"] == response["turn_id"]]
    assert len(mine) == 1          # applied from the result at hand: the shop was not asked twice


def test_a_refund_repeated_after_a_crash_is_made_once(slow):
    from router.db.pool import open_pool
    from router.turn.pipeline import Pipeline

    first, _ = slow.pipeline.handle(_msg("I want a refund of 30 for order 100234", conv="conv-4"))
    assert first["flow"]["step"] == "confirm_refund", first
    yes = _msg("yes", conv="conv-4", mid="yes-1")
    # a gateway process that dies after the shop made the refund, before the turn is stored
    doomed_pool = open_pool(slow.dsn, min_size=1, max_size=2, name="doomed")
    doomed = Pipeline(doomed_pool, slow.metrics, slow.pipeline.decider)
    t, out = _in_thread(doomed.handle, yes)
    _wait_outside(doomed_pool, t)
    doomed_pool.close()
    t.join(60)
    assert "error" in out                                    # nothing of the turn was stored
    assert rows(slow.pool, "SELECT count(*) AS n FROM messages WHERE external_id = 'yes-1'")[0]["n"] == 0
    # the channel delivers the message again: the same flow, the same step, the same idempotency key
    again, replayed = slow.pipeline.handle(yes)
    assert not replayed and again["flow"]["status"] == "completed", again
    assert "Refunded" in again["reply"]["text"] or "refund" in again["reply"]["text"].lower()
    refunds = _calls(slow, "request_refund")
    assert len(refunds) == 2 and refunds[0]["idempotency_key"] == refunds[1]["idempotency_key"]
    order = next(o for o in _shop_dump(slow.dsn)["orders"] if o["order_id"] == "100234")
    assert len([w for w in order["writes"] if w["tool"] == "request_refund"]) == 1


def test_a_hanging_shop_gets_a_truthful_reply_and_nobody_else_waits(hanging):
    assert hanging.tools.check(timeout=60) == {}    # the shop is up (it lists its tools) but no call ever returns
    t, out = _in_thread(hanging.pipeline.handle, _msg("where is my order 100234", conv="conv-5"))
    _wait_outside(hanging.pool, t)
    assert t.is_alive()
    # meanwhile other customers are served (no 503, no wait for the shop)
    hello, _ = hanging.pipeline.handle(_msg("hello", conv="conv-6", customer="c3"))
    assert hello["reply"] is not None and t.is_alive()
    zh, _ = hanging.pipeline.handle(_msg("你好", conv="conv-7", customer="c4"))
    assert zh["reply"] is not None
    t.join(60)
    assert "error" not in out, out.get("error")
    response, _ = out["value"]
    text = response["reply"]["text"]
    assert "not answering" in text and "Refunded" not in text and "shipped" not in text, text
    assert response["flow"]["status"] == "waiting"
    assert "error" not in out


def test_a_turn_waiting_for_its_outside_work_gives_its_slot_to_a_turn_that_needs_none(pool):
    """The channel gateway lets a few turns at once hold a connection (TurnSlots); a turn waiting on a slow
    call holds none, so a greeting behind it in a one-slot gateway is answered before the call returns, and
    the waiting turn, once back, goes before turns that have not started."""
    from router.schemas import Decision
    from router.telemetry.metrics import Metrics
    from router.turn.passes import PENDING, TurnSlots, outside_transaction
    from router.turn.pipeline import Pipeline, TurnResult

    release = threading.Event()
    order: list[str] = []

    def decider(ctx):
        if "order" in ctx.inbound.text:
            got = outside_transaction("shop", lambda: release.wait(30) and "shipped")
            if got is PENDING:
                return TurnResult(decision=Decision(channel="none"), state=ctx.conversation["state"])
            order.append(ctx.inbound.text)
            return TurnResult(decision=Decision(channel="workflow", explanation={"status": got}),
                              state=ctx.conversation["state"])
        order.append(ctx.inbound.text)
        return TurnResult(decision=Decision(channel="none", explanation={"note": "hello"}),
                          state=ctx.conversation["state"])

    pipe = Pipeline(pool, Metrics(), decider)
    slots = TurnSlots(1)

    def turn(msg):
        with slots:
            return pipe.handle(msg)

    slow, slow_out = _in_thread(turn, _msg("where is my order 7", conv="s-1", customer="a"))
    deadline = time.monotonic() + 10
    while slots.in_use() and time.monotonic() < deadline:    # its first pass is done: it waits holding nothing
        time.sleep(0.01)
    assert slots.in_use() == 0 and slow.is_alive()
    hello, _ = turn(_msg("hello", conv="s-2", customer="b"))
    assert hello["decision"]["explanation"]["note"] == "hello" and slow.is_alive()
    # the slot is taken while the call returns: the waiting turn goes first when it is freed
    slots.acquire()
    release.set()
    late, late_out = _in_thread(turn, _msg("hi again", conv="s-3", customer="c"))
    time.sleep(0.3)
    slots.release()
    slow.join(30)
    late.join(30)
    assert "error" not in slow_out and "error" not in late_out, (slow_out, late_out)
    assert slow_out["value"][0]["decision"]["explanation"]["status"] == "shipped"
    assert order == ["hello", "where is my order 7", "hi again"]
    assert slots.in_use() == 0


def test_a_handoff_with_a_hanging_shop_answers_once_with_a_ticket_whose_memory_is_unavailable(hanging):
    """"I want to talk to a human" while the shop hangs: the turn opens the ticket in one pass, without waiting
    for the session memory; the memory, loaded when an agent reads the ticket, meets the tool deadline and the
    ticket's package says it is unavailable. The ticket is never lost to the shop."""
    assert hanging.tools.check(timeout=60) == {}    # the shop is up (it lists its tools) but no call ever returns
    out, replayed = hanging.pipeline.handle(_msg("I want to talk to a human", conv="conv-h"))
    assert not replayed and out["ticket_id"] and out["state"] == "l3_queuing", out
    assert out["decision"]["tier"] == "L3" and out["reply"] is not None
    # one pass: nothing ran outside the transaction, and the turn, its ticket and its one reply are stored
    (turn,) = rows(hanging.pool, "SELECT trace FROM turns WHERE id = %s", out["turn_id"])
    assert "outside_runs" not in turn["trace"], turn["trace"]
    (ticket,) = rows(hanging.pool, "SELECT status, kind, context FROM tickets WHERE id = %s", out["ticket_id"])
    assert ticket["status"] == "queued" and ticket["kind"] == "handoff"
    assert ticket["context"]["memory_status"] == "pending"     # nobody has read the ticket yet
    assert rows(hanging.pool, "SELECT count(*) AS n FROM outbox o JOIN conversations c ON c.id = o.conversation_id"
                              " WHERE c.external_id = 'conv-h'")[0]["n"] == 1
    # the memory's reads run when an agent reads the ticket and end at the tool deadline: the package says so
    context = ticket_memory(hanging, out["ticket_id"])
    assert context["memory_status"] == "unavailable", context.get("memory")
    memory = context["memory"]
    assert memory is None or (memory["profile"] is None and memory["orders"] == []
                              and {f["tool"] for f in memory["failed"]} == {"get_customer"})
    # the ticket is still there, queued, with everything else of its package
    (after,) = rows(hanging.pool, "SELECT status, context FROM tickets WHERE id = %s", out["ticket_id"])
    assert after["status"] == "queued" and after["context"]["transcript"] and after["context"]["decisions"]


def _memory_calls(svc, customer: str) -> list[dict]:
    svc.tools.flush_audit(5.0)
    return rows(svc.pool, "SELECT tool, status, conversation_id, turn_id FROM tool_calls WHERE caller_customer = %s"
                          " AND tool IN ('get_customer', 'list_recent_orders') ORDER BY tool, created_at", customer)


def _trace(svc, turn_id: str) -> dict:
    (turn,) = rows(svc.pool, "SELECT trace FROM turns WHERE id = %s", turn_id)
    return turn["trace"]


def test_a_new_customers_order_question_asks_its_memory_before_the_first_pass(slow):
    """The message names a workflow and the customer's memory is not kept: its calls run before the turn's first
    pass, audited for the conversation and the turn, and the turn is decided in one pass. The same decider in a
    pipeline that does not look ahead needs a rolled-back pass to discover them."""
    from router.turn.pipeline import Pipeline

    _warm(slow)
    out, _ = slow.pipeline.handle(_msg("where is my order", conv="ahead-1", customer="c1"))
    assert out["flow"]["workflow"] == "order_status" and out["reply"] is not None, out
    trace = _trace(slow, out["turn_id"])
    assert "outside_runs" not in trace and trace["timings_ms"]["ahead"] >= float(LATENCY_MS) * 0.9, trace
    # the profile and the recent orders are one call (the memory's two names ask the same call of the shop)
    calls = _memory_calls(slow, "c1")
    assert [(c["tool"], c["status"]) for c in calls] == [("get_customer", "ok")]
    assert {(c["conversation_id"], c["turn_id"]) for c in calls} == {(out["conversation_id"], out["turn_id"])}
    # the customer's next conversation finds the memory kept: nothing is asked ahead, nothing called again
    again, _ = slow.pipeline.handle(_msg("where is my order", conv="ahead-2", customer="c1"))
    assert again["flow"]["workflow"] == "order_status", again
    assert "ahead" not in _trace(slow, again["turn_id"])["timings_ms"] and len(_memory_calls(slow, "c1")) == 1
    # without the look ahead, a new customer's same question rolls a first pass back for its memory
    plain = Pipeline(slow.pool, slow.metrics, slow.pipeline.decider)
    other, _ = plain.handle(_msg("where is my order", conv="ahead-3", customer="c3"))
    assert other["flow"]["workflow"] == "order_status", other
    assert _trace(slow, other["turn_id"])["outside_runs"] == 1
    assert [c["turn_id"] for c in _memory_calls(slow, "c3")] == [other["turn_id"]]


def test_a_returning_customers_new_conversation_remembers_their_earlier_flows(slow):
    """The look ahead reads a customer's earlier outcomes (flows and tickets of their other conversations) for the
    memory it asks ahead, and skips the read only for a first contact (a customer with no other conversation), whose
    outcomes are none."""
    from automation.workflows import memory

    _warm(slow)     # c2's first contact: an order status, completed
    memory.CUSTOMERS.clear()     # the shop's part is asked again: the second look reads the outcomes
    out, _ = slow.pipeline.handle(_msg("where is my order", conv="back", customer="c2"))
    assert out["flow"]["workflow"] == "order_status", out
    kept = {r["conversation_id"]: r["data"] for r in rows(slow.pool, "SELECT c.external_id AS conversation_id,"
            " m.data FROM flow_memory m JOIN conversations c ON c.id::text = m.conversation_id WHERE m.customer_id = 'c2'")}
    assert kept["warm"]["outcomes"] == []
    assert [(o["kind"], o["workflow"], o["outcome"]) for o in kept["back"]["outcomes"]] == [
        ("flow", "order_status", "completed")], kept["back"]
    assert "ahead" in _trace(slow, out["turn_id"])["timings_ms"]


def test_two_first_messages_of_one_customer_at_once_ask_the_shop_once(slow):
    """Two conversations of a new customer start at the same moment (two tabs): each turn needs the customer's
    memory, asked once of the shop (one call per read, audited under one of the turns), and both are answered
    from it."""
    from automation.workflows.outside import READS

    _warm(slow)
    before = READS.shared
    first = _in_thread(slow.pipeline.handle, _msg("where is my order", conv="twin-1", customer="c1"))
    second = _in_thread(slow.pipeline.handle, _msg("where is my order", conv="twin-2", customer="c1"))
    for t, _ in (first, second):
        t.join(60)
    outs = [out["value"][0] for _, out in (first, second)]
    assert all(o["flow"]["workflow"] == "order_status" and "100234" in (o["reply"] or {}).get("text", "") for o in outs), outs
    calls = _memory_calls(slow, "c1")
    assert [(c["tool"], c["status"]) for c in calls] == [("get_customer", "ok")], calls
    assert {c["turn_id"] for c in calls} <= {o["turn_id"] for o in outs}
    assert READS.shared - before == 1


def test_a_message_the_harness_stops_asks_the_shop_nothing(slow):
    """Do-not-contact, a sensitive customer, crisis words: the hard checks decide before any tool, and nothing is
    asked ahead of such a turn either."""
    from router.turn.guards import set_do_not_contact, set_sensitive

    _warm(slow)
    with slow.pool.connection() as conn:
        set_do_not_contact(conn, "web", "dnc-1", True)
        set_sensitive(conn, "web", "sens-1", True)
    stopped, _ = slow.pipeline.handle(_msg("where is my order", conv="stop-1", customer="dnc-1"))
    assert stopped["decision"]["channel"] == "harness" and stopped["reply"] is None, stopped
    sensitive, _ = slow.pipeline.handle(_msg("where is my order", conv="stop-2", customer="sens-1"))
    assert sensitive["decision"]["channel"] == "harness" and sensitive["decision"]["tier"] == "L3", sensitive
    crisis, _ = slow.pipeline.handle(_msg("where is my order, I want to die", conv="stop-3", customer="cr-1"))
    assert crisis["decision"]["explanation"]["rule"] == "crisis", crisis
    slow.tools.flush_audit(5.0)
    assert rows(slow.pool, "SELECT count(*) AS n FROM tool_calls WHERE caller_customer = ANY(%s)",
                ["dnc-1", "sens-1", "cr-1"])[0]["n"] == 0
    # the same question from a customer no check stops is asked ahead (the test above would catch nothing else)
    fine, _ = slow.pipeline.handle(_msg("where is my order", conv="stop-4", customer="ok-1"))
    assert "ahead" in _trace(slow, fine["turn_id"])["timings_ms"] and len(_memory_calls(slow, "ok-1")) == 1


def _order_calls(svc, customer: str) -> list[dict]:
    svc.tools.flush_audit(5.0)
    return rows(svc.pool, "SELECT input->>'order_id' AS order_id, status, purpose, conversation_id, turn_id"
                          " FROM tool_calls WHERE caller_customer = %s AND tool = 'get_order' ORDER BY created_at", customer)


def _read_ahead_in_one_pass(svc, text: str, *, conv: str, customer: str, order: str, rounds: int) -> dict:
    """An order-status turn decided in one pass: the memory and ``order`` read ahead (no pass rolled back), in
    ``rounds`` shop latencies (1: the order named reads beside the memory; 2: the order picked from the memory, read
    once it answered); the order's read audited under the conversation and the turn."""
    _warm(svc)
    out, _ = svc.pipeline.handle(_msg(text, conv=conv, customer=customer))
    assert out["flow"]["workflow"] == "order_status" and out["flow"]["status"] == "completed", out
    assert order in out["reply"]["text"], out
    trace = _trace(svc, out["turn_id"])
    assert "outside_runs" not in trace, trace
    assert rounds * float(LATENCY_MS) * 0.9 <= trace["timings_ms"]["ahead"] < (rounds + 1) * float(LATENCY_MS), trace
    assert [s["step"] for s in trace["workflow"]["steps"] if s["tool_status"]] == ["load"], trace["workflow"]
    calls = _order_calls(svc, customer)
    assert [(c["order_id"], c["status"], c["purpose"], c["conversation_id"], c["turn_id"]) for c in calls] == [
        (order, "ok", "order_status", out["conversation_id"], out["turn_id"])], calls
    return out


def test_an_order_question_reads_its_order_before_the_first_pass(slow):
    """The message names the order: the flow's first read (get_order) is asked before the turn's first pass, beside
    the memory's call (its arguments name nothing of the memory), so the turn waits one shop round and is decided
    in one pass; the audit names the conversation and the turn. The customer's next conversation, whose memory is
    kept, reads only the order ahead."""
    _read_ahead_in_one_pass(slow, "where is my order 100234", conv="read-1", customer="c1", order="100234", rounds=1)
    again, _ = slow.pipeline.handle(_msg("order 100235 status please", conv="read-2", customer="c1"))
    assert again["flow"]["status"] == "completed" and "100235" in again["reply"]["text"], again
    trace = _trace(slow, again["turn_id"])
    assert "outside_runs" not in trace and float(LATENCY_MS) * 0.9 <= trace["timings_ms"]["ahead"] \
        < 2 * float(LATENCY_MS), trace
    assert len(_memory_calls(slow, "c1")) == 1
    calls = _order_calls(slow, "c1")
    assert [(c["order_id"], c["conversation_id"], c["turn_id"]) for c in calls[1:]] == [
        ("100235", again["conversation_id"], again["turn_id"])], calls


def test_a_wrong_guess_ahead_costs_a_shop_call_not_the_decision(slow):
    """A look ahead that guessed another read (here: it read another message's order under the same turn) leaves
    the turn to decide as a pipeline without any look ahead does: it reads its own order in a pass of its own; the
    guessed read stays in the audit only."""
    from router.turn.pipeline import Pipeline

    _warm(slow)
    decider = slow.pipeline.decider

    def guess(msg, connect):
        return decider.ahead(msg.model_copy(update={"text": "where is my order 100235"}), connect)

    out, _ = Pipeline(slow.pool, slow.metrics, decider, ahead=guess).handle(
        _msg("where is my order 100234", conv="guess-1", customer="c1"))
    alone, _ = Pipeline(slow.pool, slow.metrics, decider).handle(
        _msg("where is my order 100234", conv="guess-2", customer="c1"))
    for key in ("decision", "state"):
        assert _comparable(out[key]) == _comparable(alone[key]), (out[key], alone[key])
    assert out["reply"]["text"] == alone["reply"]["text"] and "100234" in out["reply"]["text"], out
    assert _trace(slow, out["turn_id"])["outside_runs"] == 1          # its own read needed a pass
    mine = [(c["order_id"], c["status"]) for c in _order_calls(slow, "c1") if c["turn_id"] == out["turn_id"]]
    assert sorted(mine) == [("100234", "ok"), ("100235", "ok")], mine


def _comparable(value):
    """A turn's decision or state without what differs between two conversations (ids, times)."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()
                if k not in ("id", "instance_id", "conversation_id", "turn_id", "ticket_id", "at", "ms")}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def test_a_known_customers_only_order_is_read_before_the_first_pass(slow):
    """A customer the shop knows, with one recent order, asks without naming it: the flow picks that order from the
    memory and reads it. Both are asked ahead (the memory, then, once it answered, the order it names), so the turn
    is decided in one pass; the audit names the conversation and the turn."""
    out = _read_ahead_in_one_pass(slow, "where is my order", conv="only-1", customer="c6", order="100280",
                                 rounds=2)
    assert [(c["tool"], c["turn_id"]) for c in _memory_calls(slow, "c6")] == [
        ("get_customer", out["turn_id"])]
