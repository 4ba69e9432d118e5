"""The agent console under load: a queue of 1,000 open tickets in a real browser, and 100 open consoles.

Two measurements against the real gateway (``create_app`` + ``wire_handoff``, the conversation-state port)
served by uvicorn on 127.0.0.1 in its own process, on a scratch database:

* ``queue``: Debian's chromium (Playwright) signs in to ``/console`` with 1,000 open tickets in the agent's
  teams; the page's own performance marks give the time from the first list request to the rendered table
  (``queue-load``, fetch + render) and the render alone (``queue-render``). Repeated ``--loads`` times
  (a reload signs in again from the tab's session). Target: <= 1 s.
* ``stream``: ``--consoles`` live event streams (plain HTTP streaming clients reading ``/v1/handoff/events``
  exactly as the console's fetch() reader does, each with an agent token); then ``--rounds`` new tickets are
  opened one after another through the service, as the router opens them, and the time from the commit to
  each stream's ``ticket`` event is taken. Target: p95 <= 1 s.

    python benchmarks/console.py                     # both, 1,000 tickets, 100 consoles, 20 rounds
    python benchmarks/console.py --only stream --consoles 200 --json

Prints a table and writes benchmarks/results/console.json.
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--tickets", "300", "--loads", "2", "--consoles", "20", "--rounds", "5"], "full": []}

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
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _scratch import drop_database, fresh_database  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "console.json"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
PRIORITIES = ("urgent", "high", "normal", "low")
REASONS = ("asks_for_human", "intent refund_request needs a reviewed answer", "complaint", "L1 could not answer: "
           "no confident answer", "intent invoice_request is handled by a person")
TEXTS = ("转人工", "I want to talk to a person", "我的退款什么时候到账？", "Where is my parcel?", "发票怎么开", "cancel my order")


def handoff_service(pool):
    from handoff.config import HandoffConfig
    from handoff.service import HandoffService
    from router.turn.state import ConversationStatePort

    return HandoffService(pool, ConversationStatePort(), HandoffConfig(sweep_interval_seconds=0))


def open_tickets(svc, pool, n: int, *, start: int = 0, team: str = "general", notes: bool = False) -> list[str]:
    """``n`` tickets as the router opens them: a conversation each, a context package, some with drafts or money."""
    ids = []
    with pool.connection() as conn, conn.transaction():
        for i in range(start, start + n):
            conv = conn.execute(
                "INSERT INTO conversations (channel, external_id, customer_id, state) "
                "VALUES (%s, %s, %s, 'l3_queuing') RETURNING id",
                (("web", "wechat", "whatsapp", "telegram")[i % 4], f"bench-{i}-{uuid.uuid4().hex[:6]}", f"cust-{i}"),
            ).fetchone()["id"]
            text = TEXTS[i % len(TEXTS)]
            assist = i % 3 == 0
            t = svc.open_ticket(conn, kind="assist" if assist else "handoff", conversation_id=str(conv),
                                channel=("web", "wechat", "whatsapp", "telegram")[i % 4], customer_id=f"cust-{i}",
                                reason=REASONS[i % len(REASONS)], priority=PRIORITIES[i % 4], team=team,
                                amount=(30, 300, 1200)[i % 3] if i % 6 == 0 else None,
                                currency="CNY" if i % 6 == 0 else None,
                                context={"transcript": [{"direction": "in", "sender": "customer", "text": text}]},
                                draft={"text": "Refunds arrive within 5-7 working days."} if assist else None)
            ids.append(t["id"])
    return ids


def add_agent(pool, name: str, role: str = "agent", teams=("general",)) -> str:
    from handoff import agents

    with pool.connection() as conn, conn.transaction():
        agents.add_agent(conn, name, role=role, teams=teams, actor="bench")
        return agents.issue_token(conn, name, actor="bench")[0]


# -- the server ---------------------------------------------------------------------------------

def serve(dsn: str, port: int, home: Path) -> None:
    """The gateway app with the queue wired as in production (no models: the console needs none)."""
    import uvicorn

    from router.app.factory import create_app
    from router.app.composition import wire_handoff
    from router.app.composition import build_services
    from router.app.settings import Settings

    settings = Settings(database_url=dsn, home=home, log_json=True, log_level="WARNING", db_pool_min=2,
                        db_pool_max=20, load_sample_kb=False, dispatcher_enabled=False)
    services = build_services(settings, load_models=False)
    wire_handoff(services)
    uvicorn.run(create_app(services=services), host="127.0.0.1", port=port, log_level="warning", access_log=False,
                log_config=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The benchmark gateway in its own process (so the clients do not share its interpreter)."""

    def __init__(self, dsn: str, port: int | None = None):
        import httpx

        self.port = port or free_port()
        self.home = Path(tempfile.mkdtemp(prefix="sbbench-home-"))
        self.proc = subprocess.Popen([sys.executable, __file__, "serve", "--dsn", dsn, "--port", str(self.port),
                                      "--home", str(self.home)], cwd=REPO)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the benchmark server did not start")
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.home, ignore_errors=True)


