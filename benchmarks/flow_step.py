"""A flow step's own cost: the engine's work on a turn (lock, CEL, matching, save), the tools' time excluded.

Three cases, each a turn of a real flow instance on the embedded Postgres (one transaction per turn):

* ``answer_ask``: an order number answers an ask; a read call, a check and a confirm prompt follow;
* ``loop_10_orders``: "yes" to a summary confirmation runs a foreach over 10 orders (call + set per order);
* ``choose_50_variants``: a variant named by its options is chosen among 50.

The tools are answered in process by a benchmark tool table (``BenchTools``): their time is measured
around each call and subtracted, so what is left is the engine's own cost. Target: <= 5 ms p95 per step.
Both wall time (which includes Postgres and, on a busy machine, waiting for a core) and this process's
CPU time (``time.thread_time``, the figure to compare on a loaded machine) are reported, with the load.

    .venv/bin/python benchmarks/flow_step.py [--turns 200] [--json]

Prints a table and writes benchmarks/results/flow_step.json.
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--turns", "50"], "full": []}

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402
from psycopg.rows import dict_row  # noqa: E402

from automation.tools.base import Caller, ToolResult  # noqa: E402
from automation.workflows.engine import FlowEngine  # noqa: E402
from automation.workflows.spec import parse_workflows  # noqa: E402
from _stats import percentile  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "flow_step.json"

WORKFLOWS = """
workflows:
  status:
    slots:
      order_ref: {validate: {entity: order_id, regex: "^W[0-9]{4}$"}, prompt: {zh: 订单号, en: Order number}}
    steps:
      - {id: ask_order, ask: order_ref}
      - {id: load, call: get_order, args: {order_ref: slots.order_ref}, bind: order}
      - id: pending
        check: order.status == "pending"
        refuse: {zh: "不可修改", en: "cannot change"}
      - id: sure
        confirm: {zh: "修改 {{ order.order_ref }}？", en: "Change {{ order.order_ref }} ({{ order.items.map(i, i.title).join(', ') }})?"}
        pending_action: {tool: change_order, arguments: {order_ref: slots.order_ref}, summary: {zh: 修改, en: "change {{ slots.order_ref }}"}}
      - {id: change, call: change_order, args: {order_ref: slots.order_ref}, bind: changed}
      - {id: done, reply: {zh: "好了", en: "Done: {{ changed.order_ref }}"}}
  loop:
    slots: {refs: {}, done: {}, total: {}}
    steps:
      - {id: load, call: list_orders, bind: orders}
      - id: plan
        set: {refs: "orders.orders.filter(o, o.status == 'pending').map(o, o.order_ref)", done: "[]", total: "0.0"}
      - id: sure
        confirm: {zh: "取消 {{ size(slots.refs) }} 个？", en: "Cancel {{ size(slots.refs) }} orders: {{ slots.refs.join(', ') }}?"}
      - id: each
        foreach: slots.refs
        as: ref
        steps:
          - {id: cancel, call: change_order, args: {order_ref: ref}, bind: res}
          - {id: tally, set: {done: "slots.done + [res.order_ref]", total: "slots.total + res.amount"}}
      - {id: done, reply: {zh: "已取消", en: "Cancelled {{ slots.done.join(', ') }} ({{ slots.total }})"}}
  variant:
    slots: {variant: {}}
    steps:
      - {id: load, call: get_product, bind: product}
      - id: pick
        choose: variant
        options: product.variants.filter(v, v.available)
        label: "{{ option.options.map(k, k + ' ' + option.options[k]).join(', ') }} ({{ option.price }})"
        option_id: option.variant_id
        match: ["option.options.map(k, option.options[k])"]
        prompt: {zh: 哪一款, en: "Which one?"}
      - {id: done, reply: {zh: 好, en: "Chosen {{ slots.variant.variant_id }}"}}
