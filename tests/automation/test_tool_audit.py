"""The audit's two ways of writing, on the example shop over MCP stdio and a real Postgres: a money tool's
row is committed before its result comes back; a read's row is committed by the audit thread, and
``flush_audit``/``close`` wait for it."""

from __future__ import annotations


def _rows(pool):
    with pool.connection() as conn:
        return conn.execute("SELECT id::text AS id, tool, status, risk, turn_id, created_at FROM tool_calls"
                            " ORDER BY created_at, id").fetchall()


def test_a_money_tools_row_is_committed_before_its_result_is_returned(shop_gateway, pool, web_c1):
    from automation.tools import Caller

    refund = Caller(channel="web", customer_id="c1", conversation_id="conv-1", turn_id="turn-9", purpose="refund")
    r = shop_gateway.call("request_refund", {"order_id": "100235", "amount": 5, "reason": "late"}, refund,
                          idempotency_key="k-durable")
    assert r.ok, r
    assert shop_gateway._audit_writer._queued == 0     # it never went through the audit thread's queue
    # no flush: the row is already there, seen from another connection
    assert [(x["id"], x["tool"], x["risk"], x["turn_id"]) for x in _rows(pool)] == [
        (r.call_id, "request_refund", "money", "turn-9")]


def test_read_rows_are_written_by_the_audit_thread_and_flushed(shop_gateway, pool, web_c1):
    results = [shop_gateway.call("get_order", {"order_id": "100234"}, web_c1) for _ in range(5)]
    assert all(r.ok for r in results)
    assert shop_gateway.flush_audit(10)
    rows = _rows(pool)
    assert [x["id"] for x in rows] == [r.call_id for r in results]      # in the order the calls happened
    assert {(x["tool"], x["status"], x["turn_id"]) for x in rows} == {("get_order", "ok", "turn-1")}


def test_close_writes_what_is_still_queued(pool, web_c1):
    from automation.tools import load_tool_gateway
    from tool_servers import gateway_env

    gw = load_tool_gateway(None, pool=pool, variables=gateway_env())
    try:
        ids = [gw.call("get_order", {"order_id": "100234"}, web_c1).call_id for _ in range(3)]
        gw._guards["track_shipment"].breaker.open()
        short = gw.call("track_shipment", {"order_id": "100234"}, web_c1)
        assert short.status == "breaker_open" and short.attempts == 0
        ids.append(short.call_id)
    finally:
        gw.close()
    rows = _rows(pool)
    assert [x["id"] for x in rows] == ids
    assert [x["status"] for x in rows] == ["ok", "ok", "ok", "breaker_open"]


def test_a_conversations_flush_waits_for_its_own_rows_only(shop_gateway, pool, web_c1):
    """A turn reading its conversation's calls back (a ticket's context package) waits for that conversation's
    queued rows: all of them are committed when it returns; another conversation's rows do not hold it up."""
    from automation.tools import Caller

    writer = shop_gateway._audit_writer
    other = Caller(channel="web", customer_id="c2", conversation_id="conv-other", turn_id="turn-o", purpose="test")
    mine = [shop_gateway.call("get_order", {"order_id": "100234"}, web_c1).call_id for _ in range(3)]
    shop_gateway.call("list_recent_orders", {"limit": 5}, other)
    assert shop_gateway.flush_audit(10, conversation_id=web_c1.conversation_id)
    with pool.connection() as conn:
        got = [r["id"] for r in conn.execute("SELECT id::text AS id FROM tool_calls WHERE conversation_id = %s"
                                             " ORDER BY created_at", (web_c1.conversation_id,)).fetchall()]
    assert got == mine
    assert shop_gateway.flush_audit(10)
    assert writer._waiting == {}            # every conversation's count is back to none once all is written
    # a conversation with nothing queued returns at once, without waiting on the writer thread at all
    with writer._done:
        assert writer.flush(0.0, conversation_id="conv-nothing") is True