def quantiles(values: list[float]) -> dict:
    v = sorted(values)
    q = statistics.quantiles(v, n=100, method="inclusive") if len(v) >= 2 else [v[0]] * 99
    return {"n": len(v), "p50_ms": round(q[49], 1), "p95_ms": round(q[94], 1), "max_ms": round(v[-1], 1)}


# -- the queue view in a browser ------------------------------------------------------------------

def run_queue(url: str, token: str, loads: int) -> dict:
    from playwright.sync_api import sync_playwright

    load_ms, render_ms, rows = [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(60000)
        page.goto(f"{url}/console")
        page.get_by_label("Agent token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        for i in range(loads):
            if i:
                page.reload()      # the tab's session signs in again and lists the queue afresh
            page.locator("body[data-queue-loads='1']").wait_for(state="attached")
            marks = page.evaluate("""() => ({
                load: performance.getEntriesByName('queue-load')[0].duration,
                render: performance.getEntriesByName('queue-render')[0].duration,
                rows: document.querySelectorAll('#queue-rows li').length})""")
            load_ms.append(marks["load"])
            render_ms.append(marks["render"])
            rows.append(marks["rows"])
        browser.close()
    return {"rows": rows, "queue_load": quantiles(load_ms), "queue_render": quantiles(render_ms),
            "loads_ms": [round(x, 1) for x in load_ms], "target_ms": 1000,
            "met": max(load_ms) <= 1000}


# -- 100 open consoles ------------------------------------------------------------------------

async def _streams(url: str, tokens: list[str], svc, pool, rounds: int, gap: float) -> dict:
    import httpx

    received: dict[str, dict[int, float]] = {}     # ticket id -> {console: monotonic receive time}
    ready = 0
    all_ready = asyncio.Event()
    limits = httpx.Limits(max_connections=len(tokens) + 10, max_keepalive_connections=len(tokens) + 10)
    client = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(30.0, read=None), limits=limits)

    async def console(i: int, token: str):
        nonlocal ready
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        async with client.stream("GET", "/v1/handoff/events", headers=headers) as resp:
            if resp.status_code != 200:
                raise RuntimeError(f"stream {i}: HTTP {resp.status_code}")
            event, data = None, []
            async for line in resp.aiter_lines():
                if line == "":
                    if event == "ready":
                        ready += 1
                        if ready == len(tokens):
                            all_ready.set()
                    elif event == "ticket" and data:
                        ev = json.loads("\n".join(data))
                        if ev.get("action") == "opened":
                            received.setdefault(ev["ticket_id"], {})[i] = time.monotonic()
                    event, data = None, []
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())

    tasks = [asyncio.create_task(console(i, tok)) for i, tok in enumerate(tokens)]
    await asyncio.wait_for(all_ready.wait(), 120)
    sent: dict[str, float] = {}
    for r in range(rounds):
        def open_one():
            ids = open_tickets(svc, pool, 1, start=100_000 + r)
            return ids[0], time.monotonic()           # the commit has returned: the NOTIFY is on its way

        tid, t0 = await asyncio.to_thread(open_one)
        sent[tid] = t0
        deadline = time.monotonic() + 10
        while len(received.get(tid, {})) < len(tokens) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(gap)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await client.aclose()
    latencies = [(at - sent[tid]) * 1000 for tid, by in received.items() if tid in sent for at in by.values()]
    missed = sum(len(tokens) - len(received.get(tid, {})) for tid in sent)
    per_round_p95 = []
    for tid in sent:
        got = sorted((at - sent[tid]) * 1000 for at in received.get(tid, {}).values())
        if len(got) >= 2:
            per_round_p95.append(round(statistics.quantiles(got, n=100, method="inclusive")[94], 1))
    return {"consoles": len(tokens), "rounds": rounds, "missed": missed, **quantiles(latencies),
            "per_round_p95_ms": per_round_p95, "target_p95_ms": 1000}


