"""``switchboard shop dump``: what the example shop holds, to check what the bot really did.

The example shop (``examples/shop``, the default tool server) keeps its data in schema ``shop`` of the
gateway's own database; this reads it there (the configured database, or the embedded one). A deployer's own
tool servers keep their data elsewhere and are not read here.
"""

from __future__ import annotations

import json

import typer

from router.cli._common import JsonOpt, database, emit, fail, settings

app = typer.Typer(help="The example shop (the default tool server): what it holds.", no_args_is_help=True)


def _table(data: dict) -> str:
    lines = [f"{'order':<8} {'customer':<9} {'status':<16} {'total':>10} {'cur':<4} {'carrier':<10} tracking",
             "-" * 78]
    for o in data["orders"]:
        lines.append(f"{o['order_id']:<8} {o['customer_id']:<9} {o['status']:<16} {o['total']:>10.2f} "
                     f"{o['currency']:<4} {o['carrier'] or '-':<10} {o['tracking_no'] or '-'}")
        for w in o["writes"]:
            lines.append(f"    {w['created_at']}  {w['tool']:<15} key={w['idempotency_key']}  "
                         f"{json.dumps(w['arguments'], ensure_ascii=False)}")
    writes = sum(len(o["writes"]) for o in data["orders"])
    lines.append(f"{len(data['orders'])} orders, {len(data['customers'])} customers, {writes} writes")
    return "\n".join(lines)


# what a write's arguments and results carry about the order itself: shown as they are
BUSINESS = ("order_id", "customer_id", "idempotency_key", "amount", "total", "currency", "status", "carrier",
            "tracking_no", "invoice_no", "reason", "tool")
PERSONAL_FIELDS = {"address": "[address]", "new_address": "[address]"}


def _masked_value(value):
    from text import personal

    if isinstance(value, dict):
        return {k: PERSONAL_FIELDS[k] if k in PERSONAL_FIELDS and value[k] else
                value[k] if k in BUSINESS else _masked_value(value[k]) for k in value}
    if isinstance(value, list):
        return [_masked_value(v) for v in value]
    return personal.partial(value) if isinstance(value, str) else value


def masked(data: dict) -> dict:
    """The dump without personal data: a name's first letter, a phone as 138****8001 (the text package's
    agent view), an address as [address], and what the detector finds in the writes' arguments masked."""
    from text import personal

    def name(n):
        return f"{n[:1]}{'*' * min(len(n) - 1, 4)}" if n else n

    def phone(p):
        shown = personal.partial(p) if p else p
        return "[phone]" if p and shown == p else shown   # a number the detector does not read is hidden whole

    return {
        "customers": [{**c, "name": name(c.get("name")), "phone": phone(c.get("phone"))} for c in data["customers"]],
        "orders": [{**o, "address": "[address]" if o.get("address") else o.get("address"),
                    "writes": [{**w, "arguments": _masked_value(w.get("arguments")),
                                "result": _masked_value(w.get("result"))} for w in o["writes"]]}
                   for o in data["orders"]],
    }


@app.command("dump")
def dump(
    order: list[str] = typer.Option(None, "--order", help="Only this order (repeatable)."),
    show_personal: bool = typer.Option(False, "--show-personal-data", help="Show names, phone numbers and "
                                       "addresses as stored (masked by default)."),
    as_json: bool = JsonOpt,
) -> None:
    """Every order with its current status and the writes recorded against it (refunds, address changes,
    invoices, cancellations), with their idempotency keys; exit 1 when the shop has not been loaded yet.
    Customers' names, phone numbers and addresses are masked unless --show-personal-data."""
    from examples.shop.store import Shop, ShopError

    try:
        dsn = database(settings(), migrate_first=False)
    except Exception as exc:  # noqa: BLE001
        fail(f"database: {type(exc).__name__}: {exc}", as_json)
    shop = Shop(dsn, max_size=1)
    try:
        data = shop.dump()
    except ShopError as exc:
        fail(str(exc), as_json)
    finally:
        shop.close()
    if order:
        known = {o["order_id"] for o in data["orders"]}
        unknown = [o for o in order if o not in known]
        if unknown:
            fail(f"no order {', '.join(map(repr, unknown))} in the shop", as_json, code=2)
        data["orders"] = [o for o in data["orders"] if o["order_id"] in order]
    if not show_personal:
        data = masked(data)
    emit(data, as_json, _table(data))
