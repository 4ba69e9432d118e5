"""Northwind Home: a third shop's MCP server (stdio), written from SPEC.md beside this file.

Shaped unlike the other two: variants with several option axes (size, colour, material, storage), products
in categories, several payment methods, structured addresses (address1, address2, city, state, country,
zip), customers with several orders in every status. Run: ``python tests/automation/third_shop/server.py``.
Records live in memory, loaded from ``data.json`` (or ``NORTHWIND_DATA``); ``debug_dump`` shows what the
tools changed.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any, Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

DATA = Path(os.environ.get("NORTHWIND_DATA", Path(__file__).with_name("data.json")))
REASONS = ("no longer needed", "ordered by mistake", "found a better price")
ADDRESS_FIELDS = ("address1", "address2", "city", "state", "country", "zip")

server = MCPServer("northwind")
_state: dict[str, Any] = {}


class ShopError(ToolError):
    """A refusal by the shop's rules: its message reaches the caller as an error result."""


def _load() -> None:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    _state.clear()
    _state.update(customers={c["customer_id"]: c for c in data["customers"]},
                  orders={o["order_id"]: {**o, "returns": [], "exchanges": [], "cancel_reason": None}
                          for o in data["orders"]},
                  products={p["product_id"]: p for p in data["products"]},
                  writes=[], requests={}, failures={})


def _maybe_fail(tool: str) -> None:
    left = _state["failures"].get(tool, 0)
    if left > 0:
        _state["failures"][tool] = left - 1
        raise ShopError(f"{tool} is temporarily unavailable")


def _customer(cid: str) -> dict[str, Any]:
    c = _state["customers"].get(cid)
    if c is None:
        raise ShopError("customer not found")
    return c


def _order(order_id: str, customer_id: str) -> dict[str, Any]:
    o = _state["orders"].get(order_id)
    if o is None or o["customer_id"] != customer_id:
        raise ShopError("order not found")
    return o


def _pm(customer: dict, pm_id: str) -> dict[str, Any]:
    for pm in customer["payment_methods"]:
        if pm["id"] == pm_id:
            return pm
    raise ShopError("payment method not found")


