"""The third shop's scripted conversations as a benchmark: pass^1 and pass^k over varied phrasings.

Every case of ``tests/automation/third_shop/conversations.jsonl`` runs k times (default 4), each time with
its first message phrased another way (as written, then the case's ``variants``: other words for the same
request in the same language; past them, the phrasings with a greeting or thanks), from a reset shop, through the real tool gateway and MCP server on a temporary
embedded Postgres. A trial is right when the shop's records changed exactly as the case says. Reported:
pass^1 (the share of right trials), pass^k (the share of cases right in all k trials, tau-bench's
pass^k), per workflow, and the two counts that must stay 0: writes without the customer's confirmation
and wrong writes after weak evidence.

    .venv/bin/python benchmarks/third_shop.py [--k 4] [--only ID ...] [--json]

Prints a table and writes benchmarks/results/third_shop.json.
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--k", "1"], "full": []}

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "automation"), str(REPO / "tests")]

import psycopg  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "third_shop.json"
PHRASINGS = {
    "en": [lambda s: s, lambda s: "Hi there, " + s, lambda s: s + ", thanks a lot",
           lambda s: "Hello! Could you help me? " + s],
    "zh": [lambda s: s, lambda s: "你好，" + s, lambda s: s + "，谢谢", lambda s: "麻烦帮我处理一下：" + s],
}


class _Approvals:
    def open_approval(self, conn, request):   # no workflow of this shop asks for one
        return f"apr_{uuid.uuid4().hex[:10]}"


def run(dsn: str, k: int, only: list[str], quiet: bool) -> dict:
    from automation.workflows.engine import FlowEngine
    from automation.workflows.spec import load_workflows
    from router.db.pool import open_pool
    from third_shop_kit import CASES, THIRD_SHOP, northwind_gateway, pooled_turns, run_case

    pool = open_pool(dsn, min_size=1, max_size=4)
    gateway = northwind_gateway(pool)
    engine = FlowEngine(load_workflows(THIRD_SHOP / "workflows.yaml", tools=gateway), gateway, _Approvals())

    turn, history = pooled_turns(pool)

    cases = [c for c in CASES if not only or c["id"] in only]
    per_case, failures, unconfirmed, weak_wrong = {}, [], 0, 0
    started = time.perf_counter()
    try:
        for n, case in enumerate(cases):
            phrasings = [case["turns"][0]] + list(case.get("variants") or [])
            wrap = PHRASINGS[case["lang"]]
            trials = []
            for j in range(k):
                first = phrasings[j] if j < len(phrasings) else wrap[j % len(wrap)](phrasings[j % len(phrasings)])
                v = run_case(engine, gateway, turn, history, case, f"bench3-{n}-{j}-{uuid.uuid4().hex[:6]}", first)
                trials.append(v.right)
                unconfirmed += len(v.unconfirmed)
                weak_wrong += len(v.weak_wrong)
                if not v.right:
                    failures.append({"case": case["id"], "first": first, "problems": v.problems[:3],
                                     "last_reply": v.replies[-1] if v.replies else ""})
            per_case[case["id"]] = (case["workflow"], trials)
    finally:
        gateway.close()
        pool.close()
    seconds = time.perf_counter() - started
    per_wf: dict[str, dict[str, float]] = {}
    for wf, trials in per_case.values():
        row = per_wf.setdefault(wf, {"cases": 0, "trials": 0, "right": 0, "all_right": 0})
        row["cases"] += 1
        row["trials"] += len(trials)
        row["right"] += sum(trials)
        row["all_right"] += all(trials)
    for row in per_wf.values():
        row["pass^1"] = round(row["right"] / row["trials"], 4)
        row[f"pass^{k}"] = round(row["all_right"] / row["cases"], 4)
    trials_total = sum(len(t) for _, t in per_case.values())
    out = {
        "cases": len(per_case), "k": k, "trials": trials_total,
        "pass^1": round(sum(sum(t) for _, t in per_case.values()) / max(1, trials_total), 4),
        f"pass^{k}": round(sum(all(t) for _, t in per_case.values()) / max(1, len(per_case)), 4),
        "writes_without_confirmation": unconfirmed, "wrong_writes_after_weak_evidence": weak_wrong,
        "per_workflow": per_wf, "failures": failures, "seconds": round(seconds, 1),
    }
    if not quiet:
        print(f"{'workflow':<16}{'cases':>7}{'pass^1':>9}{f'pass^{k}':>9}")
        for wf, row in per_wf.items():
            print(f"{wf:<16}{row['cases']:>7}{row['pass^1']:>9.1%}{row[f'pass^{k}']:>9.1%}")
        print(f"{'overall':<16}{out['cases']:>7}{out['pass^1']:>9.1%}{out[f'pass^{k}']:>9.1%}")
        print(f"writes without confirmation: {unconfirmed}; wrong writes after weak evidence: {weak_wrong}; "
              f"{trials_total} trials in {seconds:.0f} s")
        for f in failures:
            print(f"FAILED {f['case']} ({f['first']!r}): {f['problems']} (last reply: {f['last_reply']!r})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=4, help="trials per case, each phrased another way (pass^k)")
    ap.add_argument("--only", nargs="*", default=[], help="case ids to run (default: all)")
    ap.add_argument("--database-url", help="an admin URL of a running Postgres (default: a temporary embedded one)")
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    args = ap.parse_args()
    os.environ.setdefault("PYTHON", sys.executable)
    from router.db import EmbeddedPostgres, migrate

    embedded = None
    if args.database_url:
        admin = args.database_url
    else:
        embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="sbshop3-")) / "pg")
        admin = embedded.start()
    base, _, query = admin.partition("?")
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{base.rsplit('/', 1)[0]}/postgres" + (f"?{query}" if query else ""), autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    dsn = f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
    results = {"benchmark": "third_shop", "cpus": os.cpu_count(), "load_avg_before": os.getloadavg(),
               "python": platform.python_version(), "machine": platform.machine()}
    try:
        migrate(dsn)
        results.update(run(dsn, args.k, args.only, args.json))
    finally:
        if embedded is not None:
            embedded.stop()
    results["load_avg_after"] = os.getloadavg()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    if args.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
    else:
        print(f"{os.cpu_count()} CPUs, load before {results['load_avg_before']}, after {results['load_avg_after']}; "
              f"written to {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
