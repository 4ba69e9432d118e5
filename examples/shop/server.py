"""The example shop as an MCP server (the SDK's ``MCPServer``, called FastMCP before mcp 2).

Every tool takes the customer id first; the tool gateway fills it with the verified identity, so a customer
only ever sees their own orders. Refusals are tool errors whose text starts with a stable code
(``not_found``, ``already_shipped``, ``amount_too_high``, ...).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from examples.shop.store import Shop, ShopError


def build_server(shop: Shop, *, latency_ms: float = 0.0, hang: bool = False) -> MCPServer:
    """The shop's tools; ``latency_ms`` delays every answer and ``hang`` never answers (benchmarks, tests:
    a slow or stuck business system). Tools run on the SDK's worker threads, so a delay holds only its call."""
    app = MCPServer("example-shop", instructions="A small shop: orders, shipments, refunds, invoices.",
                    log_level="WARNING")
    stuck = threading.Event()   # never set: a hanging shop's calls wait on it

    def guarded(fn, *args):
        if hang:
            stuck.wait()
        if latency_ms > 0:
            time.sleep(latency_ms / 1000.0)
        try:
            return fn(*args)
        except ShopError as exc:
            raise ToolError(str(exc)) from None

    @app.tool(description="A customer's profile: name, phone and how many orders they have.")
    def get_customer(customer_id: str) -> dict[str, Any]:
        return guarded(shop.get_customer, customer_id)

    @app.tool(description="One of the customer's orders with status, items, totals, shipment and refunds.")
    def get_order(customer_id: str, order_id: str) -> dict[str, Any]:
        return guarded(shop.get_order, customer_id, order_id)

    @app.tool(description="The customer's most recent orders, newest first.")
    def list_recent_orders(customer_id: str, limit: int = 5) -> dict[str, Any]:
        return guarded(shop.list_recent_orders, customer_id, limit)

    @app.tool(description="Carrier, tracking number and shipping dates of one of the customer's orders.")
    def track_shipment(customer_id: str, order_id: str) -> dict[str, Any]:
        return guarded(shop.track_shipment, customer_id, order_id)

    @app.tool(description="Change the delivery address of an order that has not shipped yet.")
    def change_address(customer_id: str, order_id: str, address: str, idempotency_key: str) -> dict[str, Any]:
        return guarded(shop.change_address, customer_id, order_id, address, idempotency_key)

    @app.tool(description="Refund part or all of an order (at most the total minus earlier refunds).")
    def request_refund(customer_id: str, order_id: str, amount: float, idempotency_key: str,
                       reason: str = "") -> dict[str, Any]:
        return guarded(shop.request_refund, customer_id, order_id, amount, reason, idempotency_key)

    @app.tool(description="Issue the invoice of an order, with a title and an optional tax id.")
    def issue_invoice(customer_id: str, order_id: str, title: str, idempotency_key: str,
                      tax_id: str | None = None) -> dict[str, Any]:
        return guarded(shop.issue_invoice, customer_id, order_id, title, tax_id, idempotency_key)

    @app.tool(description="Cancel an order that has not shipped yet.")
    def cancel_order(customer_id: str, order_id: str, idempotency_key: str, reason: str = "") -> dict[str, Any]:
        return guarded(shop.cancel_order, customer_id, order_id, reason, idempotency_key)

    return app
