"""What the example shop holds, as its operators read it: one table, personal data masked unless asked.

Shared by ``python -m examples.shop dump`` and ``switchboard shop dump`` so both show the same masked view
(the ``text`` package's agent view: a name's first letter, a phone as 138****8001, an address as [address])."""

from __future__ import annotations

import json


def table(data: dict) -> str:
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
