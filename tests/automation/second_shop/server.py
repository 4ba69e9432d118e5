"""Trailhead Outfitters: a second shop's MCP server (stdio), written from SPEC.md beside this file.

Run: ``python tests/automation/second_shop/server.py``. Its records live in memory, loaded from
``data.json`` (or ``TRAILHEAD_DATA``); ``debug_dump`` shows what the tools changed.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

DATA = Path(os.environ.get("TRAILHEAD_DATA", Path(__file__).with_name("data.json")))
REASONS = ("no longer needed", "ordered by mistake")

server = MCPServer("trailhead")
_state: dict[str, Any] = {}


class ShopError(ToolError):
    """A refusal by the shop's rules: its message reaches the caller as an error result."""


def _load() -> None:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    _state.clear()
    _state.update(customers={c["customer_ref"]: c for c in data["customers"]},
                  orders={o["order_ref"]: {**o, "modified": False, "returns": [], "cancel_reason": None,
                                           "exchanges": []} for o in data["orders"]},
                  products={p["product_id"]: p for p in data["products"]},
                  writes=[], tokens={}, failures={})


def _maybe_fail(tool: str) -> None:
    left = _state["failures"].get(tool, 0)
    if left > 0:
        _state["failures"][tool] = left - 1
        raise ShopError(f"{tool} is temporarily unavailable")


def _customer(ref: str) -> dict[str, Any]:
    c = _state["customers"].get(ref)
    if c is None:
        raise ShopError("customer not found")
    return c


def _order(order_ref: str, customer_ref: str) -> dict[str, Any]:
    o = _state["orders"].get(order_ref)
    if o is None or o["customer_ref"] != customer_ref:
        raise ShopError("order not found")   # another customer's order reveals nothing
    return o


def _variant(product_id: str, variant_id: str) -> dict[str, Any]:
    for v in _state["products"][product_id]["variants"]:
        if v["variant_id"] == variant_id:
            return v
    raise ShopError(f"variant {variant_id} not found")


def _write(tool: str, op_token: str, fn) -> dict[str, Any]:
    """Run a write once per token: a repeat returns the first result and changes nothing."""
    if not op_token:
        raise ShopError("op_token is required for writes")
    if op_token in _state["tokens"]:
        return _state["tokens"][op_token]
    _maybe_fail(tool)
    result = fn()
    _state["tokens"][op_token] = result
    _state["writes"].append({"tool": tool, "op_token": op_token, "result": copy.deepcopy(result)})
    return result


def _pm(customer: dict, pm_id: str) -> dict[str, Any]:
    for pm in customer["payment_methods"]:
        if pm["pm_id"] == pm_id:
            return pm
    raise ShopError("payment method not found")


@server.tool(structured_output=True)
def get_customer_profile(customer_ref: str) -> dict[str, Any]:
    """The customer with addresses and payment methods."""
    _maybe_fail("get_customer_profile")
    return copy.deepcopy(_customer(customer_ref))


@server.tool(structured_output=True)
def list_customer_orders(customer_ref: str) -> dict[str, Any]:
    """Every order of the customer, newest first."""
    _maybe_fail("list_customer_orders")
    _customer(customer_ref)
    orders = [copy.deepcopy(o) for o in _state["orders"].values() if o["customer_ref"] == customer_ref]
    return {"orders": list(reversed(orders))}


@server.tool(structured_output=True)
def get_order_details(order_ref: str, customer_ref: str) -> dict[str, Any]:
    """One order of the customer."""
    _maybe_fail("get_order_details")
    return copy.deepcopy(_order(order_ref, customer_ref))


@server.tool(structured_output=True)
def get_product(product_id: str) -> dict[str, Any]:
    """A product with all its variants."""
    _maybe_fail("get_product")
    if product_id not in _state["products"]:
        raise ShopError("product not found")
    return copy.deepcopy(_state["products"][product_id])


@server.tool(structured_output=True)
def cancel_pending_order(order_ref: str, reason: str, customer_ref: str, op_token: str) -> dict[str, Any]:
    """Cancel a pending order (reason: 'no longer needed' or 'ordered by mistake')."""
    def run():
        o = _order(order_ref, customer_ref)
        if o["status"] != "pending":
            raise ShopError(f"order {order_ref} is {o['status']}, only pending orders can be cancelled")
        if reason not in REASONS:
            raise ShopError("reason must be 'no longer needed' or 'ordered by mistake'")
        o["status"], o["cancel_reason"] = "cancelled", reason
        return {"order_ref": order_ref, "status": o["status"], "refund_amount": o["payment"]["amount"],
                "refund_to": o["payment"]["pm_id"]}
    return _write("cancel_pending_order", op_token, run)


@server.tool(structured_output=True)
def modify_pending_order_address(order_ref: str, address: dict, customer_ref: str, op_token: str) -> dict[str, Any]:
    """Send a pending order to another address."""
    def run():
        o = _order(order_ref, customer_ref)
        if o["status"] != "pending":
            raise ShopError(f"order {order_ref} is {o['status']}, only pending orders can be changed")
        missing = [k for k in ("line1", "city", "state", "zip", "country") if not address.get(k)]
        if missing:
            raise ShopError("address is missing " + ", ".join(missing))
        o["ship_to"] = {k: address.get(k, "") for k in ("line1", "line2", "city", "state", "zip", "country")}
        return {"order_ref": order_ref, "status": o["status"], "ship_to": copy.deepcopy(o["ship_to"])}
    return _write("modify_pending_order_address", op_token, run)


