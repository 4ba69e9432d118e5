"""``switchboard shop dump``: what the example shop holds, to check what the bot really did.

The example shop (``examples/shop``, the default tool server) keeps its data in schema ``shop`` of the
gateway's own database; this reads it there (the configured database, or the embedded one). A deployer's own
tool servers keep their data elsewhere and are not read here.
"""

from __future__ import annotations


import typer

from examples.shop.report import masked, table
from router.cli._common import JsonOpt, database, emit, fail, settings

app = typer.Typer(help="The example shop (the default tool server): what it holds.", no_args_is_help=True)


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
    emit(data, as_json, table(data))
