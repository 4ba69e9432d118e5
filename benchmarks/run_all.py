"""Run every benchmark (quick by default), then print one summary table with the machine and the arithmetic path.

    .venv/bin/python benchmarks/run_all.py [--full] [--only NAME ...] [--json]      (make bench)

How a benchmark takes part: a script ``benchmarks/<name>.py`` declares, at module level,

    RUN_ALL = {"quick": ["--n", "100"], "full": [], "needs_env": "SOME_VARIABLE"}   # needs_env optional

``quick`` and ``full`` are the arguments of each mode (``full`` = the script's own defaults, the
figures the README quotes; ``"{VAR}"`` in an argument is the environment variable's value); a benchmark whose ``needs_env`` variable is unset is listed as skipped
with the reason. RUN_ALL is read with ``ast`` (nothing is imported), so a new script joins by
declaring it; a script without RUN_ALL is listed as "not wired" rather than run with guessed
arguments. Each script writes its own JSON under benchmarks/results/; this one adds
``benchmarks/results/run_all.json`` with every run's status, time and headline figures.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
HEADLINE_KEYS = ("p50", "p95", "per_s", "msg_s", "per_second", "throughput", "ndcg", "rate", "lost")


def declared(path: Path) -> dict | None:
    """The script's RUN_ALL dict, read without importing it (None when it declares none)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "RUN_ALL" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def machine() -> dict:
    """What the figures were measured on, including whether the encoder runs bf16 or fp32 here."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    sys.path.insert(0, str(ROOT))
    try:
        from rag.encoder_backends import bf16_supported

        arithmetic = "bf16 (AVX512-BF16/AMX)" if bf16_supported() else "fp32 (no bf16 dot products)"
    except Exception as exc:  # noqa: BLE001 - the table still prints without torch
        arithmetic = f"unknown ({type(exc).__name__})"
    return {"cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(), "system": platform.system(),
            "arithmetic": arithmetic, "load_avg": [round(x, 2) for x in os.getloadavg()]}


def headline(data, prefix: str = "", out: list | None = None, limit: int = 6) -> list[tuple[str, float]]:
    """A few numeric figures whose names say what they are (p50/p95, rates, throughput)."""
    out = [] if out is None else out
    if isinstance(data, dict):
        for key, value in data.items():
            if len(out) >= limit:
                break
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if any(k in str(key).lower() for k in HEADLINE_KEYS):
                    out.append((name, value))
            elif isinstance(value, (dict, list)) and key not in ("machine", "args", "config"):
                headline(value, name, out, limit)
    elif isinstance(data, list):
        for i, item in enumerate(data[:3]):
            headline(item, f"{prefix}[{i}]", out, limit)
    return out


def newest_json(before: float) -> list[Path]:
    return sorted((p for p in RESULTS.glob("*.json") if p.name != "run_all.json" and p.stat().st_mtime >= before),
                  key=lambda p: p.stat().st_mtime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="the full runs (the README's figures); default: quick")
    ap.add_argument("--only", nargs="*", default=None, help="benchmark names (file stems) to run")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per benchmark (default: 900 quick, none full)")
    ap.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    args = ap.parse_args()
    mode = "full" if args.full else "quick"
    timeout = args.timeout if args.timeout is not None else (None if args.full else 900.0)
    RESULTS.mkdir(parents=True, exist_ok=True)
    info = machine()
    scripts = sorted(p for p in HERE.glob("*.py") if p.name != Path(__file__).name and not p.name.startswith("_"))
    if args.only:
        unknown = set(args.only) - {p.stem for p in scripts}
        if unknown:
            ap.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
        scripts = [p for p in scripts if p.stem in args.only]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    runs = []
    for i, path in enumerate(scripts, 1):
        spec = declared(path)
        row = {"benchmark": path.stem, "mode": mode}
        if spec is None:
            row.update(status="not wired", note="declares no RUN_ALL")
        elif spec.get("needs_env") and not os.environ.get(spec["needs_env"]):
            row.update(status="skipped", note=f"needs {spec['needs_env']}")
        else:
            argv = [str(a).format(**os.environ) for a in spec.get(mode, [])]   # "{VAR}" = an environment value
            if not args.json:
                print(f"[{i}/{len(scripts)}] {path.stem} {' '.join(argv)}", file=sys.stderr, flush=True)
            t0 = time.time()
            try:
                done = subprocess.run([sys.executable, str(path), *argv], cwd=ROOT, env=env, timeout=timeout,
                                      stdout=subprocess.DEVNULL if args.json else None,
                                      stderr=subprocess.PIPE, text=True)
                row["status"] = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
                if done.returncode != 0:
                    row["note"] = (done.stderr or "").strip().splitlines()[-1:] or [""]
                    row["note"] = row["note"][0][:200]
            except subprocess.TimeoutExpired:
                row.update(status="timed out", note=f"after {timeout:.0f} s")
            row["seconds"] = round(time.time() - t0, 1)
            written = newest_json(t0)
            row["results"] = [str(p.relative_to(ROOT)) for p in written]
            figures: list[tuple[str, float]] = []
            for p in written:
                try:
                    figures += headline(json.loads(p.read_text(encoding="utf-8")))
                except ValueError:
                    pass
            row["figures"] = {k: v for k, v in figures[:6]}
        runs.append(row)
    summary = {"mode": mode, "machine": info, "runs": runs}
    (RESULTS / "run_all.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
    else:
        print(f"\nbenchmarks ({mode}) on {info['cpu']}, {info['cpus']} CPUs, Python {info['python']}; "
              f"encoder arithmetic: {info['arithmetic']}")
        print(f"{'benchmark':<22} {'status':<18} {'s':>7}  figures")
        for r in runs:
            figs = ", ".join(f"{k.split('.')[-1]}={v:.4g}" for k, v in (r.get("figures") or {}).items())
            print(f"{r['benchmark']:<22} {r['status']:<18} {r.get('seconds', ''):>7}  {figs or r.get('note', '')}")
        print(f"summary written to {(RESULTS / 'run_all.json').relative_to(ROOT)}")
    return 0 if all(r["status"] in ("ok", "skipped", "not wired") for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
