"""The example shop's data: customers, orders and the writes made against them, in schema ``shop``.

Every function takes the customer id and sees only that customer's orders: another customer's order is
"not found", exactly like an order that does not exist. Writes take an idempotency key and are recorded in
``shop.writes``; a repeat with the same key changes nothing and returns the first result.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool
from pydantic import BaseModel, ConfigDict, Field

SAMPLE_DATA = Path(__file__).resolve().parent / "sample_data.json"
STATUSES = ("pending_payment", "paid", "shipped", "delivered", "cancelled", "refunded")
BEFORE_SHIPPING = ("pending_payment", "paid")
REFUNDABLE = ("paid", "shipped", "delivered")
INVOICEABLE = ("paid", "shipped", "delivered")
_LOCK = 0x5348_4F50  # "SHOP": one loader at a time

SCHEMA = """
CREATE SCHEMA IF NOT EXISTS shop;
CREATE TABLE IF NOT EXISTS shop.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS shop.customers (
    customer_id text PRIMARY KEY,
    name        text NOT NULL,
    phone       text
);
CREATE TABLE IF NOT EXISTS shop.orders (
    order_id     text PRIMARY KEY,
    customer_id  text NOT NULL REFERENCES shop.customers(customer_id),
    status       text NOT NULL CHECK (status IN ('pending_payment', 'paid', 'shipped', 'delivered', 'cancelled',
                                                 'refunded')),
    items        jsonb NOT NULL,
    total        numeric(12, 2) NOT NULL,
    currency     text NOT NULL,
    paid_at      timestamptz,
    shipped_at   timestamptz,
    delivered_at timestamptz,
    carrier      text,
    tracking_no  text,
    address      text NOT NULL,
    position     integer NOT NULL
);
CREATE INDEX IF NOT EXISTS orders_customer_idx ON shop.orders (customer_id, position);
CREATE TABLE IF NOT EXISTS shop.writes (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer_id     text NOT NULL,
    idempotency_key text NOT NULL,
    tool            text NOT NULL,
    order_id        text NOT NULL,
    arguments       jsonb NOT NULL,
    result          jsonb NOT NULL,
    amount          numeric(12, 2),
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (customer_id, idempotency_key)
);
CREATE INDEX IF NOT EXISTS writes_order_idx ON shop.writes (order_id, id);
"""


class ShopError(Exception):
    """A refusal the customer's request deserves: ``code`` is stable, the message says why."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


# --- the data file ------------------------------------------------------------------------------------------


