"""Listening in context, measured as the field measures task-oriented bots: pass^1 and pass^k over the
project's conversation set (tests/router/turn/listening_kit.py), each case run k times with phrasings
drawn from its pools, through the whole gateway (HTTP, guards, classifier, escalation rules, workflows,
the MCP example shop), judged by the shop's own records.

    .venv/bin/python benchmarks/listening.py [--k 4] [--json]

It runs the suite's conversation-set test with SWITCHBOARD_LISTENING_SEEDS=k (each case k times) and
writes benchmarks/results/listening.json with pass^1, pass^k per pattern, the run count and the machine.
The shop is the test's own sandbox (a fresh copy of the sample data for every run): nothing real is touched.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN_ALL = {"quick": ["--k", "1"], "full": ["--k", "4"]}

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=4, help="runs of each case with other phrasings (pass^k)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "listening.json"
        env = {**os.environ, "SWITCHBOARD_LISTENING_SEEDS": str(args.k), "SWITCHBOARD_LISTENING_REPORT": str(report),
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                               "tests/router/turn/test_listening_set.py"], cwd=ROOT, env=env,
                              capture_output=args.json, text=True)
        seconds = time.perf_counter() - t0
        if not report.exists():
            print("the conversation set did not run to the end", file=sys.stderr)
            return proc.returncode or 1
        figures = json.loads(report.read_text(encoding="utf-8"))
    figures.update({"seconds": round(seconds, 1), "test_passed": proc.returncode == 0,
                    "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                                "python": platform.python_version()}})
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "listening.json").write_text(json.dumps(figures, indent=2), encoding="utf-8")
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"\n{figures['cases']} cases x {args.k} runs ({figures['runs']} conversations, {figures['turns']} turns) "
              f"in {seconds:.0f} s: pass^1 {figures['pass^1']:.3f}, pass^{args.k} {figures[f'pass^{args.k}']:.3f}")
        for pattern, v in figures["per_pattern"].items():
            print(f"  {pattern:18s} " + "  ".join(f"{k} {x:.3f}" for k, x in v.items()))
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
