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

    # the CLI prints what the shop's own command prints
    env = {**os.environ, "PYTHONPATH": str(REPO), "SWITCHBOARD_DATABASE_URL": dsn}
    own = subprocess.run([sys.executable, "-m", "examples.shop", "dump", "--json"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(own.stdout) == data

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


def test_help(cli):
    code, out, _ = cli("shop", "--help")
    assert code == 0 and "dump" in out
    code, out, _ = cli("shop", "dump", "--help")
    assert code == 0 and "--json" in out and "--order" in out and "writes" in out
