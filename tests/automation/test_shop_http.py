"""The example shop as its own process over MCP streamable HTTP, and the gateway reconnecting after a restart."""

from __future__ import annotations

import json
import subprocess
import sys

from tool_servers import REPO, gateway_env, shop_dump, wait_for_port


def _gateway(pool, url):
    from automation.tools import ToolSettings, build_tool_gateway

    # the composer's helper with the settings it would read from SWITCHBOARD_SHOP_URL
    return build_tool_gateway(ToolSettings(shop_url=url), pool=pool)


def _caller(purpose="order_status"):
    from automation.tools import Caller

    return Caller(channel="web", customer_id="c2", conversation_id="conv-h", purpose=purpose)


def test_shop_over_streamable_http(shop_http, pool, dsn):
    url, _, _ = shop_http
    gw = _gateway(pool, url)
    try:
        assert gw._transports["shop"].kind == "mcp-http"
        r = gw.call("get_order", {"order_id": "100241"}, _caller())
        assert r.ok and r.output["order"]["carrier"] == "FedEx" and r.output["order"]["status"] == "shipped"
        foreign = gw.call("get_order", {"order_id": "100234"}, _caller())
        assert foreign.ok and foreign.output["found"] is False
        first = gw.call("cancel_order", {"order_id": "100242", "reason": "changed my mind"},
                        _caller("cancel_order"), idempotency_key="h-1")
        again = gw.call("cancel_order", {"order_id": "100242", "reason": "changed my mind"},
                        _caller("cancel_order"), idempotency_key="h-1")
        assert first.ok and again.ok and again.output["repeated"] is True
    finally:
        gw.close()
    order = next(o for o in shop_dump(dsn)["orders"] if o["order_id"] == "100242")
    assert order["status"] == "cancelled" and len(order["writes"]) == 1


def test_the_gateway_reconnects_after_the_server_restarts(shop_http, pool, dsn):
    url, proc, port = shop_http
    gw = _gateway(pool, url)
    try:
        assert gw.call("get_customer", {}, _caller()).ok
        proc.terminate()
        proc.wait(10)
        down = gw.call("get_customer", {}, _caller())
        assert down.status in ("error", "timeout") and down.output is None
        again = subprocess.Popen([sys.executable, "-m", "examples.shop", "--http", "--port", str(port),
                                  "--reload", "changed"], env=gateway_env(SWITCHBOARD_DATABASE_URL=dsn), cwd=REPO,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(port, again)
            up = gw.call("get_customer", {}, _caller())
            assert up.ok and up.output["customer"]["customer_id"] == "c2"
            assert gw._transports["shop"].connects == 2
        finally:
            again.terminate()
            again.wait(10)
    finally:
        gw.close()


def test_shop_data_file_and_reload_changed(dsn, tmp_path):
    data = {"customers": [{"customer_id": "u1", "name": "Ada", "phone": None}],
            "orders": [{"order_id": "5001", "customer_id": "u1", "status": "paid",
                        "items": [{"sku": "A", "name": "Apple", "qty": 3, "price": 1.5}], "total": 4.5,
                        "currency": "EUR", "paid_at": "2026-11-30T10:00:00+00:00", "shipped_at": None,
                        "delivered_at": None, "carrier": None, "tracking_no": None, "address": "1 Main St"}]}
    path = tmp_path / "shop.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    from examples.shop.store import Shop

    shop = Shop(dsn, max_size=1)
    try:
        assert shop.load(path) is True
        shop.cancel_order("u1", "5001", "", "k1")
        assert shop.load(path, reload="changed") is False  # same file: the writes stay
        assert shop.dump()["orders"][0]["status"] == "cancelled"
        assert shop.load(path) is True  # always: replaced
        assert shop.dump()["orders"][0] == {"order_id": "5001", "customer_id": "u1", "status": "paid", "total": 4.5,
                                            "currency": "EUR", "address": "1 Main St", "carrier": None,
                                            "tracking_no": None, "writes": []}
    finally:
        shop.close()
    text = subprocess.run([sys.executable, "-m", "examples.shop", "dump", "--dsn", dsn], cwd=REPO, env=gateway_env(),
                          capture_output=True, text=True, timeout=120, check=True).stdout
    assert "5001" in text and "1 orders, 1 customers, 0 writes" in text
