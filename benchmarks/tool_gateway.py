"""The tool gateway's own cost per call, over loopback MCP (the example shop over stdio).

For every call, the time spent inside the transport (the MCP round trip and the shop's handler) is measured
on the gateway's event loop and subtracted from the call's wall time; what is left is the gateway's own
work: allowed_for, identity injection, input and output JSON Schema validation, rate limit, breaker
bookkeeping, the hop to the loop thread and back, and the audit row (reported with and without it). Wall
time depends on the machine's load (printed); CPU time does not, so both are reported: the calling thread's
CPU per call (``time.thread_time``: the gateway's work on the caller's path, transport waits excluded) and
the whole process's CPU per call next to a raw SDK ``ClientSession.call_tool`` on the same session (the
difference includes the loop thread's and the audit writer thread's work). The audit redacts with the
project's masker (``text.personal.mask``, as the composer wires it; ``--redactor simple`` for the
gateway's stand-in). Then the breaker of a tool is opened and short-circuited calls are timed, durable
audits of a money tool (``request_refund`` of 0.01, a fresh key each) are timed, and every row is checked
to be in ``tool_calls``.

    .venv/bin/python benchmarks/tool_gateway.py                  # 500 calls, 1000 short-circuited
    .venv/bin/python benchmarks/tool_gateway.py --calls 200 --json

Writes benchmarks/results/tool_gateway.json. Targets: own overhead <= 2 ms p95 with the audit row; a call
short-circuited by an open breaker < 1 ms p95 with its audit row.
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
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _scratch import drop_database, fresh_database  # noqa: E402
from _stats import percentile  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "tool_gateway.json"


def summary(values: list[float]) -> dict:
    return {"p50_ms": round(percentile(values, 50), 3), "p95_ms": round(percentile(values, 95), 3),
            "p99_ms": round(percentile(values, 99), 3), "mean_ms": round(statistics.fmean(values), 3), "n": len(values)}


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


def _cpu_summary(values: list[float]) -> dict:
    return {"p50_ms": round(percentile(values, 50), 3), "p95_ms": round(percentile(values, 95), 3),
            "mean_ms": round(statistics.fmean(values), 3)}


def run(dsn: str, calls: int, short: int, writes: int, redactor: str) -> dict:
    from automation.tools import Caller, load_tool_gateway
    from router.db import open_pool

    env = dict(os.environ, PYTHONPATH=str(REPO), SWITCHBOARD_SHOP_URL="")
    env.pop("SWITCHBOARD_SHOP_DATA", None)
    redact = None
    if redactor == "personal":
        from text import personal

        personal.warm_up()
        redact = lambda v: personal.mask(v) or ""  # noqa: E731 - as router/app/composition.py wires it
    pool = open_pool(dsn, min_size=2, max_size=4)
    gw = load_tool_gateway(None, pool=pool, variables=env, redact=redact)
    flush = getattr(gw, "flush_audit", lambda timeout=5.0: True)
    try:
        caller = Caller(channel="web", customer_id="c1", conversation_id="bench", purpose="order_status")
        assert gw.check() == {}, gw.check()
        timed = TimedTransport(gw._transports["shop"])
        gw._transports["shop"] = timed
        args = {"order_id": "100234"}
        from automation.tools.gateway import _Bucket

        # the bundled budgets (60 reads, 5 refunds a minute per customer) would stop a benchmark: large ones
        for name in ("get_order", "track_shipment", "request_refund"):
            gw._guards[name].bucket = _Bucket(10**9, 1)
        for _ in range(50):  # warm up: session, pool connections, caches
            assert gw.call("get_order", args, caller).ok
        flush()

        own_with_audit, own_without_audit, totals, transport, thread_cpu = [], [], [], [], []
        cpu0 = time.process_time()
        for _ in range(calls):
            c = time.thread_time()
            t = time.perf_counter()
            r = gw.call("get_order", args, caller)
            wall = time.perf_counter() - t
            thread_cpu.append((time.thread_time() - c) * 1000)
            assert r.ok, r
            totals.append(wall * 1000)
            transport.append(timed.last_s * 1000)
            own_with_audit.append((wall - timed.last_s) * 1000)
            own_without_audit.append(r.latency_ms - timed.last_s * 1000)
        flush()
        cpu_gateway = (time.process_time() - cpu0) * 1000 / calls

        # how long a queued row takes to be committed (a call, then wait for its row)
        lag = []
        for _ in range(min(100, calls)):
            gw.call("get_order", args, caller)
            t = time.perf_counter()
            assert flush()
            lag.append((time.perf_counter() - t) * 1000)

        session = timed.inner._session

        async def raw_call() -> float:
            t = time.perf_counter()
            result = await session.call_tool("get_order", {"customer_id": "c1", "order_id": "100234"})
            assert not result.is_error
            return (time.perf_counter() - t) * 1000

        cpu0 = time.process_time()
        raw = [gw._loop.run(raw_call(), 30) for _ in range(calls)]
        cpu_raw = (time.process_time() - cpu0) * 1000 / calls

        # a money tool: its audit row is committed (synchronous commit) before the call returns
        refund_caller = Caller(channel="web", customer_id="c1", conversation_id="bench", purpose="refund")
        write_own, write_cpu = [], []
        for i in range(writes):
            c = time.thread_time()
            t = time.perf_counter()
            r = gw.call("request_refund", {"order_id": "100234", "amount": 0.01, "reason": "bench"}, refund_caller,
                        idempotency_key=f"bench-{uuid.uuid4().hex}")
            wall = time.perf_counter() - t
            write_cpu.append((time.thread_time() - c) * 1000)
            assert r.ok, r
            write_own.append((wall - timed.last_s) * 1000)

        guard = gw._guards["track_shipment"]
        guard.breaker.open()
        short_wall, short_no_audit, short_cpu = [], [], []
        cpu0 = time.process_time()
        for _ in range(short):
            c = time.thread_time()
            t = time.perf_counter()
            r = gw.call("track_shipment", args, caller)
            short_wall.append((time.perf_counter() - t) * 1000)
            short_cpu.append((time.thread_time() - c) * 1000)
            short_no_audit.append(r.latency_ms)
            assert r.status == "breaker_open", r
        assert flush()
        short_process_cpu = (time.process_time() - cpu0) * 1000 / short
        expected = 50 + calls + min(100, calls) + writes + short
        with pool.connection() as conn:
            rows = conn.execute("SELECT count(*) AS n FROM tool_calls").fetchone()["n"]
        assert rows == expected, f"{rows} audit rows for {expected} calls"
    finally:
        gw.close()
        pool.close()
    return {
        "redactor": redactor,
        "gateway_call_total": summary(totals),
        "transport_time": summary(transport),
        "raw_sdk_call_tool": summary(raw),
        "own_overhead_with_audit": summary(own_with_audit),
        "own_overhead_without_audit": summary(own_without_audit),
        "audit_commit_lag": summary(lag),
        "write_own_overhead_with_durable_audit": summary(write_own) if write_own else None,
        "breaker_open_with_audit": summary(short_wall),
        "breaker_open_without_audit": summary(short_no_audit),
        "audit_rows_checked": rows,
        # CPU: the calling thread per call (the gateway's work on the caller's path; waits excluded); this
        # process per call (all threads; the shop's own process not included) for the gateway's call and a raw
        # SDK call_tool, and their difference = the gateway's own CPU work wherever it runs
        "caller_thread_cpu_ms": {"read": _cpu_summary(thread_cpu), "breaker_open": _cpu_summary(short_cpu),
                                 **({"write": _cpu_summary(write_cpu)} if write_cpu else {})},
        "cpu_ms_per_call": {"gateway": round(cpu_gateway, 3), "raw_sdk": round(cpu_raw, 3),
                            "own": round(cpu_gateway - cpu_raw, 3),
                            "breaker_open": round(short_process_cpu, 3)},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--short-circuited", type=int, default=1000)
    p.add_argument("--writes", type=int, default=100, help="request_refund calls (durable audit)")
    p.add_argument("--redactor", choices=("personal", "simple"), default="personal")
    p.add_argument("--label", default="", help="stored with the figures (e.g. before/after)")
    p.add_argument("--before", type=Path, help="a previous run's JSON, kept under 'before' for comparison")
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
                     "targets": {"own_overhead_p95_ms": 2.0, "breaker_open_ms": 1.0}, "label": args.label}
    try:
        results.update(run(dsn, args.calls, args.short_circuited, args.writes, args.redactor))
    finally:
        drop_database(admin, dsn)
        if embedded is not None:
            embedded.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    results["load_avg_after"] = os.getloadavg()
    if args.before:
        results["before"] = json.loads(args.before.read_text())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    if args.json:
        print(json.dumps(results))
        return
    print(f"\n{args.calls} calls of get_order over MCP stdio; {os.cpu_count()} CPUs, {platform.machine()}, "
          f"Python {platform.python_version()} (load before {results['load_avg_before'][0]:.1f})")
    print(f"{'':<40} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for key in ("gateway_call_total", "transport_time", "raw_sdk_call_tool", "own_overhead_with_audit",
                "own_overhead_without_audit", "audit_commit_lag", "write_own_overhead_with_durable_audit",
                "breaker_open_with_audit", "breaker_open_without_audit"):
        r = results[key]
        if r:
            print(f"{key:<40} {r['p50_ms']:>8.3f} {r['p95_ms']:>8.3f} {r['p99_ms']:>8.3f}")
    for kind, r in results["caller_thread_cpu_ms"].items():
        print(f"{'caller thread CPU ' + kind:<40} {r['p50_ms']:>8.3f} {r['p95_ms']:>8.3f}")
    cpu = results["cpu_ms_per_call"]
    print(f"process CPU ms per call: gateway {cpu['gateway']:.3f}, raw SDK {cpu['raw_sdk']:.3f}, "
          f"own {cpu['own']:.3f}; breaker open {cpu['breaker_open']:.3f} (redactor: {results['redactor']}; "
          f"load after {results['load_avg_after'][0]:.1f})")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
