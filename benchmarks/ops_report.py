"""Operations read paths at volume: the weekly report, a conversation replay, the /metrics refresh.

Seeds a fresh database (embedded Postgres in a temporary directory) with a week of history built
set-wise in SQL: N conversations of 2 turns each over 7 days, a mix of L1 answers (cited), L2
assists and L3 handoffs with their transitions, tickets and ticket events, and CSAT for a third
of the sessions; plus one long conversation (200 turns) to replay.

    .venv/bin/python benchmarks/ops_report.py                    # 50,000 conversations
    .venv/bin/python benchmarks/ops_report.py --conversations 5000 --json

Prints the timings and writes benchmarks/results/ops_report.json. Targets on 2 cores: the
7-day report over 50,000 conversations in < 15 s, a 200-turn replay in < 250 ms, the
/metrics database refresh in < 50 ms.
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--conversations", "5000", "--replay-turns", "50", "--repeat", "2"], "full": []}

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import psycopg  # noqa: E402
from psycopg.rows import dict_row  # noqa: E402
from tqdm import tqdm  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "ops_report.json"

SEED_SQL = [
    ("conversations", """
        INSERT INTO conversations (channel, external_id, customer_id, state, created_at)
        SELECT (ARRAY['web','telegram','wechat','sms'])[1 + i %% 4], 'bench-' || i, 'cust-' || (i %% %(customers)s),
               'idle', %(start)s + (i %% 10080) * interval '1 minute'
        FROM generate_series(1, %(n)s) i"""),
    ("messages", """
        INSERT INTO messages (conversation_id, channel, external_id, direction, sender, text, received_at)
        SELECT c.id, c.channel, c.external_id || '-' || k, 'in', 'customer', 'where is my order ' || k,
               c.created_at + k * interval '1 minute'
        FROM conversations c CROSS JOIN generate_series(1, 2) k"""),
    ("turns", """
        INSERT INTO turns (conversation_id, message_id, session_no, state, decision, response, trace, created_at)
        SELECT m.conversation_id, m.id, 1, t.state,
               jsonb_build_object('tier', t.tier, 'intent', 'order_query', 'channel', 'rules', 'explanation', '{}'::jsonb,
                                  'escalation', CASE WHEN t.tier = 'L3' THEN jsonb_build_object(
                                      'rule', (ARRAY['human_request','refund_amount','dissatisfied'])[1 + m.id %% 3],
                                      'reason', 'bench', 'priority', 'normal') END),
               jsonb_build_object('reply', jsonb_build_object('text', 'answer', 'citations',
                   CASE WHEN t.tier = 'L1' THEN '[{"doc_id": "tracking-en", "chunk_id": "tracking-en#0"}]'::jsonb
                        ELSE '[]'::jsonb END)),
               '{"timings_ms": {"harness": 0.5, "classify": 3.1, "retrieval": 40.2, "decide": 50.0}}'::jsonb,
               m.received_at
        FROM messages m
        CROSS JOIN LATERAL (SELECT CASE WHEN m.id %% 10 < 6 THEN 'L1' WHEN m.id %% 10 < 8 THEN 'L2' ELSE 'L3' END AS tier) x
        CROSS JOIN LATERAL (SELECT x.tier,
                                   CASE x.tier WHEN 'L1' THEN 'l1_resolved' WHEN 'L2' THEN 'l2_assisting'
                                               ELSE 'l3_queuing' END AS state) t"""),
    ("transitions", """
        INSERT INTO conversation_transitions (conversation_id, session_no, from_state, to_state, reason, message_id,
                                              created_at)
        SELECT conversation_id, 1, 'classifying', state, 'bench', message_id, created_at FROM turns"""),
    ("tickets", """
        INSERT INTO tickets (kind, status, conversation_id, channel, customer_id, reason, priority, team, sla_due_at,
                             created_at)
        SELECT DISTINCT ON (t.conversation_id)
               CASE WHEN t.decision ->> 'tier' = 'L2' THEN 'assist' ELSE 'handoff' END, 'resolved',
               t.conversation_id::text, c.channel, c.customer_id, 'bench', 'normal', 'general',
               t.created_at + interval '1 hour', t.created_at
        FROM turns t JOIN conversations c ON c.id = t.conversation_id
        WHERE t.decision ->> 'tier' IN ('L2', 'L3') ORDER BY t.conversation_id, t.created_at"""),
    ("ticket_events", """
        INSERT INTO ticket_events (ticket_id, actor, action, at)
        SELECT id, 'bench', a.action, created_at + a.after
        FROM tickets CROSS JOIN (VALUES ('opened', interval '0'), ('claimed', interval '4 minutes'),
                                        ('resolved', interval '21 minutes')) a(action, after)"""),
    ("feedback", """
        INSERT INTO feedback (conversation_id, session_no, csat, created_at)
        SELECT id, 1, 1 + (abs(hashtext(id::text)) %% 5), created_at + interval '30 minutes'
        FROM conversations WHERE abs(hashtext(external_id)) %% 3 = 0"""),
]


def seed(dsn: str, n: int, quiet: bool) -> dict[str, float]:
    start = datetime.now(timezone.utc) - timedelta(days=7)
    timings = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, sql in tqdm(SEED_SQL, desc="seeding", disable=quiet):
            t = time.perf_counter()
            conn.execute(sql, {"n": n, "customers": max(n // 2, 1), "start": start})
            timings[name] = round(time.perf_counter() - t, 2)
        conn.execute("ANALYZE")
    return timings


def long_conversation(dsn: str, turns: int) -> str:
    """One conversation with ``turns`` turns, each with an outbound reply and its outbox row."""
    from router.outbox.store import enqueue_outbound

    with psycopg.connect(dsn, row_factory=dict_row) as conn, conn.transaction():
        conv = conn.execute("INSERT INTO conversations (channel, external_id, customer_id) "
                            "VALUES ('web', 'bench-long', 'cust-long') RETURNING id").fetchone()["id"]
        for i in range(turns):
            mid = conn.execute(
                "INSERT INTO messages (conversation_id, channel, external_id, direction, sender, text) "
                "VALUES (%s, 'web', %s, 'in', 'customer', %s) RETURNING id",
                (conv, f"long-{i}", f"question {i}, call me at 13812345678")).fetchone()["id"]
            trace = {"timings_ms": {"harness": 0.4, "classify": 2.0, "retrieval": 35.0, "decide": 45.0},
                     "rag": {"answered": True, "confidence": 0.9,
                             "passages": [{"chunk_id": f"doc-{k}#0", "score": 0.9 - k / 10} for k in range(5)],
                             "timings_ms": {"bm25": 1.0, "dense": 8.0, "answer": 0.5}}}
            conn.execute(
                "INSERT INTO turns (conversation_id, message_id, session_no, state, decision, response, trace) "
                "VALUES (%s, %s, 1, 'l1_resolved', %s, %s, %s)",
                (conv, mid, json.dumps({"tier": "L1", "intent": "order_query", "channel": "rules"}),
                 json.dumps({"reply": {"text": "answer", "citations": [{"doc_id": "d"}]}}), json.dumps(trace)))
            conn.execute("INSERT INTO conversation_transitions (conversation_id, session_no, from_state, to_state, "
                         "reason, message_id) VALUES (%s, 1, 'classifying', 'l1_resolved', 'bench', %s)", (conv, mid))
            enqueue_outbound(conn, conversation_id=conv, channel="web", text=f"answer {i}")
    return str(conv)


def timed(fn, repeat: int) -> dict[str, float]:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1000)
    return {"median_ms": round(statistics.median(runs), 1), "min_ms": round(min(runs), 1),
            "max_ms": round(max(runs), 1), "runs": repeat}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=50_000)
    ap.add_argument("--replay-turns", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="Print the result as one JSON object.")
    args = ap.parse_args()

    from router.db import EmbeddedPostgres, migrate, open_pool
    from router.telemetry.metrics import Metrics
    from router.ops.report import build_report
    from router.ops.trace import load_trace

    root = Path(tempfile.mkdtemp(prefix="sb-bench-ops-"))
    server = EmbeddedPostgres(root / "pg")
    try:
        dsn = server.start()
        migrate(dsn)
        seeded = seed(dsn, args.conversations, args.json)
        conv = long_conversation(dsn, args.replay_turns)
        now = datetime.now(timezone.utc) + timedelta(minutes=10)
        pool = open_pool(dsn, min_size=1, max_size=2)
        metrics = Metrics()
        report = {}

        def run_report():
            with pool.connection() as c:
                report.update(build_report(c, now - timedelta(days=7, minutes=20), now))

        def run_trace():
            with pool.connection() as c:
                assert load_trace(c, conv)["turns"]

        results = {
            "report_7d": timed(run_report, args.repeat),
            f"trace_replay_{args.replay_turns}_turns": timed(run_trace, args.repeat * 4),
            "metrics_db_refresh": timed(lambda: metrics.refresh_from_database(pool), args.repeat * 10),
        }
        pool.close()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)

    out = {
        "benchmark": "ops_report",
        "conversations": args.conversations,
        "sessions_in_report": report["volume"]["sessions"],
        "turns_in_report": report["volume"]["turns"],
        "seed_seconds": seeded,
        "results": results,
        "figures": {k: report[k] for k in ("auto_resolution", "transfer", "first_contact_resolution", "csat")},
        "targets": {"report_7d_ms": 15000, "trace_replay_ms": 250, "metrics_db_refresh_ms": 50},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2))
    if args.json:
        print(json.dumps(out))
        return
    print(f"{args.conversations} conversations, {out['sessions_in_report']} sessions / {out['turns_in_report']} turns "
          f"in the 7-day report")
    for name, r in results.items():
        print(f"  {name:<28} median {r['median_ms']:>9.1f} ms   (min {r['min_ms']}, max {r['max_ms']}, "
              f"{r['runs']} runs)")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