def _write(tool: str, request_id: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a write once per request id: a repeat returns the first result and changes nothing."""
    if not request_id:
        raise ShopError("request_id is required for changes")
    if request_id in _state["requests"]:
        return _state["requests"][request_id]
    _maybe_fail(tool)
    result = fn()
    _state["requests"][request_id] = result
    _state["writes"].append({"tool": tool, "request_id": request_id, "result": copy.deepcopy(result)})
    return result


def _apply_changes(o: dict, customer: dict, changes: list[dict], pm_id: str) -> float:
    """Swap items to other available variants of the same product; the price difference goes to ``pm_id``."""
    if not changes:
        raise ShopError("no item to change")
    diff, planned = 0.0, []
    for ch in changes:
        item = next((i for i in o["items"] if i["item_id"] == ch.get("item_id")), None)
        if item is None:
            raise ShopError(f"item {ch.get('item_id')} is not in order {o['order_id']}")
        product = _state["products"][item["product_id"]]
        v = next((v for v in product["variants"] if v["variant_id"] == ch.get("variant_id")), None)
        if v is None:
            raise ShopError(f"variant {ch.get('variant_id')} is not a variant of {product['name']}")
        if not v["available"]:
            raise ShopError(f"variant {v['variant_id']} is out of stock")
        if v["variant_id"] == item["variant_id"]:
            raise ShopError(f"item {item['item_id']} already is variant {v['variant_id']}")
        diff += v["price"] - item["price"]
        planned.append((item, v))
    pm = _pm(customer, pm_id)
    if pm["type"] == "gift_card":
        if diff > 0 and pm.get("balance", 0) < diff:
            raise ShopError("the gift card balance does not cover the price difference")
        pm["balance"] = round(pm.get("balance", 0) - diff, 2)
    for item, v in planned:
        item.update(variant_id=v["variant_id"], options=dict(v["options"]), price=v["price"])
    o["total"] = round(o["total"] + diff, 2)
    return round(diff, 2)


@server.tool(structured_output=True)
def get_customer(customer_id: str) -> dict[str, Any]:
    """The customer with addresses and payment methods."""
    _maybe_fail("get_customer")
    return copy.deepcopy(_customer(customer_id))


@server.tool(structured_output=True)
def list_orders(customer_id: str) -> dict[str, Any]:
    """Every order of the customer, oldest first."""
    _maybe_fail("list_orders")
    _customer(customer_id)
    return {"orders": [copy.deepcopy(o) for o in _state["orders"].values() if o["customer_id"] == customer_id]}


@server.tool(structured_output=True)
def get_order(order_id: str, customer_id: str) -> dict[str, Any]:
    """One order of the customer."""
    _maybe_fail("get_order")
    return copy.deepcopy(_order(order_id, customer_id))


@server.tool(structured_output=True)
def get_product(product_id: str) -> dict[str, Any]:
    """A product with every variant."""
    _maybe_fail("get_product")
    if product_id not in _state["products"]:
        raise ShopError("product not found")
    return copy.deepcopy(_state["products"][product_id])


@server.tool(structured_output=True)
def cancel_order(order_id: str, reason: str, customer_id: str, request_id: str) -> dict[str, Any]:
    """Cancel a pending order; the whole total goes back to its payment method."""
    def run() -> dict[str, Any]:
        o = _order(order_id, customer_id)
        if o["status"] != "pending":
            raise ShopError(f"order {order_id} is {o['status']}; only pending orders can be cancelled")
        if reason not in REASONS:
            raise ShopError("reason must be one of: " + ", ".join(REASONS))
        o["status"], o["cancel_reason"] = "cancelled", reason
        return {"order_id": order_id, "status": "cancelled", "reason": reason, "refund": o["total"],
                "payment_method_id": o["payment_method_id"]}
    return _write("cancel_order", request_id, run)


@server.tool(structured_output=True)
def update_order_address(order_id: str, address: dict, customer_id: str, request_id: str) -> dict[str, Any]:
    """Ship a pending order to another address (address1, address2, city, state, country, zip)."""
    def run() -> dict[str, Any]:
        o = _order(order_id, customer_id)
        if o["status"] != "pending":
            raise ShopError(f"order {order_id} is {o['status']}; only pending orders can change address")
        missing = [k for k in ADDRESS_FIELDS if k != "address2" and not address.get(k)]
        if missing:
            raise ShopError("the address lacks " + ", ".join(missing))
        o["address"] = {k: str(address.get(k) or "") for k in ADDRESS_FIELDS}
        return {"order_id": order_id, "address": copy.deepcopy(o["address"])}
    return _write("update_order_address", request_id, run)


@server.tool(structured_output=True)
def update_order_items(order_id: str, changes: list[dict], payment_method_id: str, customer_id: str,
                       request_id: str) -> dict[str, Any]:
    """Change items of a pending order to other variants of the same product."""
    def run() -> dict[str, Any]:
        o = _order(order_id, customer_id)
        if o["status"] != "pending":
            raise ShopError(f"order {order_id} is {o['status']}; only pending orders can change items")
        diff = _apply_changes(o, _customer(customer_id), changes, payment_method_id)
        return {"order_id": order_id, "price_difference": diff,
                "changed": sorted(f"{c['item_id']}>{c['variant_id']}" for c in changes)}
    return _write("update_order_items", request_id, run)


@server.tool(structured_output=True)
def return_items(order_id: str, item_ids: list[str], payment_method_id: str, customer_id: str,
                 request_id: str) -> dict[str, Any]:
    """Return items of a delivered order; the refund goes to the order's payment method or a gift card."""
    def run() -> dict[str, Any]:
        o = _order(order_id, customer_id)
        if o["status"] != "delivered":
            raise ShopError(f"order {order_id} is {o['status']}; only delivered orders can be returned")
        pm = _pm(_customer(customer_id), payment_method_id)
        if payment_method_id != o["payment_method_id"] and pm["type"] != "gift_card":
            raise ShopError("a refund goes to the order's payment method or a gift card")
        done = {i for r in o["returns"] for i in r["item_ids"]}
        items = [i for i in o["items"] if i["item_id"] in item_ids]
        if not items or len(items) != len(set(item_ids)) or done & set(item_ids):
            raise ShopError("those items cannot be returned")
        amount = round(sum(i["price"] for i in items), 2)
        if pm["type"] == "gift_card":
            pm["balance"] = round(pm.get("balance", 0) + amount, 2)
        o["returns"].append({"item_ids": sorted(item_ids), "refund": amount, "payment_method_id": payment_method_id})
        return {"order_id": order_id, "item_ids": sorted(item_ids), "refund": amount,
                "payment_method_id": payment_method_id}
    return _write("return_items", request_id, run)


@server.tool(structured_output=True)
def exchange_items(order_id: str, changes: list[dict], payment_method_id: str, customer_id: str,
                   request_id: str) -> dict[str, Any]:
    """Exchange delivered items for other variants of the same product; not for an item being returned."""
    def run() -> dict[str, Any]:
        o = _order(order_id, customer_id)
        if o["status"] != "delivered":
            raise ShopError(f"order {order_id} is {o['status']}; only delivered orders can be exchanged")
        returned = {i for r in o["returns"] for i in r["item_ids"]}
        if any(c.get("item_id") in returned for c in changes):
            raise ShopError("an item being returned cannot be exchanged")
        diff = _apply_changes(o, _customer(customer_id), changes, payment_method_id)
        o["exchanges"].append({"changes": changes, "price_difference": diff})
        return {"order_id": order_id, "price_difference": diff,
                "changed": sorted(f"{c['item_id']}>{c['variant_id']}" for c in changes)}
    return _write("exchange_items", request_id, run)


@server.tool(structured_output=True)
def debug_reset() -> dict[str, Any]:
    """Reload the records from the data file."""
    _load()
    return {"ok": True}


@server.tool(structured_output=True)
def debug_dump() -> dict[str, Any]:
    """Every record and every change the tools made."""
    return {"customers": _state["customers"], "orders": _state["orders"], "writes": _state["writes"]}


@server.tool(structured_output=True)
def debug_writes(since: int = 0) -> dict[str, Any]:
    """The changes the tools made, from the ``since``-th on (the judge reads them after every turn)."""
    return {"count": len(_state["writes"]), "writes": _state["writes"][since:]}


@server.tool(structured_output=True)
def debug_fail(tool: str, times: int = 1) -> dict[str, Any]:
    """Make the next ``times`` calls of ``tool`` fail."""
    _state["failures"][tool] = times
    return {"ok": True}


_load()

if __name__ == "__main__":
    server.run("stdio")
