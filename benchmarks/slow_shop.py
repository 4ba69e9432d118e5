"""A slow shop must not slow the gateway: 64 customers at once, half asking the shop, half not.

The gateway runs as in production (``switchboard serve``) on a fresh database with the bundled tools file:
the example shop over MCP stdio, started by the gateway with ``SWITCHBOARD_SHOP_LATENCY_MS`` or
``SWITCHBOARD_SHOP_HANG``. Phases, one server each: tools off (the baseline), the shop answering in 300 ms,
in 2 s, and hanging. In each phase ``--concurrency`` keep-alive clients post signed ``web`` webhook deliveries:
half of them ask about one of their orders (the order_status workflow), half ask an
FAQ or make small talk (no tool). Every message is a new conversation; each order client is its own shop
customer (the shop loads generated data: one customer and one shipped order per client), so no customer
has two turns at once (the admission's per-customer cap would refuse the second).

Reported per phase: messages/s, p50/p95 per kind, the count of 503 answers (and every status), the replies to
order questions that say the shop is not answering, the most sessions seen idle in a transaction while the
load ran (``pg_stat_activity``, sampled every 20 ms: a turn holding its transaction over a tool call shows
here: the most at once, those idle for over 250 ms, the longest), and the CPU of the gateway and Postgres per
message; and, exactly, the tool calls made while their turn's stored transaction was open (from the audit's
times and the turn's transaction start); and the order turns' wait for the shop (the trace's outside time,
p50/p95), which against the shop's latency shows what the gateway adds to a call itself; and where the requests
waited (the gateway's ``switchboard_stage_seconds`` over the measured load: for a turn thread, for a turn slot,
for the tool calls, for a slot after them). Targets: 0 tool calls inside a turn's transaction, 0 503s,
FAQ/small-talk p95 within 1.5x of the tools-off phase, order-status p95 <= shop latency + 50 ms (once the
customers' session memory is cached: the first conversation of each customer also loads their profile).

Each server is measured in its steady state: after it is ready, the run waits until answer composition has
encoded the knowledge base's lines (its ``composition`` readiness check): on a new database that takes minutes of
both cores, and measured beside it the gateway's CPU per message was 92 ms instead of 22. The order turns' stored
stage times (p50/p95 per stage of ``timings_ms``) are reported beside their latency.

With ``--think-ms`` each customer pauses between a reply and their next message (reading and typing, as in a
chat); without it every client sends again at once and the two cores are saturated, so every turn of every
kind queues for a core and the latencies measure that queue more than the shop. Each phase's database starts
with the previous phase's embedding cache (the knowledge base is encoded once per run).

    .venv/bin/python benchmarks/slow_shop.py                        # 64 customers, 384 messages per phase
    .venv/bin/python benchmarks/slow_shop.py --think-ms 3000        # customers typing: the latency targets
    .venv/bin/python benchmarks/slow_shop.py --messages 128 --phases off,300,hang

Prints a table and writes benchmarks/results/slow_shop.json (with the machine: cores, load average, Python).
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--messages", "128", "--concurrency", "32"], "full": []}

import argparse
import asyncio
import contextlib
import random
import hashlib
import hmac
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import psycopg  # noqa: E402
from _scratch import drop_database, fresh_database, saved_embeddings, stop_server  # noqa: E402
from webhook_throughput import (SECRET, cpu_snapshot, start_server, wait_ready,  # noqa: E402
                                wait_warm)

RESULTS = REPO / "benchmarks" / "results" / "slow_shop.json"
SAMPLE = REPO / "examples" / "shop" / "sample_data.json"
ORDER_TEXTS = ["where is my order {o}", "我的订单{o}到哪了", "order {o} status please", "订单{o}发货了吗"]
OTHER_TEXTS = ["hello", "你好", "what is your return policy", "退货政策是什么", "thanks!", "谢谢",
               "which payment methods do you accept", "你们支持哪些付款方式"]
SILENT = ("not answering", "没有响应")


def _delivery(conversation: str, customer: str, text: str) -> tuple[bytes, dict]:
    body = json.dumps({"conversation_id": conversation, "customer_id": customer, "message_id": uuid.uuid4().hex,
                       "text": text}).encode()
    ts = str(int(time.time()))
    sig = hmac.new(SECRET.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return body, {"Content-Type": "application/json", "X-Switchboard-Signature": f"sha256={sig}",
                  "X-Switchboard-Timestamp": ts}


class IdleSampler:
    """The gateway's sessions idle in a transaction, sampled while the load runs: the most at
    once, and the longest one stayed idle (a turn that held its transaction over a shop call of L ms stays
    idle for L ms; a turn computing between two statements, for a few ms)."""

    def __init__(self, dsn: str, every: float = 0.02, over_ms: float = 250.0):
        self.dsn, self.every, self.over_ms = dsn, every, over_ms
        self.peak = 0
        self.samples = 0
        self.nonzero = 0
        self.longest_ms = 0.0
        self.peak_over = 0          # the most at once idle in a transaction for longer than over_ms
        self.shop_longest_ms = 0.0  # the example shop's own sessions (counted apart)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                # the example shop's own sessions (it stands for the business's system, on the same server here)
                # are counted apart: its data load at start is one transaction, idle between its statements
                n, longest, over, shop_longest = conn.execute(
                    "SELECT count(*) FILTER (WHERE gw), coalesce(max(idle) FILTER (WHERE gw), 0),"
                    " count(*) FILTER (WHERE gw AND idle > %s), coalesce(max(idle) FILTER (WHERE NOT gw), 0)"
                    " FROM (SELECT application_name IS DISTINCT FROM 'example-shop' AS gw,"
                    " extract(epoch FROM clock_timestamp() - state_change) * 1000 AS idle"
                    " FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND state LIKE 'idle in transaction%%') AS a", (self.over_ms,)).fetchone()
                self.shop_longest_ms = max(self.shop_longest_ms, float(shop_longest))
                self.samples += 1
                self.nonzero += n > 0
                self.peak = max(self.peak, n)
                self.longest_ms = max(self.longest_ms, float(longest))
                self.peak_over = max(self.peak_over, over)
                time.sleep(self.every)

    def __enter__(self) -> IdleSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def shop_data(path: Path, customers: int) -> None:
    """The sample shop's data plus one customer ``b<k>`` with one shipped order ``9<k:05d>`` per order client."""
    data = json.loads(SAMPLE.read_text(encoding="utf-8"))
    template = next(o for o in data["orders"] if o["status"] == "shipped")
    for k in range(customers):
        data["customers"].append({"customer_id": f"b{k}", "name": f"Bench {k}", "phone": None})
        data["orders"].append({**template, "order_id": f"9{k:05d}", "customer_id": f"b{k}"})
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