class Customer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    customer_id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1)
    phone: str | None = None


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sku: str
    name: str
    qty: int = Field(ge=1)
    price: Decimal = Field(ge=0)


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(pattern=r"^[0-9]{4,12}$")
    customer_id: str
    status: Literal["pending_payment", "paid", "shipped", "delivered", "cancelled", "refunded"]
    items: list[Item] = Field(min_length=1)
    total: Decimal = Field(ge=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    paid_at: datetime | None = None
    shipped_at: datetime | None = None
    delivered_at: datetime | None = None
    carrier: str | None = None
    tracking_no: str | None = None
    address: str = Field(min_length=1)


class ShopData(BaseModel):
    model_config = ConfigDict(extra="forbid")
    customers: list[Customer]
    orders: list[Order]


def read_data(path: str | Path | None = None) -> tuple[ShopData, str]:
    p = Path(path) if path else SAMPLE_DATA
    text = p.read_text(encoding="utf-8")
    data = ShopData.model_validate_json(text)
    ids = {c.customer_id for c in data.customers}
    for o in data.orders:
        if o.customer_id not in ids:
            raise ValueError(f"{p}: order {o.order_id} belongs to unknown customer {o.customer_id!r}")
    return data, hashlib.sha256(text.encode()).hexdigest()


def _money(v: Any) -> Decimal:
    return Decimal(str(v)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def _num(v: Decimal | None) -> float | None:
    return None if v is None else float(v)


def _iso(v: datetime | None) -> str | None:
    return None if v is None else v.isoformat()


class Shop:
    def __init__(self, dsn: str, *, max_size: int = 4):
        # autocommit: a read is one statement (no BEGIN and COMMIT round trips around it); what must be atomic
        # (loading the data, a write under its order's lock) opens its own transaction
        self.pool = ConnectionPool(dsn, min_size=1, max_size=max_size,
                                   kwargs={"row_factory": dict_row, "autocommit": True,
                                           # its sessions are told apart in pg_stat_activity (and in benchmarks)
                                           "application_name": "example-shop"}, open=False, name="shop")
        self.pool.open(wait=True, timeout=30)

    def close(self) -> None:
        self.pool.close()

    # --- loading ------------------------------------------------------------------------------------------

    def load(self, path: str | Path | None = None, *, reload: Literal["always", "changed"] = "always") -> bool:
        """Replace customers, orders and writes with the file's; with ``changed``, only when the file differs
        from what was loaded last (so a restart keeps the writes). Returns whether it replaced the data."""
        data, fingerprint = read_data(path)
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            conn.execute(SCHEMA)
            if reload == "changed":
                row = conn.execute("SELECT value FROM shop.meta WHERE key = 'fingerprint'").fetchone()
                if row and row["value"] == fingerprint:
                    return False
            conn.execute("TRUNCATE shop.writes, shop.orders, shop.customers")
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO shop.customers (customer_id, name, phone) VALUES (%s, %s, %s)",
                                [(c.customer_id, c.name, c.phone) for c in data.customers])
                cur.executemany(
                    "INSERT INTO shop.orders (order_id, customer_id, status, items, total, currency, paid_at,"
                    " shipped_at, delivered_at, carrier, tracking_no, address, position)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [(o.order_id, o.customer_id, o.status, Jsonb([{**i.model_dump(mode="json"), "price": float(i.price)} for i in o.items]),
                      o.total, o.currency, o.paid_at, o.shipped_at, o.delivered_at, o.carrier, o.tracking_no,
                      o.address, n) for n, o in enumerate(data.orders)])
            conn.execute("INSERT INTO shop.meta (key, value) VALUES ('fingerprint', %s)"
                         " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (fingerprint,))
        return True

    # --- reads --------------------------------------------------------------------------------------------

    def _order_row(self, conn: psycopg.Connection, customer_id: str, order_id: str, *, lock: bool = False):
        sql = "SELECT * FROM shop.orders WHERE order_id = %s AND customer_id = %s" + (" FOR UPDATE" if lock else "")
        return conn.execute(sql, (order_id, customer_id)).fetchone()

    @staticmethod
    def _refunded(conn: psycopg.Connection, order_id: str) -> Decimal:
        # refunds made, and the payment a cancellation gave back: what the order's record says was refunded
        row = conn.execute("SELECT coalesce(sum(amount), 0) AS s FROM shop.writes"
                           " WHERE order_id = %s AND tool IN ('request_refund', 'cancel_order')", (order_id,)).fetchone()
        return _money(row["s"])

    def _order_view(self, conn: psycopg.Connection, row: dict) -> dict:
        invoice = conn.execute("SELECT result FROM shop.writes WHERE order_id = %s AND tool = 'issue_invoice'"
                               " ORDER BY id LIMIT 1", (row["order_id"],)).fetchone()
        # an order whose status is refunded was refunded in full (the shop's rule), also one that came so in its data
        refunded = _money(row["total"]) if row["status"] == "refunded" else self._refunded(conn, row["order_id"])
        return {
            "order_id": row["order_id"], "status": row["status"],
            "items": row["items"], "total": _num(row["total"]), "currency": row["currency"],
            "refunded": _num(refunded), "paid_at": _iso(row["paid_at"]), "shipped_at": _iso(row["shipped_at"]),
            "delivered_at": _iso(row["delivered_at"]), "carrier": row["carrier"], "tracking_no": row["tracking_no"],
            "address": row["address"], "invoice_no": invoice["result"]["invoice_no"] if invoice else None,
        }

    def get_customer(self, customer_id: str, recent_orders: int = 0) -> dict:
        """The profile; with ``recent_orders`` > 0 also that many of the newest orders (as list_recent_orders
        gives them), so a session's memory is one call, not two."""
        with self.pool.connection() as conn:
            row = conn.execute("SELECT c.customer_id, c.name, c.phone, (SELECT count(*) FROM shop.orders o"
                               " WHERE o.customer_id = c.customer_id) AS order_count FROM shop.customers c"
                               " WHERE c.customer_id = %s", (customer_id,)).fetchone()
            orders = self._recent(conn, customer_id, recent_orders) if recent_orders > 0 and row is not None else []
        out: dict = {"found": row is not None, "customer": row}
        if recent_orders > 0:
            out["orders"] = orders
        return out

    def get_order(self, customer_id: str, order_id: str) -> dict:
        with self.pool.connection() as conn:
            row = self._order_row(conn, customer_id, order_id)
            if row is None:
                return {"found": False, "order_id": order_id, "order": None}
            return {"found": True, "order_id": order_id, "order": self._order_view(conn, row)}

    def list_recent_orders(self, customer_id: str, limit: int = 5) -> dict:
        with self.pool.connection() as conn:
            return {"orders": self._recent(conn, customer_id, limit)}

    @staticmethod
    def _recent(conn, customer_id: str, limit: int) -> list[dict]:
        limit = max(1, min(int(limit), 20))
        rows = conn.execute(
            "SELECT order_id, status, items, total, currency, paid_at FROM shop.orders WHERE customer_id = %s"
            " ORDER BY position DESC LIMIT %s", (customer_id, limit)).fetchall()
        return [{"order_id": r["order_id"], "status": r["status"], "total": _num(r["total"]),
                 "currency": r["currency"], "paid_at": _iso(r["paid_at"]), "items": [i["name"] for i in r["items"]]}
                for r in rows]

    def track_shipment(self, customer_id: str, order_id: str) -> dict:
        with self.pool.connection() as conn:
            row = self._order_row(conn, customer_id, order_id)
        if row is None:
            return {"found": False, "order_id": order_id, "shipment": None}
        return {"found": True, "order_id": order_id, "shipment": {
            "status": row["status"], "carrier": row["carrier"], "tracking_no": row["tracking_no"],
            "shipped_at": _iso(row["shipped_at"]), "delivered_at": _iso(row["delivered_at"])}}

    # --- writes -------------------------------------------------------------------------------------------

    def _write(self, tool: str, customer_id: str, order_id: str, key: str, arguments: dict, apply) -> dict:
        """Run ``apply(conn, order_row) -> (result, amount)`` once per (customer, key), under the order's lock."""
        if not key or len(key) > 200:
            raise ShopError("invalid_key", "an idempotency key of 1-200 characters is required")
        canonical = json.loads(json.dumps(arguments, sort_keys=True, default=str))
        with self.pool.connection() as conn, conn.transaction():
            row = self._order_row(conn, customer_id, order_id, lock=True)
            if row is None:
                raise ShopError("not_found", f"no order {order_id}")
            done = conn.execute("SELECT tool, order_id, arguments, result FROM shop.writes"
                                " WHERE customer_id = %s AND idempotency_key = %s", (customer_id, key)).fetchone()
            if done is not None:
                if done["tool"] != tool or done["order_id"] != order_id or done["arguments"] != canonical:
                    raise ShopError("idempotency_conflict", "this key was used for a different request")
                return {**done["result"], "repeated": True}
            result, amount = apply(conn, row)
            conn.execute("INSERT INTO shop.writes (customer_id, idempotency_key, tool, order_id, arguments, result,"
                         " amount) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                         (customer_id, key, tool, order_id, Jsonb(canonical), Jsonb(result), amount))
        return {**result, "repeated": False}

    def change_address(self, customer_id: str, order_id: str, address: str, key: str) -> dict:
        address = " ".join(address.split())
        if not address or len(address) > 500:
            raise ShopError("invalid_address", "the address must be 1-500 characters")

        def apply(conn, row):
            if row["status"] not in BEFORE_SHIPPING:
                raise ShopError("already_shipped" if row["status"] in ("shipped", "delivered") else "not_changeable",
                                f"order {order_id} is {row['status']}: the address can only change before shipping")
            conn.execute("UPDATE shop.orders SET address = %s WHERE order_id = %s", (address, order_id))
            return {"order_id": order_id, "address": address, "status": row["status"]}, None

        return self._write("change_address", customer_id, order_id, key, {"address": address}, apply)

    def request_refund(self, customer_id: str, order_id: str, amount: float, reason: str, key: str) -> dict:
        value = _money(amount)
        if value <= 0:
            raise ShopError("invalid_amount", "the amount must be positive")

        def apply(conn, row):
            if row["status"] not in REFUNDABLE:
                raise ShopError("not_refundable", f"order {order_id} is {row['status']}")
            total = _money(row["total"])
            refunded = self._refunded(conn, order_id)
            remaining = total - refunded
            if value > remaining:
                raise ShopError("amount_too_high", f"at most {remaining} {row['currency']} can still be refunded")
            status = "refunded" if value == remaining else row["status"]
            if status != row["status"]:
                conn.execute("UPDATE shop.orders SET status = %s WHERE order_id = %s", (status, order_id))
            n = conn.execute("SELECT count(*) AS n FROM shop.writes WHERE order_id = %s AND tool = 'request_refund'",
                             (order_id,)).fetchone()["n"]
            return {"refund_id": f"R{order_id}-{n + 1}", "order_id": order_id, "amount": _num(value),
                    "currency": row["currency"], "refunded_total": _num(refunded + value),
                    "remaining": _num(remaining - value), "status": status}, value

        return self._write("request_refund", customer_id, order_id, key,
                           {"amount": str(value), "reason": reason or ""}, apply)

    def issue_invoice(self, customer_id: str, order_id: str, title: str, tax_id: str | None, key: str) -> dict:
        title = " ".join(title.split())
        if not title or len(title) > 200:
            raise ShopError("invalid_title", "the invoice title must be 1-200 characters")

        def apply(conn, row):
            if row["status"] not in INVOICEABLE:
                raise ShopError("not_invoiceable", f"order {order_id} is {row['status']}")
            if conn.execute("SELECT 1 FROM shop.writes WHERE order_id = %s AND tool = 'issue_invoice'",
                            (order_id,)).fetchone():
                raise ShopError("already_invoiced", f"order {order_id} already has an invoice")
            return {"invoice_no": f"INV-{order_id}", "order_id": order_id, "title": title, "tax_id": tax_id,
                    "amount": _num(_money(row["total"]) - self._refunded(conn, order_id)),
                    "currency": row["currency"]}, None

        return self._write("issue_invoice", customer_id, order_id, key, {"title": title, "tax_id": tax_id}, apply)

    def cancel_order(self, customer_id: str, order_id: str, reason: str, key: str) -> dict:
        def apply(conn, row):
            if row["status"] not in BEFORE_SHIPPING:
                raise ShopError("already_shipped" if row["status"] in ("shipped", "delivered") else "not_cancellable",
                                f"order {order_id} is {row['status']}: only an order not yet shipped can be cancelled")
            conn.execute("UPDATE shop.orders SET status = 'cancelled' WHERE order_id = %s", (order_id,))
            refund = _money(row["total"]) if row["status"] == "paid" else Decimal("0")
            return {"order_id": order_id, "status": "cancelled", "refund_amount": _num(refund),
                    "currency": row["currency"]}, (refund or None)

        return self._write("cancel_order", customer_id, order_id, key, {"reason": reason or ""}, apply)

    # --- what really happened -----------------------------------------------------------------------------

    def dump(self) -> dict:
        with self.pool.connection() as conn:
            if conn.execute("SELECT to_regclass('shop.orders') IS NULL AS missing").fetchone()["missing"]:
                raise ShopError("not_loaded", "this database has no shop yet: start the shop once to load its data")
            customers = conn.execute("SELECT customer_id, name, phone FROM shop.customers ORDER BY customer_id"
                                     ).fetchall()
            orders = conn.execute("SELECT * FROM shop.orders ORDER BY position").fetchall()
            writes = conn.execute("SELECT * FROM shop.writes ORDER BY id").fetchall()
        by_order: dict[str, list] = {}
        for w in writes:
            by_order.setdefault(w["order_id"], []).append({
                "tool": w["tool"], "idempotency_key": w["idempotency_key"], "customer_id": w["customer_id"],
                "arguments": w["arguments"], "result": w["result"], "created_at": _iso(w["created_at"])})
        return {
            "customers": customers,
            "orders": [{"order_id": o["order_id"], "customer_id": o["customer_id"], "status": o["status"],
                        "total": _num(o["total"]), "currency": o["currency"], "address": o["address"],
                        "carrier": o["carrier"], "tracking_no": o["tracking_no"],
                        "writes": by_order.get(o["order_id"], [])} for o in orders],
        }
