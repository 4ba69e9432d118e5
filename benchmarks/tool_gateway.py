"""The tool gateway's own cost per call, over loopback MCP (the example shop over stdio).

For every call, the time spent inside the transport (the MCP round trip and the shop's handler) is measured
on the gateway's event loop and subtracted from the call's wall time; what is left is the gateway's own
work: allowed_for, identity injection, input and output JSON Schema validation, rate limit, breaker
bookkeeping, the hop to the loop thread and back, and the audit row (reported with and without it). A raw
SDK ``ClientSession.call_tool`` on the same session is timed alongside for comparison. Then the breaker of
a tool is opened and short-circuited calls are timed.

    .venv/bin/python benchmarks/tool_gateway.py                  # 500 calls, 1000 short-circuited
    .venv/bin/python benchmarks/tool_gateway.py --calls 200 --json

Writes benchmarks/results/tool_gateway.json. Targets: own overhead <= 2 ms p95; breaker open < 1 ms.
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--calls", "200", "--short-circuited", "300"], "full": []}

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _scratch import drop_database, fresh_database  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "tool_gateway.json"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def summary(values: list[float]) -> dict:
    return {"p50_ms": round(pct(values, 50), 3), "p95_ms": round(pct(values, 95), 3),
            "p99_ms": round(pct(values, 99), 3), "mean_ms": round(statistics.fmean(values), 3), "n": len(values)}


class TimedTransport:
    """Wraps a transport and remembers how long its last call took, measured on the event loop."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.last_s = 0.0

    @property
    def connected(self) -> bool:
        return self.inner.connected

    async def call(self, spec, arguments, *, timeout, idempotency_key):
        t = time.perf_counter()
        try:
            return await self.inner.call(spec, arguments, timeout=timeout, idempotency_key=idempotency_key)
        finally:
            self.last_s = time.perf_counter() - t

    async def list_tools(self):
        return await self.inner.list_tools()

    async def aclose(self):
        await self.inner.aclose()


def run(dsn: str, calls: int, short: int, quiet: bool) -> dict:
    from automation.tools import Caller, load_tool_gateway
    from router.db import open_pool

    env = dict(os.environ, PYTHONPATH=str(REPO), SWITCHBOARD_SHOP_URL="")
    env.pop("SWITCHBOARD_SHOP_DATA", None)
    pool = open_pool(dsn, min_size=2, max_size=4)
    gw = load_tool_gateway(None, pool=pool, variables=env)
    try:
        caller = Caller(channel="web", customer_id="c1", conversation_id="bench", purpose="order_status")
        assert gw.check() == {}, gw.check()
        timed = TimedTransport(gw._transports["shop"])
        gw._transports["shop"] = timed
        args = {"order_id": "100234"}
        from automation.tools.gateway import _Bucket

        # the bundled budget (60 calls a minute per customer) would stop a benchmark; keep a bucket, but a large one
        gw._guards["get_order"].bucket = _Bucket(10**9, 1)
        gw._guards["track_shipment"].bucket = _Bucket(10**9, 1)
        for _ in range(50):  # warm up: session, pool connections, caches
            assert gw.call("get_order", args, caller).ok

        own_with_audit, own_without_audit, totals, transport = [], [], [], []
        cpu0 = time.process_time()
        for _ in range(calls):
            t = time.perf_counter()
            r = gw.call("get_order", args, caller)
            wall = time.perf_counter() - t
            assert r.ok, r
            totals.append(wall * 1000)
            transport.append(timed.last_s * 1000)
            own_with_audit.append((wall - timed.last_s) * 1000)
            own_without_audit.append(r.latency_ms - timed.last_s * 1000)
        cpu_gateway = (time.process_time() - cpu0) * 1000 / calls

        session = timed.inner._session

        async def raw_call() -> float:
            t = time.perf_counter()
            result = await session.call_tool("get_order", {"customer_id": "c1", "order_id": "100234"})
            assert not result.is_error
            return (time.perf_counter() - t) * 1000

        cpu0 = time.process_time()
        raw = [gw._loop.run(raw_call(), 30) for _ in range(calls)]
        cpu_raw = (time.process_time() - cpu0) * 1000 / calls

        guard = gw._guards["track_shipment"]
        guard.breaker.open()
        short_wall, short_no_audit = [], []
        for _ in range(short):
            t = time.perf_counter()
            r = gw.call("track_shipment", args, caller)
            short_wall.append((time.perf_counter() - t) * 1000)
            short_no_audit.append(r.latency_ms)
            assert r.status == "breaker_open", r
    finally:
        gw.close()
        pool.close()
    return {
        "gateway_call_total": summary(totals),
        "transport_time": summary(transport),
        "raw_sdk_call_tool": summary(raw),
        "own_overhead_with_audit": summary(own_with_audit),
        "own_overhead_without_audit": summary(own_without_audit),
        "breaker_open_with_audit": summary(short_wall),
        "breaker_open_without_audit": summary(short_no_audit),
        # this process's CPU per call (both threads; the shop's own process not included): the gateway's
        # call, a raw SDK call_tool, and the difference = the gateway's own CPU work, load-independent
        "cpu_ms_per_call": {"gateway": round(cpu_gateway, 3), "raw_sdk": round(cpu_raw, 3),
                            "own": round(cpu_gateway - cpu_raw, 3)},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--short-circuited", type=int, default=1000)
    p.add_argument("--database-url", help="a Postgres to create a scratch database in (default: embedded)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()

    tmp = embedded = None
    if args.database_url:
        admin = args.database_url
    else:
        from router.db import EmbeddedPostgres

        tmp = Path(tempfile.mkdtemp(prefix="sbbench-"))
        embedded = EmbeddedPostgres(tmp / "pg")
        admin = embedded.start()
    dsn = fresh_database(admin)
    results: dict = {"benchmark": "tool_gateway", "tool": "get_order over MCP stdio (examples.shop)",
                     "cpus": os.cpu_count(), "machine": platform.machine(), "processor": platform.processor(),
                     "python": platform.python_version(), "load_avg_before": os.getloadavg(),
                     "targets": {"own_overhead_p95_ms": 2.0, "breaker_open_ms": 1.0}}
    try:
        results.update(run(dsn, args.calls, args.short_circuited, args.json))
    finally:
        drop_database(admin, dsn)
        if embedded is not None:
            embedded.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    results["load_avg_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    if args.json:
        print(json.dumps(results))
        return
    print(f"\n{args.calls} calls of get_order over MCP stdio; {os.cpu_count()} CPUs, {platform.machine()}, "
          f"Python {platform.python_version()} (load before {results['load_avg_before'][0]:.1f})")
    print(f"{'':<32} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for key in ("gateway_call_total", "transport_time", "raw_sdk_call_tool", "own_overhead_with_audit",
                "own_overhead_without_audit", "breaker_open_with_audit", "breaker_open_without_audit"):
        r = results[key]
        print(f"{key:<32} {r['p50_ms']:>8.3f} {r['p95_ms']:>8.3f} {r['p99_ms']:>8.3f}")
    cpu = results["cpu_ms_per_call"]
    print(f"CPU ms per call in this process: gateway {cpu['gateway']:.3f}, raw SDK {cpu['raw_sdk']:.3f}, "
          f"own {cpu['own']:.3f}")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
