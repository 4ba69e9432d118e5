"""The example shop through the tool gateway over MCP stdio (the bundled tools.yaml), on this test's database."""

from __future__ import annotations

import json

from tool_servers import shop_dump


def _caller(customer: str = "c1", purpose: str = "order_status", channel: str = "web"):
    from automation.tools import Caller

    return Caller(channel=channel, customer_id=customer, conversation_id="conv-9", turn_id="turn-9", purpose=purpose)


def test_order_status_from_the_shop(shop_gateway, web_c1):
    r = shop_gateway.call("get_order", {"order_id": "100234"}, web_c1)
    assert r.ok and r.attempts == 1 and r.call_id
    order = r.output["order"]
    assert r.output["found"] is True
    assert (order["status"], order["carrier"], order["tracking_no"]) == ("shipped", "顺丰速运", "SF1402837465299")
    assert order["total"] == 638.0 and order["currency"] == "CNY"
    r = shop_gateway.call("track_shipment", {"order_id": "100234"}, web_c1)
    assert r.ok and r.output["shipment"]["tracking_no"] == "SF1402837465299"


def test_an_order_that_came_refunded_reads_as_refunded_in_full(shop_gateway):
    """The record is one story: an order whose status is refunded (here from the shop's data, with no refund made
    through the tool) has its whole total refunded, as a refund of what was left makes it so."""
    r = shop_gateway.call("get_order", {"order_id": "100250"}, _caller("c3"))
    order = r.output["order"]
    assert r.ok and order["status"] == "refunded" and order["refunded"] == order["total"] == 459.0
    r = shop_gateway.call("get_order", {"order_id": "100251"}, _caller("c3"))
    assert r.ok and r.output["order"]["status"] == "delivered" and r.output["order"]["refunded"] == 0


def test_recent_orders_and_profile_are_the_callers(shop_gateway, web_c1):
    r = shop_gateway.call("list_recent_orders", {"limit": 10}, web_c1)
    assert r.ok
    assert [o["order_id"] for o in r.output["orders"]] == ["100236", "100235", "100234", "100230"]
    r = shop_gateway.call("get_customer", {}, _caller("c2"))
    assert r.ok and r.output["customer"]["name"] == "Emily Carter" and r.output["customer"]["order_count"] == 4


def test_another_customers_order_reveals_nothing(shop_gateway):
    c2 = _caller("c2")
    # 100234 is c1's; the arguments even name c1, but the gateway passes the verified caller (c2)
    foreign = shop_gateway.call("get_order", {"order_id": "100234", "customer_id": "c1"}, c2)
    missing = shop_gateway.call("get_order", {"order_id": "999999", "customer_id": "c1"}, c2)
    assert foreign.ok and missing.ok
    assert foreign.output == {"found": False, "order_id": "100234", "order": None}
    assert missing.output == {"found": False, "order_id": "999999", "order": None}
    shipment = shop_gateway.call("track_shipment", {"order_id": "100234"}, c2)
    assert shipment.output == {"found": False, "order_id": "100234", "shipment": None}
    refund = shop_gateway.call("request_refund", {"order_id": "100234", "amount": 1, "customer_id": "c1"},
                               _caller("c2", "refund"), idempotency_key="k-foreign")
    nothing = shop_gateway.call("request_refund", {"order_id": "999999", "amount": 1},
                                _caller("c2", "refund"), idempotency_key="k-nothing")
    assert refund.status == nothing.status == "error" and "not_found" in refund.error
    assert refund.error.replace("100234", "N") == nothing.error.replace("999999", "N")
    recent = shop_gateway.call("list_recent_orders", {"limit": 20}, c2)
    assert recent.ok and "100234" not in str(recent.output)


