"""Writes ``data.json``: the third shop's records, small and the same on every run (a fixed seed).

The first customers are written out by hand (the scripted conversations speak about them); the rest are
generated from a seeded ``random.Random`` so that lists, filters and references work over a realistic mass.
Run: ``python tests/automation/third_shop/make_data.py``.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

SIZES = ["XS", "S", "M", "L", "XL"]


def _variants(pid: str, axes: dict[str, list[str]], base: float, unavailable: set[tuple[str, ...]]) -> list[dict]:
    out = []
    names = list(axes)
    for combo in itertools.product(*axes.values()):
        vid = "v_" + pid[2:] + "_" + "_".join(c.lower().replace(" ", "") for c in combo)
        step = sum(SIZES.index(c) for c in combo if c in SIZES) * 2.0
        out.append({"variant_id": vid, "options": dict(zip(names, combo)), "price": base + step,
                    "available": combo not in unavailable})
    return out


PRODUCTS = [
    {"product_id": "p_tshirt", "name": "T-Shirt", "category": "clothing", "variants": _variants(
        "p_tshirt", {"size": ["S", "M", "L", "XL"], "colour": ["black", "white", "navy"], "material": ["cotton", "polyester"]},
        20.0, {("XL", "navy", "polyester"), ("S", "white", "polyester")})},
    {"product_id": "p_jacket", "name": "Rain Jacket", "category": "clothing", "variants": _variants(
        "p_jacket", {"size": ["S", "M", "L", "XL"], "colour": ["black", "blue", "green"], "material": ["nylon", "polyester"]},
        80.0, {("M", "green", "nylon"), ("S", "black", "polyester")})},
    {"product_id": "p_sneakers", "name": "Running Sneakers", "category": "shoes", "variants": _variants(
        "p_sneakers", {"size": ["S", "M", "L"], "colour": ["black", "white"], "material": ["mesh", "leather"]},
        90.0, {("L", "white", "leather")})},
    {"product_id": "p_kettle", "name": "Electric Kettle", "category": "kitchen", "variants": _variants(
        "p_kettle", {"colour": ["silver", "black", "red"], "material": ["steel", "glass"]}, 45.0, {("red", "glass")})},
    {"product_id": "p_pan", "name": "Frying Pan", "category": "kitchen", "variants": _variants(
        "p_pan", {"size": ["S", "M", "L"], "material": ["steel", "cast iron"]}, 30.0, set())},
    {"product_id": "p_mug", "name": "Coffee Mug", "category": "kitchen", "variants": _variants(
        "p_mug", {"colour": ["white", "black", "blue"], "material": ["ceramic", "glass"]}, 12.0, set())},
    {"product_id": "p_lamp", "name": "Desk Lamp", "category": "lighting", "variants": _variants(
        "p_lamp", {"colour": ["black", "white", "brass"], "material": ["metal", "wood"]}, 40.0, {("brass", "wood")})},
    {"product_id": "p_laptop", "name": "Laptop", "category": "electronics", "variants": _variants(
        "p_laptop", {"colour": ["silver", "space grey"], "storage": ["256GB", "512GB"]}, 900.0, set())},
    {"product_id": "p_tablet", "name": "Tablet", "category": "electronics", "variants": _variants(
        "p_tablet", {"colour": ["silver", "space grey"], "storage": ["64GB", "128GB"]}, 400.0, set())},
    {"product_id": "p_earbuds", "name": "Wireless Earbuds", "category": "electronics", "variants": _variants(
        "p_earbuds", {"colour": ["black", "white"]}, 80.0, set())},
]
# a 512GB laptop costs more than a 256GB one, and so on: storage raises the price
for p in PRODUCTS:
    for v in p["variants"]:
        st = v["options"].get("storage")
        if st in ("512GB", "128GB"):
            v["price"] += 150.0 if st == "512GB" else 60.0
BY_ID = {p["product_id"]: p for p in PRODUCTS}


def _addr(aid, label, a1, a2, city, state, country, zip_, default=False):
    return {"address_id": aid, "label": label, "address1": a1, "address2": a2, "city": city, "state": state,
            "country": country, "zip": zip_, "default": default}


def _pay(pid, type_, **kw):
    return {"id": pid, "type": type_, **kw}


def _item(n: int, pid: str, **opts) -> dict:
    p = BY_ID[pid]
    v = next(v for v in p["variants"] if all(v["options"].get(k) == val for k, val in opts.items()))
    return {"item_id": f"i{n}", "product_id": pid, "variant_id": v["variant_id"], "name": p["name"],
            "category": p["category"], "options": dict(v["options"]), "price": v["price"]}


def _order(oid, cid, status, items, address, pm):
    items = [dict(it, item_id=f"{oid}-{k + 1}") for k, it in enumerate(items)]
    ship = {k: address[k] for k in ("address1", "address2", "city", "state", "country", "zip")}
    return {"order_id": oid, "customer_id": cid, "status": status, "items": items, "address": ship,
            "payment_method_id": pm, "total": round(sum(i["price"] for i in items), 2)}


def hand_written() -> tuple[list[dict], list[dict]]:
    cus, orders = [], []
    # Mia: clothes, two addresses (Boston, Austin), card + paypal + gift card
    mia_home = _addr("a_mia_home", "home", "18 Beacon St", "Apt 5", "Boston", "MA", "US", "02108", True)
    mia_work = _addr("a_mia_work", "work", "400 Congress Ave", "Suite 210", "Austin", "TX", "US", "78701")
    cus.append({"customer_id": "cus_mia", "name": "Mia Wong", "email": "mia@example.com", "addresses": [mia_home, mia_work],
                "payment_methods": [_pay("pm_mia_visa", "card", brand="visa", last4="4242"),
                                    _pay("pm_mia_paypal", "paypal", email="mia@example.com"),
                                    _pay("pm_mia_gift", "gift_card", balance=60.0)]})
    orders += [
        _order("H2001", "cus_mia", "pending", [_item(1, "p_tshirt", size="M", colour="black", material="cotton"),
                                               _item(2, "p_tshirt", size="L", colour="white", material="cotton")],
               mia_home, "pm_mia_visa"),
        _order("H2002", "cus_mia", "pending", [_item(1, "p_kettle", colour="silver", material="steel"),
                                               _item(2, "p_lamp", colour="black", material="metal")], mia_work, "pm_mia_paypal"),
        _order("H2003", "cus_mia", "delivered", [_item(1, "p_jacket", size="L", colour="blue", material="nylon"),
                                                 _item(2, "p_mug", colour="white", material="ceramic"),
                                                 _item(3, "p_pan", size="M", material="steel")], mia_home, "pm_mia_visa"),
        _order("H2004", "cus_mia", "pending", [_item(1, "p_tshirt", size="S", colour="navy", material="cotton")],
               mia_work, "pm_mia_gift"),
    ]
    # Leo (李磊): electronics across two delivered orders, one pending tablet
    leo_home = _addr("a_leo_home", "家", "88 Nanjing Rd", "Room 1203", "Shanghai", "SH", "CN", "200001", True)
    leo_office = _addr("a_leo_office", "公司", "1 Century Ave", "Floor 20", "Shanghai", "SH", "CN", "200120")
    cus.append({"customer_id": "cus_leo", "name": "李磊", "email": "leo@example.com", "addresses": [leo_home, leo_office],
                "payment_methods": [_pay("pm_leo_mc", "card", brand="mastercard", last4="5100"),
                                    _pay("pm_leo_gift", "gift_card", balance=20.0)]})
    orders += [
        _order("H2101", "cus_leo", "delivered", [_item(1, "p_laptop", colour="silver", storage="256GB"),
                                                 _item(2, "p_earbuds", colour="black")], leo_home, "pm_leo_mc"),
        _order("H2102", "cus_leo", "delivered", [_item(1, "p_laptop", colour="space grey", storage="512GB"),
                                                 _item(2, "p_tablet", colour="silver", storage="64GB")], leo_office, "pm_leo_mc"),
        _order("H2103", "cus_leo", "pending", [_item(1, "p_tablet", colour="space grey", storage="128GB")], leo_home, "pm_leo_mc"),
        _order("H2104", "cus_leo", "pending", [_item(1, "p_earbuds", colour="white"),
                                               _item(2, "p_mug", colour="black", material="ceramic")], leo_home, "pm_leo_gift"),
    ]
    # Noah: a kitchen shopper; pending orders to cancel
    noah_home = _addr("a_noah_home", "home", "77 Harbor Rd", "", "Portland", "OR", "US", "97201", True)
    cus.append({"customer_id": "cus_noah", "name": "Noah Smith", "email": "noah@example.com", "addresses": [noah_home],
                "payment_methods": [_pay("pm_noah_amex", "card", brand="amex", last4="3005"),
                                    _pay("pm_noah_paypal", "paypal", email="noah@example.com")]})
    orders += [
        _order("H2201", "cus_noah", "pending", [_item(1, "p_kettle", colour="black", material="glass"),
                                                _item(2, "p_pan", size="L", material="cast iron"),
                                                _item(3, "p_mug", colour="blue", material="glass")], noah_home, "pm_noah_amex"),
        _order("H2202", "cus_noah", "pending", [_item(1, "p_tablet", colour="silver", storage="128GB")], noah_home, "pm_noah_paypal"),
        _order("H2203", "cus_noah", "pending", [_item(1, "p_sneakers", size="M", colour="black", material="mesh")],
               noah_home, "pm_noah_amex"),
        _order("H2204", "cus_noah", "delivered", [_item(1, "p_lamp", colour="white", material="wood")], noah_home, "pm_noah_amex"),
        _order("H2205", "cus_noah", "shipped", [_item(1, "p_mug", colour="white", material="ceramic")], noah_home, "pm_noah_amex"),
    ]
    # 周静: clothes in two pending orders, one delivered jacket, paypal + card
    zhou_home = _addr("a_zhou_home", "家", "25 Wensan Rd", "Unit 3", "Hangzhou", "ZJ", "CN", "310012", True)
    cus.append({"customer_id": "cus_zhou", "name": "周静", "email": "zhou@example.com", "addresses": [zhou_home],
                "payment_methods": [_pay("pm_zhou_visa", "card", brand="visa", last4="1111"),
                                    _pay("pm_zhou_paypal", "paypal", email="zhou@example.com")]})
    orders += [
        _order("H2301", "cus_zhou", "pending", [_item(1, "p_tshirt", size="L", colour="black", material="cotton"),
                                                _item(2, "p_sneakers", size="M", colour="white", material="mesh")],
               zhou_home, "pm_zhou_visa"),
        _order("H2302", "cus_zhou", "pending", [_item(1, "p_tshirt", size="M", colour="navy", material="cotton"),
                                                _item(2, "p_kettle", colour="silver", material="steel")],
               zhou_home, "pm_zhou_paypal"),
        _order("H2303", "cus_zhou", "delivered", [_item(1, "p_jacket", size="M", colour="black", material="nylon"),
                                                  _item(2, "p_sneakers", size="L", colour="black", material="mesh")],
               zhou_home, "pm_zhou_visa"),
    ]
    # Ava: one of each status, an address in Chicago and one in Boston on an old order
    ava_home = _addr("a_ava_home", "home", "5 Lake Shore Dr", "", "Chicago", "IL", "US", "60601", True)
    ava_old = {"address1": "9 Newbury St", "address2": "Floor 2", "city": "Boston", "state": "MA", "country": "US", "zip": "02116"}
    cus.append({"customer_id": "cus_ava", "name": "Ava Brown", "email": "ava@example.com", "addresses": [ava_home],
                "payment_methods": [_pay("pm_ava_visa", "card", brand="visa", last4="4000"),
                                    _pay("pm_ava_gift", "gift_card", balance=5.0)]})
    orders += [
        _order("H2401", "cus_ava", "pending", [_item(1, "p_jacket", size="M", colour="green", material="polyester"),
                                               _item(2, "p_tshirt", size="M", colour="white", material="cotton")],
               ava_home, "pm_ava_visa"),
        _order("H2402", "cus_ava", "delivered", [_item(1, "p_sneakers", size="M", colour="white", material="mesh")],
               {**ava_old}, "pm_ava_visa"),
        _order("H2403", "cus_ava", "cancelled", [_item(1, "p_lamp", colour="brass", material="metal")], ava_home, "pm_ava_visa"),
    ]
    return cus, orders


FIRST = ["Emma", "Liam", "Olivia", "Lucas", "Sofia", "Ethan", "张伟", "王芳", "刘洋", "陈晨", "Grace", "Henry", "Isla",
         "Jack", "Chloe", "Ryan", "Zoe", "Owen", "Lily", "Max", "黄磊", "吴敏", "孙悦", "赵强", "Nora"]
CITIES = [("Seattle", "WA", "US", "98101"), ("Denver", "CO", "US", "80202"), ("Miami", "FL", "US", "33101"),
          ("Beijing", "BJ", "CN", "100000"), ("Shenzhen", "GD", "CN", "518000"), ("Boston", "MA", "US", "02110")]
STATUSES = ["pending", "processing", "shipped", "delivered", "delivered", "cancelled"]


def generated(rng: random.Random, start_customers: int, orders_wanted: int) -> tuple[list[dict], list[dict]]:
    cus, orders = [], []
    for n, name in enumerate(FIRST):
        cid = f"cus_{n + 1:03d}"
        city = rng.choice(CITIES)
        home = _addr(f"a_{cid}_home", "home", f"{rng.randint(1, 999)} {rng.choice(['Oak', 'Pine', 'Maple', 'Cedar'])} St",
                     rng.choice(["", "Apt 2", "Unit 7"]), *city, True)
        pms = [_pay(f"pm_{cid}_card", "card", brand=rng.choice(["visa", "mastercard"]), last4=f"{rng.randint(1000, 9999)}")]
        if rng.random() < 0.5:
            pms.append(_pay(f"pm_{cid}_paypal", "paypal", email=f"{cid}@example.com"))
        if rng.random() < 0.4:
            pms.append(_pay(f"pm_{cid}_gift", "gift_card", balance=float(rng.choice([10, 25, 50]))))
        cus.append({"customer_id": cid, "name": name, "email": f"{cid}@example.com", "addresses": [home], "payment_methods": pms})
    for k in range(orders_wanted):
        c = cus[k % len(cus)]
        items = []
        for _ in range(rng.randint(1, 3)):
            p = rng.choice(PRODUCTS)
            v = rng.choice(p["variants"])
            items.append(_item(0, p["product_id"], **v["options"]))
        orders.append(_order(f"H{3001 + k}", c["customer_id"], rng.choice(STATUSES), items, c["addresses"][0],
                             c["payment_methods"][0]["id"]))
    return cus, orders


def build() -> dict:
    cus, orders = hand_written()
    more_c, more_o = generated(random.Random(3), len(cus), 80 - len(orders))
    return {"products": PRODUCTS, "customers": cus + more_c, "orders": orders + more_o}


if __name__ == "__main__":
    data = build()
    out = Path(__file__).with_name("data.json")
    out.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{len(data['customers'])} customers, {len(data['orders'])} orders, {len(data['products'])} products -> {out}")