async def load(base: str, n: int, concurrency: int, run: str, per_client: int | None = None,
               think_ms: float = 0.0) -> dict:
    """``concurrency`` clients: even ones ask about an order, odd ones ask an FAQ or say hello. ``per_client``:
    each client sends exactly that many (the warm-up: every order client asks once in English and once in
    Chinese, so its session memory is cached in both languages), else they share ``n``. ``think_ms``: a client
    waits that long on average (uniformly 0.5x to 1.5x, seeded) after a reply before its next message, as a
    customer reads and types; 0 sends at once (the machine saturated: every turn then queues for a core)."""
    import httpx

    url = f"{base}/v1/channels/web/webhook"
    lat: dict[str, list[float]] = {"order": [], "other": []}
    status: Counter = Counter()
    silent = 0
    counter = iter(range(n))

    async def client(session, k: int) -> None:
        nonlocal silent
        kind = "order" if k % 2 == 0 else "other"
        mine = iter(range(k * per_client, (k + 1) * per_client)) if per_client else counter
        pace = random.Random(k)
        for j, i in enumerate(mine):
            if think_ms:
                await asyncio.sleep(think_ms * pace.uniform(0.5, 1.5) / 1000.0)
            if kind == "order":
                customer, order = f"b{k}", f"9{k:05d}"
                text = ORDER_TEXTS[(k + j) % len(ORDER_TEXTS)].format(o=order)
            else:
                customer, text = f"{run}-u{i}", OTHER_TEXTS[i % len(OTHER_TEXTS)]
            body, headers = _delivery(f"{run}-c{i}", customer, text)
            t0 = time.perf_counter()
            r = await session.post(url, content=body, headers=headers)
            lat[kind].append(time.perf_counter() - t0)
            status[r.status_code] += 1
            if kind == "order" and r.status_code == 200:
                reply = ((r.json().get("reply") or {}).get("text") or "")
                silent += any(s in reply for s in SILENT)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=120) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(session, k) for k in range(concurrency)))
        wall = time.perf_counter() - t0

    def pct(xs: list[float], q: float) -> float | None:
        xs = sorted(xs)
        return round(xs[int(q * (len(xs) - 1))] * 1000, 1) if xs else None

    return {"messages": n, "seconds": round(wall, 2), "messages_per_s": round(n / wall, 1),
            "order": {"n": len(lat["order"]), "p50_ms": pct(lat["order"], 0.5), "p95_ms": pct(lat["order"], 0.95),
                      "shop_not_answering_replies": silent},
            "faq_smalltalk": {"n": len(lat["other"]), "p50_ms": pct(lat["other"], 0.5),
                              "p95_ms": pct(lat["other"], 0.95)},
            "status": {str(k): v for k, v in status.items()}, "answers_503": status.get(503, 0)}


