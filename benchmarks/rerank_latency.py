"""Rerank latency and what each saving costs in nDCG@10.

For every (N candidates, token cap, fp32 / int8) it reranks the first-stage candidates of the
reranker's held-out queries (never trained or calibrated on), reports p50/p95 of the rerank call
and nDCG@10 of the blended ranking, next to the first stage alone. Prints a table and writes
benchmarks/results/rerank_latency.json.

    python benchmarks/rerank_latency.py --model var/models/reranker-stackfaq \
        --beir ../shared/data/retrieval/stackfaq_en
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--model", "{SWITCHBOARD_RERANKER_MODEL}", "--ns", "20"], "full": ["--model", "{SWITCHBOARD_RERANKER_MODEL}"], "needs_env": "SWITCHBOARD_RERANKER_MODEL"}

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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from rag.encoder import E5_NAME, Encoder, resolve_model_path  # noqa: E402
from rag.rerank import CrossEncoderReranker, heldout_query_ids  # noqa: E402
from rag.rerank_train import SimpleHybrid, _run_from, load_beir, ndcg_at_10  # noqa: E402
from rag.types import Chunk, Hit  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="reranker folder (switchboard rag train-reranker --out)")
    ap.add_argument("--beir", default=str(REPO.parent / "shared" / "data" / "retrieval" / "stackfaq_en"))
    ap.add_argument("--encoder", default=E5_NAME, help="first-stage encoder (name or folder)")
    ap.add_argument("--models-dir", default=os.environ.get("SWITCHBOARD_HOME", str(REPO / "var")) + "/models")
    ap.add_argument("--ns", default="10,20,30", help="candidate counts to rerank")
    ap.add_argument("--max-lengths", default="128,256", help="token caps")
    ap.add_argument("--int8", action="store_true", help="also measure dynamic int8 quantisation")
    ap.add_argument("--bf16", action="store_true", help="also measure bfloat16 autocast")
    ap.add_argument("--queries", type=int, default=0, help="use only the first K held-out queries (0 = all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "rerank_latency.json"))
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    data = load_beir(args.beir)
    held = heldout_query_ids(args.model)
    qids = sorted(q for q in data.qrels if held is None or q in held)
    if args.queries:
        qids = qids[: args.queries]
    qrels = {q: data.qrels[q] for q in qids}
    encoder = Encoder(resolve_model_path(args.encoder, args.models_dir), threads=args.threads)

    t0 = time.perf_counter()
    first = SimpleHybrid(data.corpus, encoder, progress=True)
    index_seconds = time.perf_counter() - t0
    first_ms = []
    ranked = {}
    for q in qids:   # one query at a time, like the gateway
        t = time.perf_counter()
        ranked[q] = first([data.queries[q]])[0]
        first_ms.append(1000 * (time.perf_counter() - t))
    dense_only = SimpleHybrid.__new__(SimpleHybrid)
    dense_only.__dict__.update(first.__dict__, dense_weight=1.0)
    ranked_dense = dict(zip(qids, dense_only([data.queries[q] for q in qids]), strict=True))

    results = {
        "model": str(Path(args.model).resolve()), "beir": args.beir, "n_queries": len(qids),
        "heldout_only": held is not None, "threads": args.threads, "machine": platform.machine(),
        "cpus": os.cpu_count(), "first_stage_index_seconds": round(index_seconds, 1),
        "first_stage": {
            "hybrid_ndcg@10": round(ndcg_at_10(qrels, _run_from(ranked)), 4),
            "dense_ndcg@10": round(ndcg_at_10(qrels, _run_from(ranked_dense)), 4),
            "latency_ms_p50": round(float(np.percentile(first_ms, 50)), 1),
            "latency_ms_p95": round(float(np.percentile(first_ms, 95)), 1),
        },
        "configs": [],
    }
    print(f"first stage on {len(qids)} held-out queries: hybrid nDCG@10 {results['first_stage']['hybrid_ndcg@10']}, "
          f"dense {results['first_stage']['dense_ndcg@10']}, p95 {results['first_stage']['latency_ms_p95']} ms")

    def hits_for(q: str) -> list[Hit]:
        out = []
        for rank, (d, s) in enumerate(ranked[q], start=1):
            title, text = data.corpus[d]
            out.append(Hit(chunk_id=d, score=s, rank=rank, chunk=Chunk(d, d, text, title=title)))
        return out

    ns = [int(x) for x in args.ns.split(",")]
    lengths = [int(x) for x in args.max_lengths.split(",")]
    arithmetic = ["fp32"] + (["int8"] if args.int8 else []) + (["bf16"] if args.bf16 else [])
    for kind in arithmetic:
        quant = kind == "int8"
        for length in lengths:
            reranker = CrossEncoderReranker(args.model, max_length=length, threads=args.threads, quantize=quant,
                                            bf16=kind == "bf16")
            reranker.score("warm up", ["the first call pays for lazy initialisation"] * 4)
            for n in ns:
                reranker.top_n = n
                ms, run, run_only = [], {}, {}
                for q in tqdm(qids, desc=f"N={n} len={length} {kind}", unit="q", leave=False):
                    hits = hits_for(q)
                    t = time.perf_counter()
                    out = reranker.rerank(data.queries[q], hits)
                    ms.append(1000 * (time.perf_counter() - t))
                    run[q] = {h.chunk_id: float(len(out) - i) for i, h in enumerate(out)}
                    head = sorted(out[:n], key=lambda h: -h.scores["rerank"])
                    run_only[q] = {h.chunk_id: float(len(out) - i) for i, h in enumerate(head)}
                row = {
                    "n": n, "max_length": length, "int8": quant, "arithmetic": kind,
                    "ndcg@10": round(ndcg_at_10(qrels, run), 4),
                    "rerank_only_ndcg@10": round(ndcg_at_10(qrels, run_only), 4),
                    "latency_ms_p50": round(float(np.percentile(ms, 50)), 1),
                    "latency_ms_p95": round(float(np.percentile(ms, 95)), 1),
                }
                results["configs"].append(row)
                print(f"N={n:>3} len={length:>4} {kind}  nDCG@10 {row['ndcg@10']:.4f} "
                      f"(rerank only {row['rerank_only_ndcg@10']:.4f})  p50 {row['latency_ms_p50']:7.1f} ms  "
                      f"p95 {row['latency_ms_p95']:7.1f} ms", flush=True)
    results["blend"] = {"method": reranker.blend.method, "weight": reranker.blend.weight}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