def test_a_write_without_idempotency_key_is_refused(shop_gateway, dsn):
    assert shop_gateway.check() == {}  # the shop is up and loaded
    r = shop_gateway.call("cancel_order", {"order_id": "100235"}, _caller(purpose="cancel_order"))
    assert r.status == "invalid_input" and "idempotency key" in r.error and r.attempts == 0
    order = next(o for o in shop_dump(dsn)["orders"] if o["order_id"] == "100235")
    assert order["status"] == "paid" and order["writes"] == []


def test_a_purpose_outside_allowed_for_is_denied(shop_gateway):
    r = shop_gateway.call("request_refund", {"order_id": "100235", "amount": 10}, _caller(purpose="small_talk"),
                          idempotency_key="k-denied")
    assert r.status == "denied" and r.output is None and r.attempts == 0
    r = shop_gateway.call("get_order", {"order_id": "100235", "customer_id": "c1"}, _caller(customer=""))
    assert r.status == "denied" and "verified customer" in r.error


def test_a_repeated_refund_with_the_same_key_changes_the_shop_once(shop_gateway, dsn):
    c1 = _caller(purpose="refund")
    first = shop_gateway.call("request_refund", {"order_id": "100234", "amount": 30}, c1, idempotency_key="k-r1")
    again = shop_gateway.call("request_refund", {"order_id": "100234", "amount": 30}, c1, idempotency_key="k-r1")
    assert first.ok and again.ok
    assert first.output["repeated"] is False and again.output["repeated"] is True
    assert {k: v for k, v in again.output.items() if k != "repeated"} == {
        k: v for k, v in first.output.items() if k != "repeated"}
    assert first.output["remaining"] == 608.0
    order = next(o for o in shop_dump(dsn)["orders"] if o["order_id"] == "100234")
    assert [(w["tool"], w["idempotency_key"]) for w in order["writes"]] == [("request_refund", "k-r1")]
    got = shop_gateway.call("get_order", {"order_id": "100234"}, _caller())
    assert got.output["order"]["refunded"] == 30.0


def test_refund_cannot_exceed_what_is_left(shop_gateway, dsn):
    c1 = _caller(purpose="refund")
    assert shop_gateway.call("request_refund", {"order_id": "100230", "amount": 200}, c1,
                             idempotency_key="k-a").ok
    over = shop_gateway.call("request_refund", {"order_id": "100230", "amount": 100}, c1, idempotency_key="k-b")
    assert over.status == "error" and "amount_too_high" in over.error and over.output is None
    rest = shop_gateway.call("request_refund", {"order_id": "100230", "amount": 56}, c1, idempotency_key="k-c")
    assert rest.ok and rest.output["status"] == "refunded" and rest.output["remaining"] == 0
    order = next(o for o in shop_dump(dsn)["orders"] if o["order_id"] == "100230")
    assert order["status"] == "refunded" and len(order["writes"]) == 2


def test_address_and_cancel_only_before_shipping(shop_gateway, dsn):
    moved = shop_gateway.call("change_address", {"order_id": "100235", "address": "上海市徐汇区漕溪北路 1 号"},
                              _caller(purpose="change_address"), idempotency_key="k-addr")
    assert moved.ok and moved.output["address"] == "上海市徐汇区漕溪北路 1 号"
    shipped = shop_gateway.call("change_address", {"order_id": "100234", "address": "somewhere else 1"},
                                _caller(purpose="change_address"), idempotency_key="k-addr2")
    assert shipped.status == "error" and "already_shipped" in shipped.error
    cancel = shop_gateway.call("cancel_order", {"order_id": "100234"}, _caller(purpose="cancel_order"),
                               idempotency_key="k-c1")
    assert cancel.status == "error" and "already_shipped" in cancel.error
    cancel = shop_gateway.call("cancel_order", {"order_id": "100236"}, _caller(purpose="cancel_order"),
                               idempotency_key="k-c2")
    assert cancel.ok and cancel.output["status"] == "cancelled"
    orders = {o["order_id"]: o for o in shop_dump(dsn)["orders"]}
    assert orders["100235"]["address"] == "上海市徐汇区漕溪北路 1 号"
    assert orders["100234"]["status"] == "shipped" and orders["100234"]["writes"] == []
    assert orders["100236"]["status"] == "cancelled"
    assert cancel.output["refund_amount"] == 0      # nothing was paid
    # a paid order's cancellation gives the payment back, and the order's record says so, as its reply did
    paid = shop_gateway.call("cancel_order", {"order_id": "100235"}, _caller(purpose="cancel_order"),
                             idempotency_key="k-c3")
    order = shop_gateway.call("get_order", {"order_id": "100235"}, _caller()).output["order"]
    assert paid.ok and paid.output["refund_amount"] == order["refunded"] == order["total"] == 90.0
    assert order["status"] == "cancelled"


