"""The second shop behind a server of another convention: every answer wrapped as ``{ok, parsed_content}`` (a
refusal as ``{ok: false, error}``), and writes that take no idempotency argument (a repeat writes again).

Same records and rules as ``server.py`` (imported); ``tools_wrapped.yaml`` declares it. ``debug_slow(tool,
seconds)`` makes the next call of ``tool`` answer late, after its write is made (an answer lost in transit).
Run: ``python tests/automation/second_shop/wrapped_server.py``.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server as shop  # noqa: E402

app = MCPServer("trailhead-wrapped")
_slow: dict[str, float] = {}


def _wrapped(tool: str, fn, *args) -> dict[str, Any]:
    try:
        result = fn(*args)
    except shop.ShopError as exc:
        return {"ok": False, "error": str(exc)}
    delay = _slow.pop(tool, 0.0)
    if delay:
        time.sleep(delay)
    return {"ok": True, "parsed_content": result}


def _token() -> str:
    return uuid.uuid4().hex   # this server recognises no repeat: every call is a new write


@app.tool(structured_output=True)
def get_customer_profile(customer_ref: str) -> dict[str, Any]:
    return _wrapped("get_customer_profile", shop.get_customer_profile, customer_ref)


@app.tool(structured_output=True)
def list_customer_orders(customer_ref: str) -> dict[str, Any]:
    return _wrapped("list_customer_orders", shop.list_customer_orders, customer_ref)


@app.tool(structured_output=True)
def get_order_details(order_ref: str, customer_ref: str) -> dict[str, Any]:
    return _wrapped("get_order_details", shop.get_order_details, order_ref, customer_ref)


@app.tool(structured_output=True)
def get_product(product_id: str) -> dict[str, Any]:
    return _wrapped("get_product", shop.get_product, product_id)


@app.tool(structured_output=True)
def cancel_pending_order(order_ref: str, reason: str, customer_ref: str) -> dict[str, Any]:
    return _wrapped("cancel_pending_order", shop.cancel_pending_order, order_ref, reason, customer_ref, _token())


@app.tool(structured_output=True)
def modify_pending_order_address(order_ref: str, address: dict, customer_ref: str) -> dict[str, Any]:
    return _wrapped("modify_pending_order_address", shop.modify_pending_order_address, order_ref, address,
                    customer_ref, _token())


@app.tool(structured_output=True)
def modify_pending_order_items(order_ref: str, swaps: list[dict], pm_id: str, customer_ref: str) -> dict[str, Any]:
    return _wrapped("modify_pending_order_items", shop.modify_pending_order_items, order_ref, swaps, pm_id,
                    customer_ref, _token())


@app.tool(structured_output=True)
def return_delivered_order_items(order_ref: str, line_ids: list[str], refund_to: str,
                                 customer_ref: str) -> dict[str, Any]:
    return _wrapped("return_delivered_order_items", shop.return_delivered_order_items, order_ref, line_ids,
                    refund_to, customer_ref, _token())


@app.tool(structured_output=True)
def exchange_delivered_order_items(order_ref: str, swaps: list[dict], pm_id: str, customer_ref: str) -> dict[str, Any]:
    return _wrapped("exchange_delivered_order_items", shop.exchange_delivered_order_items, order_ref, swaps, pm_id,
                    customer_ref, _token())


@app.tool(structured_output=True)
def update_customer_address(address: dict, customer_ref: str) -> dict[str, Any]:
    return _wrapped("update_customer_address", shop.update_customer_address, address, customer_ref, _token())


@app.tool(structured_output=True)
def debug_reset() -> dict[str, Any]:
    _slow.clear()
    return _wrapped("debug_reset", shop.debug_reset)


@app.tool(structured_output=True)
def debug_dump() -> dict[str, Any]:
    return _wrapped("debug_dump", shop.debug_dump)


@app.tool(structured_output=True)
def debug_fail(tool: str, times: int = 1) -> dict[str, Any]:
    return _wrapped("debug_fail", shop.debug_fail, tool, times)


@app.tool(structured_output=True)
def debug_slow(tool: str, seconds: float = 2.0) -> dict[str, Any]:
    _slow[tool] = seconds
    return {"ok": True, "parsed_content": {}}


if __name__ == "__main__":
    app.run("stdio")
