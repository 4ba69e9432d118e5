"""Writes to a server that takes no idempotency argument, and answers it wraps: the second shop behind
``second_shop/wrapped_server.py`` (real MCP over stdio), declared by ``second_shop/tools_wrapped.yaml``.

The gateway keeps the write's key in the durable audit, never sends a write twice once its answer was lost,
reads the audit (and the declared read-back) before a repeat of the key, and answers the same write made
earlier in the conversation from the audit instead of writing again.
"""

from __future__ import annotations

import time

import pytest

from automation.tools import Caller
from flow_testkit import SECOND_SHOP, TEST_CALLER_PURPOSE
from tool_servers import gateway_env

AVA = Caller("web", "cus_ava", conversation_id="conv-unkeyed", turn_id="t1", purpose="cancel_order")
TESTS = Caller("test", "tests", purpose=TEST_CALLER_PURPOSE)


@pytest.fixture
def wrapped(pool):
    from automation.tools import load_tool_gateway

    gw = load_tool_gateway(SECOND_SHOP / "tools_wrapped.yaml", pool=pool, variables=gateway_env(
        TRAILHEAD_WRAPPED_SERVER=str(SECOND_SHOP / "wrapped_server.py")))
    gw.call("debug_reset", {}, TESTS)
    yield gw
    gw.close()


def _writes(gw) -> list[dict]:
    res = gw.call("debug_dump", {}, TESTS)
    assert res.ok, res.error
    return res.output["writes"]


def _audit(gw, pool, tool: str) -> list[tuple]:
    assert gw.flush_audit()
    with pool.connection() as conn:
        rows = conn.execute("SELECT status, risk, attempts, idempotency_key, error FROM tool_calls WHERE tool = %s"
                            " ORDER BY created_at", (tool,)).fetchall()
    return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows]


def test_unwrapped_results_and_writes_answered_from_the_audit(wrapped, pool):
    """Unwrapping; a write's own repeat (same key) and the same write in the conversation, from the audit."""
    res = wrapped.call("get_order_details", {"order_ref": "W1003"}, AVA)
    assert res.ok and res.output["order_ref"] == "W1003" and "parsed_content" not in res.output
    refused = wrapped.call("get_order_details", {"order_ref": "W1001"}, Caller("web", "cus_nobody", purpose="x"))
    assert refused.status == "error" and "order not found" in refused.error

    args = {"order_ref": "W1002", "reason": "ordered by mistake"}
    first = wrapped.call("cancel_pending_order", args, AVA, idempotency_key="flow:i3:cancel")
    assert first.ok and first.attempts == 1 and first.output["status"] == "cancelled"
    again = wrapped.call("cancel_pending_order", args, AVA, idempotency_key="flow:i3:cancel")
    assert again.ok and again.earlier["via"] == "key" and again.output["order_ref"] == "W1002"
    assert len(_writes(wrapped)) == 1

    address = {"line1": "9 Pine Rd", "line2": "", "city": "Bend", "state": "OR", "zip": "97701", "country": "US"}
    first = wrapped.call("update_customer_address", {"address": address}, AVA, idempotency_key="flow:a:s1")
    second = wrapped.call("update_customer_address", {"address": address}, AVA, idempotency_key="flow:b:s1")
    assert first.ok and first.earlier is None
    assert second.ok and second.earlier["via"] == "conversation" and second.earlier["call_id"] == first.call_id
    assert len(_writes(wrapped)) == 2
    other = wrapped.call("update_customer_address", {"address": {**address, "zip": "97702"}}, AVA,
                         idempotency_key="flow:c:s1")
    elsewhere = wrapped.call("update_customer_address", {"address": address},
                             Caller("web", "cus_ava", conversation_id="conv-other", purpose="x"),
                             idempotency_key="flow:d:s1")
    allowed = wrapped.call("update_customer_address", {"address": address}, AVA, idempotency_key="flow:e:s1",
                           repeat=True)
    assert other.earlier is None and elsewhere.earlier is None and allowed.earlier is None
    assert len(_writes(wrapped)) == 5
    assert {r[1] for r in _audit(wrapped, pool, "update_customer_address")} == {"write"}


def test_an_unknown_outcome_is_not_sent_again_and_the_read_back_answers_the_repeat(wrapped, pool):
    wrapped.call("debug_slow", {"tool": "cancel_pending_order", "seconds": 3}, TESTS)
    args = {"order_ref": "W1002", "reason": "no longer needed"}
    first = wrapped.call("cancel_pending_order", args, AVA, idempotency_key="flow:i1:cancel")
    # retry.attempts is 3, but the request was sent: the server may have written, so it is not repeated
    assert first.status == "unknown" and first.attempts == 1
    time.sleep(1.5)   # the server finishes its late answer
    again = wrapped.call("cancel_pending_order", args, AVA, idempotency_key="flow:i1:cancel")
    assert again.ok and again.earlier["via"] == "read_back" and again.output["status"] == "cancelled"
    assert [w["tool"] for w in _writes(wrapped)] == ["cancel_pending_order"]   # written once
    rows = _audit(wrapped, pool, "cancel_pending_order")
    assert [(r[0], r[1], r[2]) for r in rows] == [("unknown", "money", 1), ("ok", "money", 0)]
    assert rows[0][3] == rows[1][3] == "flow:i1:cancel" and "read_back" in rows[1][4]

    # without a read-back (modify_pending_order_address declares none) the repeat is refused, not written
    wrapped.call("debug_slow", {"tool": "modify_pending_order_address", "seconds": 3}, TESTS)
    args = {"order_ref": "W1001", "address": {"line1": "1 Elm St", "line2": "", "city": "Salem", "state": "OR",
                                              "zip": "97301", "country": "US"}}
    first = wrapped.call("modify_pending_order_address", args, AVA, idempotency_key="flow:i2:addr")
    assert first.status == "unknown"
    time.sleep(1.5)
    again = wrapped.call("modify_pending_order_address", args, AVA, idempotency_key="flow:i2:addr")
    assert again.status == "unknown" and again.attempts == 0 and "not written again" in again.error
    assert len(_writes(wrapped)) == 2