def run_stream(url: str, dsn: str, consoles: int, rounds: int, gap: float) -> dict:
    from router.db import open_pool

    with open_pool(dsn, min_size=1, max_size=2) as pool:
        # ten agents, each with ten open tabs: a floor of agents sharing the load as in a real team
        tokens = []
        for a in range((consoles + 9) // 10):
            name = f"desk{a:02d}"
            add_agent(pool, name)
            from handoff import agents

            with pool.connection() as conn, conn.transaction():
                for _ in range(min(10, consoles - len(tokens))):
                    tokens.append(agents.issue_token(conn, name, actor="bench")[0])
        svc = handoff_service(pool)
        result = asyncio.run(_streams(url, tokens, svc, pool, rounds, gap))
    result["met"] = result["p95_ms"] <= 1000 and result["missed"] == 0
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("serve", help="(internal) serve the gateway for the benchmark")
    s.add_argument("--dsn", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--home", type=Path, required=True)
    p.add_argument("--tickets", type=int, default=1000, help="open tickets in the queue view")
    p.add_argument("--loads", type=int, default=5, help="queue views timed")
    p.add_argument("--consoles", type=int, default=100, help="open event streams")
    p.add_argument("--rounds", type=int, default=20, help="new tickets announced to every console")
    p.add_argument("--gap", type=float, default=0.2, help="seconds between new tickets")
    p.add_argument("--only", choices=("queue", "stream"))
    p.add_argument("--database-url", default=os.environ.get("SWITCHBOARD_BENCH_DATABASE_URL"),
                   help="A Postgres server to create scratch databases on (default: a temporary embedded one).")
    p.add_argument("--json", action="store_true", help="Print only the JSON result.")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.cmd == "serve":
        serve(args.dsn, args.port, args.home)
        return
    from router.db import EmbeddedPostgres, open_pool

    tmp = embedded = None
    if args.database_url:
        admin = args.database_url
    else:
        tmp = Path(tempfile.mkdtemp(prefix="sbbench-"))
        embedded = EmbeddedPostgres(tmp / "pg")
        admin = embedded.start()
    results: dict = {"benchmark": "console", "cpus": os.cpu_count(), "load_avg_before": os.getloadavg(),
                     "python": platform.python_version(), "machine": platform.machine(),
                     "tickets": args.tickets}
    try:
        dsn = fresh_database(admin)
        server = None
        try:
            with open_pool(dsn, min_size=1, max_size=2) as pool:
                svc = handoff_service(pool)
                for start in range(0, args.tickets, 500):
                    open_tickets(svc, pool, min(500, args.tickets - start), start=start)
                token = add_agent(pool, "floor", role="agent")
                with pool.connection() as conn:
                    conn.execute("ANALYZE tickets")
            server = Server(dsn)
            if args.only in (None, "queue"):
                if not args.json:
                    print(f"queue view: {args.tickets} open tickets, {args.loads} loads in chromium ...")
                results["queue"] = run_queue(server.url, token, args.loads)
            if args.only in (None, "stream"):
                if not args.json:
                    print(f"live queue: {args.consoles} consoles, {args.rounds} new tickets ...")
                results["stream"] = run_stream(server.url, dsn, args.consoles, args.rounds, args.gap)
        finally:
            if server is not None:
                server.stop()
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
    print(f"\n{os.cpu_count()} CPUs, load {results['load_avg_before'][0]:.1f} before, "
          f"{results['load_avg_after'][0]:.1f} after")
    q = results.get("queue")
    if q:
        print(f"queue view ({q['rows'][0]} rows): load (fetch + render) p50 {q['queue_load']['p50_ms']} ms, "
              f"p95 {q['queue_load']['p95_ms']} ms, max {q['queue_load']['max_ms']} ms; render alone p50 "
              f"{q['queue_render']['p50_ms']} ms; target <= 1000 ms: {'met' if q['met'] else 'NOT met'}")
    st = results.get("stream")
    if st:
        print(f"{st['consoles']} consoles x {st['rounds']} new tickets: event after commit p50 {st['p50_ms']} ms, "
              f"p95 {st['p95_ms']} ms, max {st['max_ms']} ms, missed {st['missed']}; target p95 <= 1000 ms: "
              f"{'met' if st['met'] else 'NOT met'}")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
