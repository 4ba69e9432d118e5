"""Claim throughput of the human queue: N concurrent claimers drain a queue of tickets.

Two paths, each on a fresh database seeded with the same queue (tickets opened through the
service, one conversation each, in state l3_queuing):

* ``service``: claimer threads call ``HandoffService.claim_next`` directly;
* ``http``: the real gateway app (``create_app`` + ``wire_handoff``, sweeper running) served by
  uvicorn on 127.0.0.1 in its own process; claimers POST ``/v1/handoff/claim-next`` with their
  own Bearer tokens over keep-alive httpx connections.

Every claim moves the conversation to l3_connected through the gateway's real conversation
port, in the claim's transaction. Afterwards the database is checked: every ticket claimed
exactly once (double claims = 0) and none left behind or unaccounted for (lost = 0).

    .venv/bin/python benchmarks/handoff_claims.py                 # 16 claimers, 5,000 tickets, both paths
    .venv/bin/python benchmarks/handoff_claims.py --mode service --tickets 2000 --json

Prints a table and writes benchmarks/results/handoff_claims.json. Targets on 2 cores:
>= 2,000 claims/s through the service, >= 500/s through HTTP.
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--tickets", "500", "--claimers", "8"], "full": []}

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import psycopg  # noqa: E402
from _scratch import drop_database, fresh_database  # noqa: E402
from psycopg.rows import dict_row  # noqa: E402
from tqdm import tqdm  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "handoff_claims.json"
PRIORITIES = ("urgent", "high", "normal", "low")
TEAMS = ("general", "billing")


def seed(dsn: str, n_tickets: int, n_agents: int, quiet: bool) -> list[tuple[str, str]]:
    """The queue (through the service, as the router opens tickets) and the agents; returns [(name, token)]."""
    from handoff import agents
    from handoff.config import HandoffConfig
    from handoff.service import HandoffService
    from router.db import open_pool
    from router.turn.state import ConversationStatePort

    creds = []
    with open_pool(dsn, min_size=1, max_size=2) as pool:
        svc = HandoffService(pool, ConversationStatePort(), HandoffConfig(sweep_interval_seconds=0))
        with pool.connection() as conn, conn.transaction():
            for i in range(n_agents):
                # half the claimers work both teams, half only "general": team filters are on the hot path
                teams = TEAMS if i % 2 == 0 else TEAMS[:1]
                agents.add_agent(conn, f"agent{i:02d}", teams=teams, actor="bench")
                token, _ = agents.issue_token(conn, f"agent{i:02d}", actor="bench")
                creds.append((f"agent{i:02d}", token))
        bar = tqdm(total=n_tickets, desc="seeding tickets", unit="t", disable=quiet)
        batch = 500
        for start in range(0, n_tickets, batch):
            with pool.connection() as conn, conn.transaction():
                for i in range(start, min(n_tickets, start + batch)):
                    conv = conn.execute(
                        "INSERT INTO conversations (channel, external_id, customer_id, state) "
                        "VALUES ('web', %s, %s, 'l3_queuing') RETURNING id",
                        (f"bench-{i}", f"cust-{i}"),
                    ).fetchone()["id"]
                    svc.open_ticket(conn, kind="handoff" if i % 5 else "assist", conversation_id=str(conv),
                                    channel="web", customer_id=f"cust-{i}", reason="asks_for_human",
                                    priority=PRIORITIES[i % 4], team=TEAMS[1] if i % 7 == 0 else TEAMS[0],
                                    context={"transcript": [{"sender": "customer", "text": f"message {i}"}]},
                                    draft={"text": "draft"} if i % 5 == 0 else None)
            bar.update(min(batch, n_tickets - start))
        bar.close()
        with pool.connection() as conn:
            conn.execute("ANALYZE tickets")     # what autovacuum does after a burst of new tickets
    return creds


def verify(dsn: str, n_tickets: int, claims: list[tuple[str, str]]) -> dict:
    """Double claims and lost tickets, from the database and from what the claimers were given."""
    ids = [tid for _, tid in claims]
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        status = {r["status"]: r["n"] for r in conn.execute(
            "SELECT status, count(*) AS n FROM tickets GROUP BY status").fetchall()}
        multi = conn.execute(
            "SELECT count(*) AS n FROM (SELECT ticket_id FROM ticket_events WHERE action = 'claimed' "
            "GROUP BY ticket_id HAVING count(*) > 1) x").fetchone()["n"]
        holders = {r["id"]: r["name"] for r in conn.execute(
            "SELECT t.id::text AS id, a.name FROM tickets t JOIN handoff_agents a ON a.id = t.claimed_by").fetchall()}
        connected = conn.execute("SELECT count(*) AS n FROM conversations WHERE state = 'l3_connected'").fetchone()["n"]
    mismatched = sum(1 for name, tid in claims if holders.get(tid) != name)
    return {
        "tickets": n_tickets,
        "claims_returned": len(ids),
        "double_claims": (len(ids) - len(set(ids))) + multi + mismatched,
        "lost_tickets": n_tickets - len(set(ids) & set(holders)),
        "left_in_queue": status.get("queued", 0),
        "conversations_connected": connected,
    }


def _proc_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of a process, from /proc (Linux); None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _postgres_cpu() -> float | None:
    """CPU seconds of every Postgres process on this machine (server + backends), from /proc."""
    if not Path("/proc/self/stat").exists():
        return None
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().startswith(("postgres", "postmaster")):
                    total += _proc_cpu(int(entry.name)) or 0.0
            except OSError:
                continue
    return total


def _cpu_ms(before: float | None, after: float | None, n: int) -> float | None:
    return round((after - before) / max(n, 1) * 1000, 3) if before is not None and after is not None else None


def summarise(latencies: list[float], wall: float, n: int) -> dict:
    lat = sorted(latencies)
    q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [lat[0]] * 99

    return {
        "claims_per_s": round(n / wall, 1),
        "wall_s": round(wall, 3),
        "p50_ms": round(q[49] * 1000, 2),
        "p95_ms": round(q[94] * 1000, 2),
        "p99_ms": round(q[98] * 1000, 2),
        "max_ms": round(lat[-1] * 1000, 2),
    }


# -- through the service ----------------------------------------------------------------------

def _port(name: str):
    from handoff.ports import NullConversationPort
    from router.turn.state import ConversationStatePort

    return ConversationStatePort() if name == "state" else NullConversationPort()


def _claimers(dsn: str, creds: list[tuple[str, str]], port: str, barrier, done, out, closing) -> None:
    """One process's share of the claimers: threads over one pool, each draining the queue."""
    from handoff.config import HandoffConfig
    from handoff.service import HandoffService
    from router.db import open_pool

    with open_pool(dsn, min_size=len(creds), max_size=len(creds)) as pool:
        svc = HandoffService(pool, _port(port), HandoffConfig(sweep_interval_seconds=0))
        agents = [svc.authenticate(token) for _, token in creds]
        claims: list[tuple[str, str]] = []
        latencies: list[float] = []
        lock = threading.Lock()

        def claimer(agent):
            mine, lat = [], []
            barrier.wait()
            while True:
                t0 = time.perf_counter()
                t = svc.claim_next(agent)
                lat.append(time.perf_counter() - t0)
                if t is None:
                    break
                mine.append((agent.name, t["id"]))
                if len(mine) % 50 == 0:
                    with done.get_lock():
                        done.value += 50
            with lock:
                claims.extend(mine)
                latencies.extend(lat[:-1])       # the final "queue empty" call is not a claim

        threads = [threading.Thread(target=claimer, args=(a,)) for a in agents]
        for th in threads:
            th.start()
        cpu0 = time.process_time()
        for th in threads:
            th.join()
        out.put({"claims": claims, "latencies": latencies, "cpu": time.process_time() - cpu0})
        closing.wait(timeout=300)   # keep the pool's backends until Postgres's CPU has been read


