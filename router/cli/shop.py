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


@app.command("dump")
def dump(
    order: list[str] = typer.Option(None, "--order", help="Only this order (repeatable)."),
    as_json: bool = JsonOpt,
) -> None:
    """Every order with its current status and the writes recorded against it (refunds, address changes,
    invoices, cancellations), with their idempotency keys; exit 1 when the shop has not been loaded yet."""
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
    emit(data, as_json, _table(data))