def test_invoice_once_per_order(shop_gateway):
    c3 = _caller("c3", purpose="invoice")
    r = shop_gateway.call("issue_invoice", {"order_id": "100251", "title": "北京某某科技有限公司",
                                            "tax_id": "91110105MA01ABCD2X"}, c3, idempotency_key="k-i1")
    assert r.ok and r.output["invoice_no"] == "INV-100251" and r.output["amount"] == 138.0
    again = shop_gateway.call("issue_invoice", {"order_id": "100251", "title": "Other Ltd"}, c3,
                              idempotency_key="k-i2")
    assert again.status == "error" and "already_invoiced" in again.error
    bad = shop_gateway.call("issue_invoice", {"order_id": "100251", "title": "X", "tax_id": "not a tax id"}, c3,
                            idempotency_key="k-i3")
    assert bad.status == "invalid_input"


def test_input_violations_are_refused_before_the_shop_sees_them(shop_gateway, dsn, pool):
    assert shop_gateway.check() == {}
    c1 = _caller(purpose="refund")
    for args in ({"order_id": "100234; DROP TABLE shop.orders", "amount": 1},
                 {"order_id": "100234", "amount": -5},
                 {"order_id": "100234", "amount": 5, "note": "unknown field"}):
        r = shop_gateway.call("request_refund", args, c1, idempotency_key="k-bad")
        assert r.status == "invalid_input" and r.attempts == 0
    assert all(o["writes"] == [] for o in shop_dump(dsn)["orders"])


def test_the_audit_rows(shop_gateway, pool):
    caller = _caller(purpose="refund")
    shop_gateway.call("get_customer", {}, caller)
    shop_gateway.call("request_refund", {"order_id": "100235", "amount": 10, "reason": "call me at 13800138001"},
                      caller, idempotency_key="k-audit")
    assert shop_gateway.flush_audit()
    with pool.connection() as conn:
        rows = conn.execute("SELECT * FROM tool_calls ORDER BY created_at").fetchall()
    assert [(r["tool"], r["status"], r["risk"]) for r in rows] == [
        ("get_customer", "ok", "read"), ("request_refund", "ok", "money")]
    profile, refund = rows
    assert profile["output"]["customer"]["phone"] == "[redacted]"  # personal fields are masked in the audit
    assert refund["input"]["reason"] == "call me at [number]"
    assert refund["input"]["customer_id"] == "c1" and refund["idempotency_key"] == "k-audit"
    assert refund["output"]["amount"] == 10 and refund["attempts"] == 1
    assert (refund["conversation_id"], refund["turn_id"], refund["purpose"]) == ("conv-9", "turn-9", "refund")
    assert (refund["caller_channel"], refund["caller_customer"]) == ("web", "c1")
    assert refund["latency_ms"] > 0

    from automation.tools.audit import calls_for_conversation, calls_for_turn

    assert [c["tool"] for c in calls_for_turn(pool, "turn-9")] == ["get_customer", "request_refund"]
    assert [c["id"] for c in calls_for_conversation(pool, "conv-9", limit=1)] == [str(refund["id"])]