def run_service(dsn: str, creds: list[tuple[str, str]], n_tickets: int, quiet: bool, port: str = "state",
                processes: int = 1) -> dict:
    """``len(creds)`` claimers split over ``processes`` processes (as over the gateway's workers), each
    process with its own pool; all start together at one barrier."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(creds) + 1)
    done = ctx.Value("i", 0)
    out = ctx.Queue()
    closing = ctx.Barrier(processes + 1)
    shares = [creds[i::processes] for i in range(processes)]
    procs = [ctx.Process(target=_claimers, args=(dsn, share, port, barrier, done, out, closing)) for share in shares]
    for pr in procs:
        pr.start()
    bar = tqdm(total=n_tickets, desc="service claims", unit="claim", disable=quiet)
    barrier.wait(timeout=300)
    pg0 = _postgres_cpu()
    t0 = time.perf_counter()
    results = []
    while len(results) < processes:
        try:
            results.append(out.get(timeout=0.2))
        except Exception:  # queue.Empty: keep the bar moving
            if any(pr.exitcode not in (None, 0) for pr in procs):
                raise RuntimeError("a claimer process failed")
        bar.update(done.value - bar.n)
    wall = time.perf_counter() - t0
    pg1 = _postgres_cpu()
    closing.wait(timeout=300)
    for pr in procs:
        pr.join()
    claims = [c for r in results for c in r["claims"]]
    latencies = [x for r in results for x in r["latencies"]]
    cpu = sum(r["cpu"] for r in results)
    bar.update(len(claims) - bar.n)
    bar.close()
    return {**summarise(latencies, wall, len(claims)), **verify(dsn, n_tickets, claims), "processes": processes,
            "python_cpu_ms_per_claim": round(cpu / max(len(claims), 1) * 1000, 3),
            "postgres_cpu_ms_per_claim": _cpu_ms(pg0, pg1, len(claims))}


# -- through HTTP -------------------------------------------------------------------------------

def serve(dsn: str, port: int, pool_size: int, home: Path) -> None:
    """The gateway app with the queue wired as in production (no models: claims do not need them)."""
    import uvicorn

    from router.app.factory import create_app
    from router.app.composition import build_services, wire_handoff
    from router.app.settings import Settings

    settings = Settings(database_url=dsn, home=home, log_json=True,
                        log_level="WARNING", db_pool_min=4, db_pool_max=pool_size, load_sample_kb=False)
    services = build_services(settings, load_models=False)
    wire_handoff(services)
    app = create_app(services=services)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, log_config=None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _http_claims(base: str, creds: list[tuple[str, str]], n_tickets: int, quiet: bool):
    import httpx

    claims: list[tuple[str, str]] = []
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    bar = tqdm(total=n_tickets, desc="http claims", unit="claim", disable=quiet)
    start = asyncio.Event()

    async def claimer(name: str, token: str):
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"},
                                     timeout=30.0) as client:
            await client.get("/v1/handoff/me")           # open the keep-alive connection first
            await start.wait()
            n = 0
            while True:
                t0 = time.perf_counter()
                r = await client.post("/v1/handoff/claim-next")
                dt = time.perf_counter() - t0
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                if r.status_code == 204:
                    return
                if r.status_code != 200:
                    raise RuntimeError(f"claim-next answered {r.status_code}: {r.text}")
                latencies.append(dt)
                claims.append((name, r.json()["id"]))
                n += 1
                if n % 25 == 0:
                    bar.update(25)

    tasks = [asyncio.create_task(claimer(name, token)) for name, token in creds]
    await asyncio.sleep(0.5)
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    bar.update(len(claims) - bar.n)
    bar.close()
    return claims, latencies, wall, statuses


def run_http(dsn: str, creds: list[tuple[str, str]], n_tickets: int, quiet: bool) -> dict:
    import httpx

    port = _free_port()
    home = Path(tempfile.mkdtemp(prefix="sbbench-home-"))   # the server's scratch $SWITCHBOARD_HOME
    proc = subprocess.Popen([sys.executable, __file__, "serve", "--dsn", dsn, "--port", str(port),
                             "--pool-size", str(len(creds) + 4), "--home", str(home)], cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the benchmark server did not start")
            time.sleep(0.2)
        server0, client0, pg0 = _proc_cpu(proc.pid), time.process_time(), _postgres_cpu()
        claims, latencies, wall, statuses = asyncio.run(_http_claims(base, creds, n_tickets, quiet))
        server1, client1, pg1 = _proc_cpu(proc.pid), time.process_time(), _postgres_cpu()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(home, ignore_errors=True)
    return {**summarise(latencies, wall, len(claims)), **verify(dsn, n_tickets, claims), "http_statuses": statuses,
            "server_cpu_ms_per_claim": _cpu_ms(server0, server1, len(claims)),
            "client_cpu_ms_per_claim": _cpu_ms(client0, client1, len(claims)),
            "postgres_cpu_ms_per_claim": _cpu_ms(pg0, pg1, len(claims))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("serve", help="(internal) serve the app for the HTTP run")
    s.add_argument("--dsn", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--pool-size", type=int, default=20)
    s.add_argument("--home", type=Path, required=True)
    p.add_argument("--tickets", type=int, default=5000)
    p.add_argument("--claimers", type=int, default=16)
    p.add_argument("--processes", type=int, default=1,
                   help="service path: processes the claimer threads are split over (as over gateway workers)")
    p.add_argument("--mode", choices=("service", "http", "both"), default="both")
    p.add_argument("--port", choices=("state", "null"), default="state",
                   help="state: the gateway's conversation port (claims move the conversation); null: queue only "
                        "(service path only).")
    p.add_argument("--database-url", default=os.environ.get("SWITCHBOARD_BENCH_DATABASE_URL"),
                   help="A Postgres server to create scratch databases on (default: a temporary embedded one).")
    p.add_argument("--json", action="store_true", help="Print only the JSON result.")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.cmd == "serve":
        serve(args.dsn, args.port, args.pool_size, args.home)
        return

    quiet = args.json
    tmp = None
    embedded = None
    if args.database_url:
        admin = args.database_url
    else:
        from router.db import EmbeddedPostgres

        tmp = Path(tempfile.mkdtemp(prefix="sbbench-"))
        embedded = EmbeddedPostgres(tmp / "pg")
        admin = embedded.start()
    results: dict = {
        "benchmark": "handoff_claims", "tickets": args.tickets, "claimers": args.claimers,
        "cpus": os.cpu_count(), "load_avg_before": os.getloadavg(), "python": platform.python_version(),
        "port": {"state": "router.turn.state.ConversationStatePort (a claim moves the conversation to l3_connected)",
                 "null": "handoff.ports.NullConversationPort (queue only)"}[args.port],
        "targets": {"service_claims_per_s": 2000, "http_claims_per_s": 500, "double_claims": 0, "lost_tickets": 0},
    }
    try:
        modes = ("service", "http") if args.mode == "both" else (args.mode,)
        for mode in modes:
            dsn = fresh_database(admin)
            try:
                creds = seed(dsn, args.tickets, args.claimers, quiet)
                if mode == "service":
                    results[mode] = run_service(dsn, creds, args.tickets, quiet, args.port, args.processes)
                else:
                    results[mode] = run_http(dsn, creds, args.tickets, quiet)
            finally:
                drop_database(admin, dsn)
    finally:
        if embedded is not None:
            embedded.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    results["load_avg_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    if args.json:
        print(json.dumps(results))
        return
    print(f"\n{args.claimers} claimers, {args.tickets} tickets, {os.cpu_count()} CPUs "
          f"(load before {results['load_avg_before'][0]:.1f})")
    print(f"{'path':<8} {'claims/s':>9} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'double':>7} {'lost':>5} "
          f"{'py CPU ms/claim':>16} {'pg CPU ms/claim':>16}")
    for mode in ("service", "http"):
        r = results.get(mode)
        if r:
            cpu = r.get("python_cpu_ms_per_claim") or r.get("server_cpu_ms_per_claim")
            print(f"{mode:<8} {r['claims_per_s']:>9.0f} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} {r['p99_ms']:>8.2f} "
                  f"{r['double_claims']:>7} {r['lost_tickets']:>5} {cpu if cpu is not None else '-':>16} "
                  f"{r.get('postgres_cpu_ms_per_claim') or '-':>16}")
    print("(py CPU: the claimers' process for the service path, the server process for HTTP; "
          f"the HTTP clients used {results.get('http', {}).get('client_cpu_ms_per_claim', '-')} ms/claim more)")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