def calls_inside(dsn: str) -> dict:
    """Tool calls made while their turn's stored transaction was open: that transaction began (``turns.created_at``
    is its ``now()``) before the call started (the audit row's time minus its latency). Exact whatever the load,
    unlike the idle sessions a busy machine shows between any turn's statements."""
    import psycopg

    time.sleep(1.0)   # the audit writer's queue
    with psycopg.connect(dsn) as conn:
        n, inside = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE t.created_at < c.created_at - make_interval(secs => c.latency_ms"
            " / 1000.0)) FROM tool_calls c JOIN turns t ON t.id::text = c.turn_id").fetchone()
    return {"calls": n, "inside": inside}


def split_cpu(server_pid: int, pg_pid: int | None, dsn: str | None = None) -> dict[str, float]:
    """``cpu_snapshot``: the stdio shop (under the gateway) and its Postgres sessions counted apart: the gateway's
    own CPU is what a waiting call may cost; the shop's is the shop answering."""
    snap = cpu_snapshot(server_pid, pg_pid, dsn)
    snap["gateway"] = snap["server"]
    return snap


def outside_runs(dsn: str) -> dict:
    """How many times each turn's outside work ran between its passes (the trace's ``outside_runs``), per count:
    an order question whose order is read ahead of its first pass needs none."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT coalesce((trace->>'outside_runs')::int, 0) AS runs, count(*) FROM turns"
                            " GROUP BY 1 ORDER BY 1").fetchall()
    return {str(runs): n for runs, n in rows}


def shop_wait(dsn: str, run: str) -> dict:
    """The measured order turns' time waiting for their outside work (the trace's ``timings_ms.outside`` between
    passes and ``timings_ms.ahead`` before the first: no lock, no connection held), p50/p95 in ms: against the
    shop's latency it shows what the gateway adds to a call (bulkhead, threads, the MCP session), apart from the
    queue for a core every turn of the run shares."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT coalesce((t.trace->'timings_ms'->>'outside')::float, 0)"
            " + coalesce((t.trace->'timings_ms'->>'ahead')::float, 0),"
            " coalesce((t.trace->'timings_ms'->>'slot_back')::float, 0) FROM turns t JOIN conversations c"
            " ON c.id = t.conversation_id WHERE c.external_id LIKE %s"
            " AND (t.trace->'timings_ms' ? 'outside' OR t.trace->'timings_ms' ? 'ahead')",
            (f"{run}-c%",)).fetchall()
    if not rows:
        return {"n": 0}
    xs, back = sorted(r[0] for r in rows), sorted(r[1] for r in rows)
    # slot_back: the wait for a slot of the pipeline's bound on turns after the calls (not part of the shop wait)
    return {"n": len(xs), "p50_ms": round(xs[len(xs) // 2], 1), "p95_ms": round(xs[int(0.95 * (len(xs) - 1))], 1),
            "slot_back_p95_ms": round(back[int(0.95 * (len(back) - 1))], 1)}


def order_stages(dsn: str, run: str) -> dict:
    """Where the measured order turns' time went, from their traces (``timings_ms``: the look-ahead and the
    shop, the harness, classification, the flow, ...): p50/p95 in ms per stage, the whole turn's stored time
    beside the client's latency shows what the HTTP layer and the queue for a thread add."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT t.trace->'timings_ms' FROM turns t JOIN conversations c ON c.id = t.conversation_id"
            " JOIN messages m ON m.id = t.message_id WHERE c.external_id LIKE %s AND m.customer_id ~ '^b[0-9]+$'",
            (f"{run}-c%",)).fetchall()
    by: dict[str, list[float]] = {}
    for (timings,) in rows:
        for k, v in (timings or {}).items():
            if isinstance(v, (int, float)):
                by.setdefault(k, []).append(float(v))
    return {k: {"p50_ms": round(sorted(v)[len(v) // 2], 1), "p95_ms": round(sorted(v)[int(0.95 * (len(v) - 1))], 1)}
            for k, v in sorted(by.items()) if len(v) >= len(rows) // 4}


STAGES = ("thread_wait", "slot_wait", "outside", "slot_back", "total")


def stage_snapshot(base: str) -> dict[str, dict]:
    """The gateway's ``switchboard_stage_seconds`` histograms (its /metrics, public for this benchmark): per stage
    the count, the sum and the cumulative bucket counts."""
    import httpx

    out: dict[str, dict] = {}
    for line in httpx.get(f"{base}/metrics", timeout=30).text.splitlines():
        if not line.startswith("switchboard_stage_seconds"):
            continue
        name, _, value = line.rpartition(" ")
        labels = dict(kv.split("=", 1) for kv in name[name.index("{") + 1:name.rindex("}")].split(","))
        stage = labels.get("stage", "").strip('"')
        if stage not in STAGES:
            continue
        entry = out.setdefault(stage, {"count": 0.0, "sum": 0.0, "buckets": {}})
        if name.startswith("switchboard_stage_seconds_bucket"):
            entry["buckets"][labels["le"].strip('"')] = float(value)
        elif name.startswith("switchboard_stage_seconds_count"):
            entry["count"] = float(value)
        elif name.startswith("switchboard_stage_seconds_sum"):
            entry["sum"] = float(value)
    return out


def stage_waits(before: dict, after: dict) -> dict:
    """Where the measured load's requests waited, from the two snapshots: per stage the count, the mean and the
    histogram bucket holding the 95th percentile (``p95_le_ms``: at most that). ``thread_wait``: a request
    waiting for a turn thread; ``slot_wait``: a turn waiting for a slot of the pipeline's bound on turns holding a
    connection; ``outside``: a turn's wait for its tool calls (nothing held); ``slot_back``: its wait for a slot
    again after them; ``total``: the pipeline's own time per committed turn."""
    out = {}
    for stage in STAGES:
        a, b = after.get(stage), before.get(stage) or {"count": 0.0, "sum": 0.0, "buckets": {}}
        if a is None:
            continue
        n = a["count"] - b["count"]
        if n <= 0:
            continue
        row = {"n": int(n), "mean_ms": round((a["sum"] - b["sum"]) * 1000 / n, 1)}
        for le, cum in sorted(a["buckets"].items(), key=lambda kv: float(kv[0])):
            if cum - b["buckets"].get(le, 0.0) >= 0.95 * n:
                row["p95_le_ms"] = "inf" if le == "+Inf" else round(float(le) * 1000, 1)
                break
        out[stage] = row
    return out


def phase_env(phase: str) -> dict[str, str]:
    env = {"SWITCHBOARD_TOOLS_ENABLED": "true", "SWITCHBOARD_SHOP_LATENCY_MS": "", "SWITCHBOARD_SHOP_HANG": "",
           "SWITCHBOARD_METRICS_ACCESS": "public"}
    if phase == "off":
        env["SWITCHBOARD_TOOLS_ENABLED"] = "false"
    elif phase == "hang":
        env["SWITCHBOARD_SHOP_HANG"] = "1"
    else:
        env["SWITCHBOARD_SHOP_LATENCY_MS"] = phase
    return env


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--phases", default="off,300,2000,hang",
                   help="comma-separated: off (tools off), a shop latency in ms, hang (default off,300,2000,hang)")
    p.add_argument("--messages", type=int, default=384, help="messages per phase")
    p.add_argument("--concurrency", type=int, default=64, help="customers at once (half ask about an order)")
    p.add_argument("--workers", type=int, default=1, help="gateway processes (`switchboard serve --workers`)")
    p.add_argument("--pool-max", type=int, default=10, help="the gateway's database pool size")
    p.add_argument("--threads", type=int, default=None,
                   help="encoder threads per worker (SWITCHBOARD_TORCH_THREADS); default: the cores over the workers")
    p.add_argument("--think-ms", type=float, default=0.0,
                   help="mean pause of a customer between a reply and their next message (0: none, saturating "
                        "the machine; a few seconds: customers reading and typing, the load a chat gateway meets)")
    p.add_argument("--ready-timeout", type=float, default=600,
                   help="seconds to wait for a server to be ready (the first start indexes the knowledge base)")
    p.add_argument("--embeddings", type=Path, default=None,
                   help="a file of the knowledge base's embedding cache: read when it exists (the first phase's "
                        "server starts without encoding the pack), written at the end (the next run's start)")
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    args = p.parse_args()
    phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # a stopped run still stops its server and database

    home = Path(os.environ.get("SWITCHBOARD_HOME", REPO / "var"))
    model = home / "models" / "multilingual-e5-small"
    if not (model / "modules.json").is_file():
        sys.exit(f"{model} is missing: run `switchboard models prepare` first")
    tmp = Path(tempfile.mkdtemp(prefix="sbslowshop-"))
    embedded = None
    admin = os.environ.get("SWITCHBOARD_DATABASE_URL")
    if not admin:
        from router.db import EmbeddedPostgres

        embedded = EmbeddedPostgres(tmp / "pg")
        admin = embedded.start()
    data = tmp / "shop.json"
    shop_data(data, args.concurrency)
    os.environ["SWITCHBOARD_SHOP_DATA"] = str(data)
    results: dict = {"benchmark": "slow_shop", "concurrency": args.concurrency, "messages": args.messages,
                     "think_ms": args.think_ms,
                     "workers": args.workers, "pool_max": args.pool_max,
                     "threads": args.threads or max(1, (os.cpu_count() or 1) // args.workers),
                     "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "platform": platform.platform(), "load_average_start": os.getloadavg()[0]},
                     "phases": {}}
    try:
        pg_pid = embedded.status().pid if embedded is not None else None
        # each phase's database starts with the last one's embedding cache
        embeddings = args.embeddings.read_bytes() if args.embeddings and args.embeddings.is_file() else None
        for phase in phases:
            dsn = fresh_database(admin, embeddings)
            saved = {k: os.environ.get(k) for k in phase_env(phase)}
            os.environ.update(phase_env(phase))
            port = _free_port()
            base = f"http://127.0.0.1:{port}"
            proc = start_server(dsn, tmp / f"home-{phase}", str(model), port, args.pool_max,
                                threads=args.threads or max(1, (os.cpu_count() or 1) // args.workers),
                                workers=args.workers)
            try:
                wait_ready(base, proc, timeout=args.ready_timeout)
                wait_warm(base, proc.pid, timeout=args.ready_timeout, quiet=args.json)
                run = uuid.uuid4().hex[:6]
                # warm-up: models, the shop's session (stdio start), every order client's session memory (it is
                # kept per customer, and per language when a memory call reads `lang`: one question in each)
                asyncio.run(load(base, 2 * args.concurrency, args.concurrency, run + "w", per_client=2))
                stages_before = stage_snapshot(base)
                before = split_cpu(proc.pid, pg_pid, dsn)
                with IdleSampler(dsn) as idle:
                    r = asyncio.run(load(base, args.messages, args.concurrency, run, think_ms=args.think_ms))
                after = split_cpu(proc.pid, pg_pid, dsn)
                r["waits"] = stage_waits(stages_before, stage_snapshot(base))
                r["cpu_ms_per_message"] = {k: round((after[k] - before[k]) * 1000 / args.messages, 2) for k in after}
                r["idle_in_transaction"] = {"peak": idle.peak, "samples": idle.samples,
                                            "samples_with_any": idle.nonzero,
                                            "longest_ms": round(idle.longest_ms, 1),
                                            f"peak_over_{int(idle.over_ms)}_ms": idle.peak_over,
                                            "shop_sessions_longest_ms": round(idle.shop_longest_ms, 1)}
                r["tool_calls_inside_the_turns_transaction"] = calls_inside(dsn)
                r["turns_by_outside_runs"] = outside_runs(dsn)
                r["order"]["shop_wait"] = shop_wait(dsn, run)
                r["order"]["stages"] = order_stages(dsn, run)
                r["load_average"] = os.getloadavg()[0]
                results["phases"][phase] = r
                if not args.json:
                    print(f"phase {phase}: {json.dumps(r, ensure_ascii=False)}", flush=True)
            finally:
                stop_server(proc)
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                with contextlib.suppress(psycopg.Error):
                    embeddings = saved_embeddings(dsn)
                drop_database(admin, dsn)
        if args.embeddings is not None and embeddings:
            args.embeddings.parent.mkdir(parents=True, exist_ok=True)
            args.embeddings.write_bytes(embeddings)
    finally:
        if embedded is not None:
            embedded.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    base_p95 = (results["phases"].get("off") or {}).get("faq_smalltalk", {}).get("p95_ms")
    for phase, r in results["phases"].items():
        checks = {"no_tool_call_inside_a_turns_transaction": r["tool_calls_inside_the_turns_transaction"]["inside"] == 0,
                  "no_503": r["answers_503"] == 0}
        if base_p95 and phase != "off":
            checks["faq_p95_within_1_5x_of_off"] = r["faq_smalltalk"]["p95_ms"] <= 1.5 * base_p95
        if phase.isdigit():
            checks["order_p95_within_latency_plus_50ms"] = (r["order"]["p95_ms"] or 0) <= int(phase) + 50
            # what the gateway adds to the shop's own latency while the turn waits for it (reported, not a target)
            r["order"]["shop_wait_beyond_latency_p95_ms"] = (
                round(r["order"]["shop_wait"]["p95_ms"] - int(phase), 1) if r["order"]["shop_wait"].get("n") else None)
        r["targets"] = checks
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, ensure_ascii=False))
    if args.json:
        print(json.dumps(results, ensure_ascii=False))
        return
    m = results["machine"]
    print(f"\nslow shop: {args.concurrency} customers at once (pause between messages {args.think_ms:.0f} ms), "
          f"{args.messages} messages per phase, "
          f"{args.workers} worker(s); {m['cpus']} cores, Python {m['python']}, load average at start "
          f"{m['load_average_start']:.1f}")
    print(f"{'phase':<6} {'msg/s':>6} {'order p50/p95 ms':>18} {'shop wait p95':>13} {'faq p50/p95 ms':>16} {'503':>4} "
          f"{'calls in tx':>11} {'idle-in-tx peak/>250ms/longest ms':>34} {'cpu ms/msg gw+pg':>17}  targets")
    for phase, r in results["phases"].items():
        o, f, c, i = r["order"], r["faq_smalltalk"], r["cpu_ms_per_message"], r["idle_in_transaction"]
        print(f"{phase:<6} {r['messages_per_s']:>6} {str(o['p50_ms']) + '/' + str(o['p95_ms']):>18} "
              f"{str(o.get('shop_wait', {}).get('p95_ms', '-')):>13} "
              f"{str(f['p50_ms']) + '/' + str(f['p95_ms']):>16} {r['answers_503']:>4} "
              f"{str(r['tool_calls_inside_the_turns_transaction']['inside']) + '/' + str(r['tool_calls_inside_the_turns_transaction']['calls']):>11} "
              f"{str(i['peak']) + '/' + str(i['peak_over_250_ms']) + '/' + str(i['longest_ms']):>34} "
              f"{c['gateway']:>7}+{c['shop']:>5}+{c['postgres']:<7} {r['load_average']:>5.1f}  "
              f"{', '.join(k for k, v in r['targets'].items() if not v) or 'all met'}")
    print("where the requests waited (mean / p95 bucket, ms): thread = for a turn thread, slot = for a turn slot, "
          "outside = for the tool calls, back = for a slot after them")
    for phase, r in results["phases"].items():
        w = r.get("waits") or {}
        print(f"{phase:<6} " + "  ".join(f"{k} {v['mean_ms']}/{v.get('p95_le_ms', '-')}" for k, v in w.items()))
    print(f"written to {RESULTS.relative_to(REPO)}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