def _swap(o: dict, customer: dict, swaps: list, pm_id: str, same: str) -> float:
    diff = 0.0
    planned = []
    for s in swaps:
        line = next((i for i in o["items"] if i["line_id"] == s.get("line_id")), None)
        if line is None:
            raise ShopError(f"line {s.get('line_id')} is not in order {o['order_ref']}")
        new = None
        for p in _state["products"].values():
            for v in p["variants"]:
                if v["variant_id"] == s.get("new_variant_id"):
                    new = (p, v)
        if new is None:
            raise ShopError(f"variant {s.get('new_variant_id')} not found")
        old_p = _state["products"][line["product_id"]]
        if (same == "product" and new[0]["product_id"] != old_p["product_id"]) or (
                same == "type" and new[0]["type"] != old_p["type"]):
            raise ShopError("the new item must be the same product" if same == "product" else "the same product type")
        if not new[1]["available"]:
            raise ShopError(f"variant {new[1]['variant_id']} is not available")
        diff += new[1]["price"] - line["price"]
        planned.append((line, new))
    pm = _pm(customer, pm_id)
    if diff > 0 and pm["kind"] == "gift_card" and pm.get("balance", 0) < diff:
        raise ShopError("the gift card balance does not cover the price difference")
    if pm["kind"] == "gift_card":
        pm["balance"] = round(pm.get("balance", 0) - diff, 2)
    for line, (p, v) in planned:
        line.update(product_id=p["product_id"], variant_id=v["variant_id"], options=dict(v["options"]), price=v["price"])
    o["payment"]["amount"] = round(o["payment"]["amount"] + diff, 2)
    return round(diff, 2)


@server.tool(structured_output=True)
def modify_pending_order_items(order_ref: str, swaps: list[dict], pm_id: str, customer_ref: str, op_token: str) -> dict[str, Any]:
    """Change items of a pending order to other variants of the same product (once per order)."""
    def run():
        o = _order(order_ref, customer_ref)
        if o["status"] != "pending":
            raise ShopError(f"order {order_ref} is {o['status']}, only pending orders can be changed")
        if o["modified"]:
            raise ShopError("the items of this order were already changed once")
        diff = _swap(o, _customer(customer_ref), swaps, pm_id, "product")
        o["modified"] = True
        return {"order_ref": order_ref, "price_difference": diff, "items": copy.deepcopy(o["items"])}
    return _write("modify_pending_order_items", op_token, run)


@server.tool(structured_output=True)
def return_delivered_order_items(order_ref: str, line_ids: list[str], refund_to: str, customer_ref: str, op_token: str) -> dict[str, Any]:
    """Return items of a delivered order; refund to its payment method or a gift card."""
    def run():
        o = _order(order_ref, customer_ref)
        if o["status"] != "delivered":
            raise ShopError(f"order {order_ref} is {o['status']}, only delivered orders can be returned")
        pm = _pm(_customer(customer_ref), refund_to)
        if refund_to != o["payment"]["pm_id"] and pm["kind"] != "gift_card":
            raise ShopError("a refund goes to the original payment method or a gift card")
        done = {line for r in o["returns"] for line in r["line_ids"]}
        lines = [i for i in o["items"] if i["line_id"] in line_ids]
        if not lines or len(lines) != len(set(line_ids)) or done & set(line_ids):
            raise ShopError("those items cannot be returned")
        amount = round(sum(i["price"] for i in lines), 2)
        if pm["kind"] == "gift_card":
            pm["balance"] = round(pm.get("balance", 0) + amount, 2)
        o["returns"].append({"line_ids": sorted(line_ids), "amount": amount, "refund_to": refund_to})
        return {"order_ref": order_ref, "status": "return requested", "refund_amount": amount, "refund_to": refund_to,
                "line_ids": sorted(line_ids)}
    return _write("return_delivered_order_items", op_token, run)


@server.tool(structured_output=True)
def exchange_delivered_order_items(order_ref: str, swaps: list[dict], pm_id: str, customer_ref: str, op_token: str) -> dict[str, Any]:
    """Exchange delivered items for other variants of the same product type."""
    def run():
        o = _order(order_ref, customer_ref)
        if o["status"] != "delivered":
            raise ShopError(f"order {order_ref} is {o['status']}, only delivered orders can be exchanged")
        if o["returns"]:
            raise ShopError(f"order {order_ref} has a return in progress, so it can no longer be exchanged")
        diff = _swap(o, _customer(customer_ref), swaps, pm_id, "type")
        o["exchanges"].append({"swaps": swaps, "price_difference": diff, "pm_id": pm_id})
        return {"order_ref": order_ref, "status": "exchange requested", "price_difference": diff}
    return _write("exchange_delivered_order_items", op_token, run)


@server.tool(structured_output=True)
def update_customer_address(address: dict, customer_ref: str, op_token: str) -> dict[str, Any]:
    """Replace the customer's default address."""
    def run():
        c = _customer(customer_ref)
        default = next(a for a in c["addresses"] if a.get("default"))
        default.update({k: address.get(k, "") for k in ("line1", "line2", "city", "state", "zip", "country")})
        return {"customer_ref": customer_ref, "default_address": copy.deepcopy(default)}
    return _write("update_customer_address", op_token, run)


@server.tool(structured_output=True)
def debug_reset() -> dict[str, Any]:
    """Reload the records from the data file."""
    _load()
    return {"ok": True}


@server.tool(structured_output=True)
def debug_dump() -> dict[str, Any]:
    """Every record and every write the tools made."""
    return {"customers": _state["customers"], "orders": _state["orders"], "writes": _state["writes"]}


@server.tool(structured_output=True)
def debug_fail(tool: str, times: int = 1) -> dict[str, Any]:
    """Make the next `times` calls of `tool` fail."""
    _state["failures"][tool] = times
    return {"ok": True}


_load()

if __name__ == "__main__":
    server.run("stdio")