def test_check_finds_every_remote_tool(shop_gateway):
    assert shop_gateway.check() == {}
    spec = shop_gateway.spec("request_refund")
    assert spec.risk == "money" and spec.caller_arguments == ["order_id", "amount", "reason"]
    assert set(spec.description) == {"zh", "en"}


def _descendants(pid: int) -> list[int]:
    from pathlib import Path

    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            out += [int(child), *_descendants(int(child))]
    return out


def test_a_dead_stdio_server_is_restarted_on_the_next_call(shop_gateway, web_c1):
    import os
    import signal
    from pathlib import Path

    assert shop_gateway.call("get_customer", {}, web_c1).ok
    shops = [p for p in _descendants(os.getpid())
             if b"examples.shop" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(shops) == 1
    os.kill(shops[0], signal.SIGKILL)
    r = shop_gateway.call("get_order", {"order_id": "100235"}, web_c1)  # a read: retried on a new session
    assert r.ok and r.output["order"]["status"] == "paid"
    assert shop_gateway._transports["shop"].connects == 2


def test_concurrent_calls_share_one_session_and_a_key_writes_once(shop_gateway, dsn):
    from concurrent.futures import ThreadPoolExecutor

    reads = [("get_order", {"order_id": oid}, _caller(), None) for oid in ("100230", "100234", "100235") * 4]
    writes = [("request_refund", {"order_id": "100251", "amount": 20}, _caller("c3", "refund"), "same-key")] * 5
    with ThreadPoolExecutor(8) as pool_:
        results = list(pool_.map(lambda a: shop_gateway.call(a[0], a[1], a[2], idempotency_key=a[3]),
                                 reads + writes))
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    assert {r.output["order"]["order_id"] for r in results[:12]} == {"100230", "100234", "100235"}
    refunds = results[12:]
    assert sum(not r.output["repeated"] for r in refunds) == 1
    assert len({r.output["refund_id"] for r in refunds}) == 1
    order = next(o for o in shop_dump(dsn)["orders"] if o["order_id"] == "100251")
    assert len(order["writes"]) == 1
    assert shop_gateway._transports["shop"].connects == 1
    # the bundled budget of request_refund is 5 calls a minute per customer
    sixth = shop_gateway.call("request_refund", {"order_id": "100251", "amount": 20}, _caller("c3", "refund"),
                              idempotency_key="same-key")
    assert sixth.status == "rate_limited" and sixth.attempts == 0
    other = shop_gateway.call("request_refund", {"order_id": "100235", "amount": 1}, _caller("c1", "refund"),
                              idempotency_key="other-customer")
    assert other.ok


def _at_once(gw, n: int) -> list:
    """``n`` customers of c1's asking the shop for the same order at the same moment, one thread each."""
    from concurrent.futures import ThreadPoolExecutor

    from automation.tools import Caller

    callers = [Caller(channel="web", customer_id="c1", conversation_id=f"conv-{i}", turn_id=f"turn-{i}",
                      purpose="order_status") for i in range(n)]
    with ThreadPoolExecutor(n) as threads:
        return list(threads.map(lambda c: gw.call("get_order", {"order_id": "100235"}, c), callers))


def test_calls_to_a_slow_shop_are_all_in_its_hands_at_once(pool, tmp_path):
    """48 customers asking a slow shop at once: the bundled bulkhead, the one MCP session and the shop itself let
    every call through together, so each waits the shop's latency once, not behind the others. The shop holds
    each call until all 48 are in its hands together (``--gather``), so no clock is read: a gateway passing
    fewer at once never fills the round, which answers after its patience with every call marked ungathered."""
    from automation.tools import load_tool_gateway
    from automation.tools.config import BUNDLED_TOOLS
    from tool_servers import gateway_env

    n = 48
    text = BUNDLED_TOOLS.read_text(encoding="utf-8")
    assert "max_concurrent: 64" in text and "timeout: 3\n" in text
    tools = tmp_path / "tools.yaml"   # the reads' 3 s also bounds the wait for a full round: raised past patience
    tools.write_text(text.replace("timeout: 3\n", "timeout: 60\n"), encoding="utf-8")
    log = tmp_path / "calls.jsonl"
    gw = load_tool_gateway(tools, pool=pool, variables=gateway_env(SWITCHBOARD_SHOP_LATENCY_MS="400",
                                                                   SWITCHBOARD_SHOP_GATHER=str(n),
                                                                   SWITCHBOARD_SHOP_CALLS_LOG=str(log)))
    try:
        results = _at_once(gw, n)
        assert [r.status for r in results] == ["ok"] * n
        calls = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
        assert len(calls) == n and {c["tool"] for c in calls} == {"get_order"}
        assert all(c["gathered"] for c in calls), f"{sum(not c['gathered'] for c in calls)} calls were not in hand " \
                                                  f"together with {n - 1} others"
    finally:
        gw.close()


def test_a_gathering_shop_tells_calls_that_came_one_at_a_time(pool, tmp_path):
    """The other side of the test above: with a bulkhead of 1 the shop never has 2 calls at once, and each
    round ends by the shop's patience with its call marked ungathered (the check above can fail)."""
    from automation.tools import load_tool_gateway
    from automation.tools.config import BUNDLED_TOOLS
    from tool_servers import gateway_env

    text = BUNDLED_TOOLS.read_text(encoding="utf-8")
    tools = tmp_path / "tools.yaml"
    tools.write_text(text.replace("max_concurrent: 64", "max_concurrent: 1").replace("timeout: 3\n", "timeout: 30\n"),
                     encoding="utf-8")
    log = tmp_path / "calls.jsonl"
    gw = load_tool_gateway(tools, pool=pool, variables=gateway_env(SWITCHBOARD_SHOP_GATHER="2",
                                                                   SWITCHBOARD_SHOP_GATHER_PATIENCE="1",
                                                                   SWITCHBOARD_SHOP_CALLS_LOG=str(log)))
    try:
        results = _at_once(gw, 2)
        assert [r.status for r in results] == ["ok"] * 2
        calls = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
        assert [c["gathered"] for c in calls] == [False, False]
    finally:
        gw.close()


def test_the_bulkhead_still_bounds_the_calls_a_slow_shop_has_in_hand(pool, tmp_path):
    """The tools file's ``max_concurrent`` is what a server gets at once: with 4, twelve customers asking a slow shop
    never give it more than 4 calls at a time (from the shop's own record), and every one is answered in turn."""
    from automation.tools import load_tool_gateway
    from automation.tools.config import BUNDLED_TOOLS
    from tool_servers import gateway_env

    text = BUNDLED_TOOLS.read_text(encoding="utf-8")
    assert "max_concurrent: 64" in text
    tools = tmp_path / "tools.yaml"
    # the reads' timeout (3 s) also bounds a call's wait for a slot: raised, so that a loaded machine's slower
    # rounds of 4 wait for their turn instead of being refused
    assert "timeout: 3\n" in text
    tools.write_text(text.replace("max_concurrent: 64", "max_concurrent: 4").replace("timeout: 3\n", "timeout: 30\n"),
                     encoding="utf-8")
    log = tmp_path / "calls.jsonl"
    gw = load_tool_gateway(tools, pool=pool, variables=gateway_env(SWITCHBOARD_SHOP_LATENCY_MS="300",
                                                                   SWITCHBOARD_SHOP_CALLS_LOG=str(log)))
    try:
        results = _at_once(gw, 12)
        assert [r.status for r in results] == ["ok"] * 12
        calls = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
        assert len(calls) == 12
        events = sorted([(c["end"], -1) for c in calls] + [(c["start"], 1) for c in calls])   # an end before a start
        in_hand = most = 0
        for _, step in events:
            in_hand += step
            most = max(most, in_hand)
        assert most == 4
    finally:
        gw.close()
