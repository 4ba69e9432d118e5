"""``switchboard shop dump``: the example shop's orders and recorded writes, through the CLI's real ``main()``,
on this test's Postgres; the same figures as ``python -m examples.shop dump --json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def cli(dsn, tmp_path, monkeypatch, capsys):
    from router.cli import main

    def go(*args):
        monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
        monkeypatch.delenv("SWITCHBOARD_DEBUG", raising=False)
        monkeypatch.setattr(sys, "argv", ["switchboard", *args])
        with pytest.raises(SystemExit) as stop:
            main()
        out = capsys.readouterr()
        return stop.value.code or 0, out.out, out.err

    return go


def test_before_the_shop_is_loaded_the_dump_says_so(cli):
    code, out, _ = cli("shop", "dump", "--json")
    assert code == 1 and "not_loaded" in json.loads(out)["error"]
    code, _, err = cli("shop", "dump")
    assert code == 1 and "start the shop once" in err


def test_the_dump_shows_every_order_and_the_writes_against_it(cli, dsn):
    from examples.shop.store import Shop

    shop = Shop(dsn, max_size=1)
    try:
        shop.load()
        shop.request_refund("c1", "100234", 10, "scratched", "k-refund-1")
        shop.request_refund("c1", "100234", 10, "scratched", "k-refund-1")   # the same key: changes nothing
    finally:
        shop.close()

    code, out, _ = cli("shop", "dump", "--json")
    assert code == 0
    data = json.loads(out)
    order = next(o for o in data["orders"] if o["order_id"] == "100234")
    assert order["status"] == "shipped" and order["tracking_no"] == "SF1402837465299"
    assert [(w["tool"], w["idempotency_key"], float(w["arguments"]["amount"])) for w in order["writes"]] == [
        ("request_refund", "k-refund-1", 10.0)]
    assert all(o["writes"] == [] for o in data["orders"] if o["order_id"] != "100234")

    # with --show-personal-data the CLI prints what the shop's own command prints
    env = {**os.environ, "PYTHONPATH": str(REPO), "SWITCHBOARD_DATABASE_URL": dsn}
    own = subprocess.run([sys.executable, "-m", "examples.shop", "dump", "--json", "--show-personal-data"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True)
    code, out, _ = cli("shop", "dump", "--json", "--show-personal-data")
    assert code == 0 and json.loads(own.stdout) == json.loads(out)

    code, text, _ = cli("shop", "dump")
    assert code == 0
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["order", "customer", "status"]
    row = next(line for line in lines if line.startswith("100234"))
    assert "shipped" in row and "SF1402837465299" in row and "CNY" in row
    assert any("request_refund" in line and "key=k-refund-1" in line for line in lines)
    assert lines[-1] == f"{len(data['orders'])} orders, {len(data['customers'])} customers, 1 writes"

    code, out, _ = cli("shop", "dump", "--order", "100234", "--json")
    assert code == 0 and [o["order_id"] for o in json.loads(out)["orders"]] == ["100234"]
    code, out, _ = cli("shop", "dump", "--order", "999999", "--json")
    assert code == 2 and "999999" in json.loads(out)["error"]


def test_the_dump_masks_names_phones_and_addresses_unless_asked(cli, dsn):
    from examples.shop.store import Shop

    shop = Shop(dsn, max_size=1)
    try:
        shop.load()
        shop.change_address("c1", "100235", "上海市浦东新区世纪大道100号 电话 13912345678", "k-addr-1")
        raw = shop.dump()
    finally:
        shop.close()
    phones = [c["phone"] for c in raw["customers"]]
    code, out, _ = cli("shop", "dump", "--json")
    assert code == 0
    for value in phones + ["13912345678", "世纪大道", "王小明", "Emily Carter"] + [o["address"] for o in raw["orders"]]:
        assert value not in out, value
    data = json.loads(out)
    c1 = next(c for c in data["customers"] if c["customer_id"] == "c1")
    assert c1["phone"] == "138****8001" and c1["name"] == "王**"
    order = next(o for o in data["orders"] if o["order_id"] == "100235")
    assert order["address"] == "[address]" and order["total"] == next(
        o["total"] for o in raw["orders"] if o["order_id"] == "100235")
    (write,) = order["writes"]
    assert write["arguments"]["address"] == "[address]" and write["tool"] == "change_address"
    assert write["idempotency_key"] == "k-addr-1"
    code, text, _ = cli("shop", "dump")   # the table too
    assert code == 0 and "13912345678" not in text and "世纪大道" not in text and "100235" in text
    code, out, _ = cli("shop", "dump", "--json", "--show-personal-data")   # asked for: as stored
    assert code == 0 and all(p in out for p in phones) and "13912345678" in out
    # the shop's own command masks the same way by default (table and JSON)
    env = {**os.environ, "PYTHONPATH": str(REPO), "SWITCHBOARD_DATABASE_URL": dsn}
    for extra in ([], ["--json"]):
        own = subprocess.run([sys.executable, "-m", "examples.shop", "dump", *extra], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120, check=True)
        assert "100235" in own.stdout and "[address]" in own.stdout
        for value in phones + ["13912345678", "世纪大道", "王小明", "Emily Carter"]:
            assert value not in own.stdout, (extra, value)
    code, masked_cli, _ = cli("shop", "dump", "--json")
    assert json.loads(own.stdout) == json.loads(masked_cli)


def test_help(cli):
    code, out, _ = cli("shop", "--help")
    assert code == 0 and "dump" in out
    code, out, _ = cli("shop", "dump", "--help")
    assert code == 0 and "--json" in out and "--order" in out and "writes" in out
