"""The example shop as an MCP server (the SDK's ``MCPServer``, called FastMCP before mcp 2).

Every tool takes the customer id first; the tool gateway fills it with the verified identity, so a customer
only ever sees their own orders. Refusals are tool errors whose text starts with a stable code
(``not_found``, ``already_shipped``, ``amount_too_high``, ...).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from examples.shop.store import Shop, ShopError


class _Gather:
    """A barrier for calls: each waits until ``size`` are in hand together, then all answer. A test then knows
    the shop had them at once without reading clocks. If ``patience`` seconds pass first, the round is broken:
    everyone in it answers, ungathered, so a gateway that sends one call at a time fails quickly."""

    def __init__(self, size: int, patience: float) -> None:
        self.size, self.patience = size, patience
        self._round = self._new_round()

    @staticmethod
    def _new_round() -> dict[str, Any]:
        return {"in_hand": 0, "full": False, "done": anyio.Event()}

    async def wait(self) -> bool:
        """True when this call was in hand together with ``size - 1`` others (runs on the server's one loop)."""
        r = self._round
        r["in_hand"] += 1
        if r["in_hand"] >= self.size:
            r["full"] = True
            r["done"].set()
            self._round = self._new_round()
            return True
        with anyio.move_on_after(self.patience):
            await r["done"].wait()
        if not r["done"].is_set():   # patience ran out: the round is broken, all in it answer
            r["done"].set()
            self._round = self._new_round()
        return bool(r["full"])


def _holds(flag: Path, tool: str) -> bool:
    """Whether the hold file holds this tool: it exists and is empty (every tool) or names it on a line."""
    try:
        names = flag.read_text(encoding="utf-8").split()
    except FileNotFoundError:
        return False
    return not names or tool in names


def build_server(shop: Shop, *, latency_ms: float = 0.0, hang: bool = False,
                 calls_log: str | Path | None = None, hold_while: str | Path | None = None,
                 gather: int = 0, gather_patience: float = 20.0) -> MCPServer:
    """The shop's tools; ``latency_ms`` delays every answer and ``hang`` never answers (benchmarks, tests:
    a slow or stuck business system). The delay is awaited on the event loop, so waiting calls hold no worker
    thread (the SDK runs a sync tool on anyio's 40 shared threads, which would cap a slow shop at 40 calls at
    once); only the store's own work runs on one. ``calls_log``: one JSON line per call (tool, wall-clock start
    and end), so a test can see which calls the shop had in hand at the same time. ``hold_while``: a call
    waits while that file exists, empty or naming its tool (a test releases it by deleting the file). ``gather``: calls wait until that
    many are in hand together (see ``_Gather``; the log line says whether each was)."""
    app = MCPServer("example-shop", instructions="A small shop: orders, shipments, refunds, invoices.",
                    log_level="WARNING")
    log_lock = threading.Lock()
    barrier = _Gather(gather, gather_patience) if gather > 0 else None
    hold = Path(hold_while) if hold_while else None

    async def guarded(fn, *args):
        started = time.time()
        gathered = None
        if hang:
            await anyio.sleep_forever()
        if latency_ms > 0:
            await anyio.sleep(latency_ms / 1000.0)
        while hold is not None and _holds(hold, fn.__name__):
            await anyio.sleep(0.01)
        if barrier is not None:
            gathered = await barrier.wait()
        try:
            return await anyio.to_thread.run_sync(fn, *args)
        except ShopError as exc:
            raise ToolError(str(exc)) from None
        finally:
            if calls_log:
                record = {"tool": fn.__name__, "start": started, "end": time.time()}
                if gathered is not None:
                    record["gathered"] = gathered
                line = json.dumps(record)
                with log_lock, open(calls_log, "a", encoding="utf-8") as f:
                    f.write(line + "\n")

    @app.tool(description="A customer's profile: name, phone and how many orders they have; with recent_orders > 0"
                          " also that many of their newest orders.")
    async def get_customer(customer_id: str, recent_orders: int = 0) -> dict[str, Any]:
        return await guarded(shop.get_customer, customer_id, recent_orders)

    @app.tool(description="One of the customer's orders with status, items, totals, shipment and refunds.")
    async def get_order(customer_id: str, order_id: str) -> dict[str, Any]:
        return await guarded(shop.get_order, customer_id, order_id)

    @app.tool(description="The customer's most recent orders, newest first.")
    async def list_recent_orders(customer_id: str, limit: int = 5) -> dict[str, Any]:
        return await guarded(shop.list_recent_orders, customer_id, limit)

    @app.tool(description="Carrier, tracking number and shipping dates of one of the customer's orders.")
    async def track_shipment(customer_id: str, order_id: str) -> dict[str, Any]:
        return await guarded(shop.track_shipment, customer_id, order_id)

    @app.tool(description="Change the delivery address of an order that has not shipped yet.")
    async def change_address(customer_id: str, order_id: str, address: str, idempotency_key: str) -> dict[str, Any]:
        return await guarded(shop.change_address, customer_id, order_id, address, idempotency_key)

    @app.tool(description="Refund part or all of an order (at most the total minus earlier refunds).")
    async def request_refund(customer_id: str, order_id: str, amount: float, idempotency_key: str,
                       reason: str = "") -> dict[str, Any]:
        return await guarded(shop.request_refund, customer_id, order_id, amount, reason, idempotency_key)

    @app.tool(description="Issue the invoice of an order, with a title and an optional tax id.")
    async def issue_invoice(customer_id: str, order_id: str, title: str, idempotency_key: str,
                      tax_id: str | None = None) -> dict[str, Any]:
        return await guarded(shop.issue_invoice, customer_id, order_id, title, tax_id, idempotency_key)

    @app.tool(description="Cancel an order that has not shipped yet.")
    async def cancel_order(customer_id: str, order_id: str, idempotency_key: str, reason: str = "") -> dict[str, Any]:
        return await guarded(shop.cancel_order, customer_id, order_id, reason, idempotency_key)

    return app