"""

COLORS = ["red", "blue", "green", "black", "white", "grey", "navy", "olive", "sand", "teal"]
SIZES = ["XS", "S", "M", "L", "XL"]


@dataclass
class Spec:
    name: str
    risk: str
    input_schema: dict


class BenchTools:
    """Tools answered in process from fixed data, with the time spent in them recorded for subtraction."""

    def __init__(self):
        self.tool_seconds = 0.0
        self.tool_cpu = 0.0
        items = [{"line_id": f"L{i}", "title": f"Item {i}", "price": 10.0} for i in range(3)]
        self.orders = [{"order_ref": f"W{1000 + i}", "status": "pending", "items": items} for i in range(10)]
        self.product = {"product_id": "p", "variants": [
            {"variant_id": f"v_{c}_{s}", "options": {"color": c, "size": s}, "price": 20.0 + i, "available": True}
            for i, (c, s) in enumerate((c, s) for c in COLORS for s in SIZES)]}
        self._specs = {"get_order": Spec("get_order", "read", {"properties": {"order_ref": {}}}),
                       "list_orders": Spec("list_orders", "read", {"properties": {}}),
                       "get_product": Spec("get_product", "read", {"properties": {}}),
                       "change_order": Spec("change_order", "money", {"properties": {"order_ref": {}}})}

    def names(self):
        return sorted(self._specs)

    def spec(self, name):
        return self._specs[name]

    def call(self, name, arguments, caller, *, idempotency_key=None):
        t, c = time.perf_counter(), time.thread_time()
        if name == "get_order":
            out = next(o for o in self.orders if o["order_ref"] == arguments["order_ref"])
        elif name == "list_orders":
            out = {"orders": self.orders}
        elif name == "get_product":
            out = self.product
        else:
            out = {"order_ref": arguments["order_ref"], "amount": 30.0, "key": idempotency_key}
        result = ToolResult(name, "ok", output=json.loads(json.dumps(out)))
        self.tool_seconds += time.perf_counter() - t
        self.tool_cpu += time.thread_time() - c
        return result


class NoApprovals:
    def open_approval(self, conn, request):
        raise AssertionError("no case here needs an approval")


def run(dsn: str, turns: int, quiet: bool) -> dict:
    tools = BenchTools()
    engine = FlowEngine(parse_workflows(WORKFLOWS, file="bench.yaml", tools=tools), tools, NoApprovals())
    cases = {
        "answer_ask": ("status", "I want to change an order", "W1003"),
        "loop_10_orders": ("loop", "cancel all", "yes"),
        "choose_50_variants": ("variant", "swap it", "the navy one in size L"),
    }
    out = {}
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        for case, (wf, first, answer) in cases.items():
            per_turn, per_step, cpu_turn, cpu_step, steps_seen = [], [], [], [], 0
            for i in range(turns + 10):
                caller = Caller("bench", "cus", conversation_id=f"{case}-{i}-{uuid.uuid4().hex[:6]}")
                with conn.transaction():
                    t = engine.start(conn, wf, caller, first, {}, "en")
                assert t.status == "waiting", (case, t.reply)
                tools.tool_seconds = tools.tool_cpu = 0.0
                started, cpu0 = time.perf_counter(), time.thread_time()
                with conn.transaction():
                    t = engine.advance(conn, t.instance_id, caller, answer, {}, "en")
                own = (time.perf_counter() - started - tools.tool_seconds) * 1000.0
                own_cpu = (time.thread_time() - cpu0 - tools.tool_cpu) * 1000.0
                assert t.status in ("waiting", "completed"), (case, t.reply)
                if case == "choose_50_variants":
                    assert "v_navy_L" in t.reply, t.reply
                if i < 10:
                    continue   # warm-up
                n = max(1, len(t.trace))
                steps_seen = n
                per_turn.append(own)
                per_step.append(own / n)
                cpu_turn.append(own_cpu)
                cpu_step.append(own_cpu / n)

            def q(values):
                return {"p50": round(statistics.median(values), 3), "p95": round(percentile(values, 95), 3)}

            out[case] = {"turns": turns, "steps_per_turn": steps_seen,
                         "turn_ms": q(per_turn), "step_ms": q(per_step),            # wall time (incl. Postgres)
                         "turn_cpu_ms": q(cpu_turn), "step_cpu_ms": q(cpu_step)}    # this process's CPU
            if not quiet:
                r = out[case]
                print(f"{case:20s} steps/turn {steps_seen:3d}  wall turn p50 {r['turn_ms']['p50']:7.3f} p95 "
                      f"{r['turn_ms']['p95']:7.3f} ms  CPU turn p50 {r['turn_cpu_ms']['p50']:7.3f} p95 "
                      f"{r['turn_cpu_ms']['p95']:7.3f} ms  step wall p95 {r['step_ms']['p95']:6.3f} "
                      f"CPU p95 {r['step_cpu_ms']['p95']:6.3f} ms")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=200, help="measured turns per case (after 10 warm-up turns)")
    ap.add_argument("--database-url", help="an admin URL of a running Postgres (default: a temporary embedded one)")
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    args = ap.parse_args()
    from router.db import EmbeddedPostgres, migrate

    tmp, embedded = None, None
    if args.database_url:
        admin = args.database_url
    else:
        tmp = Path(tempfile.mkdtemp(prefix="sbflow-"))
        embedded = EmbeddedPostgres(tmp / "pg")
        admin = embedded.start()
    base, _, query = admin.partition("?")
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{base.rsplit('/', 1)[0]}/postgres" + (f"?{query}" if query else ""), autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    dsn = f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
    results = {"benchmark": "flow_step", "cpus": os.cpu_count(), "load_avg_before": os.getloadavg(),
               "python": platform.python_version(), "machine": platform.machine(),
               "targets": {"step_ms_p95": 5.0}, "note": "tool time excluded (measured around each call)"}
    try:
        migrate(dsn)
        results["cases"] = run(dsn, args.turns, args.json)
    finally:
        if embedded is not None:
            embedded.stop()
    results["load_avg_after"] = os.getloadavg()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"{os.cpu_count()} CPUs, load before {results['load_avg_before']}, after "
              f"{results['load_avg_after']}; written to {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
