"""The project's answer set through the knowledge base: how many replies are right, whole and in the right language.

Indexes the bundled bilingual pack (what `make run` serves) in a throw-away database, warms answer
composition, asks every question of tests/rag/answer_set.jsonl as L1 does (`KnowledgeBase.answer`) and
judges each reply by the facts it must contain (rag.eval.judge_reply). The same figures are asserted by
tests/rag/test_answer.py::test_the_answer_set_is_answered_right_whole_and_in_the_customers_language.

    python benchmarks/answer_set.py [--set FILE] [--threshold T] [--show-wrong] [--rows FILE]

``--rows`` writes what `switchboard rag calibrate --rows FILE [--write KNOWLEDGE/calibration.yaml]` fits the
pack's own answer confidence on (README, Answerability).

Prints the rates and writes benchmarks/results/answer_set.json.
"""

from __future__ import annotations

RUN_ALL = {"quick": [], "full": []}

import argparse
import json
import os
import platform
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


def _asks(text: str) -> bool:
    """A reply that asks (a sentence ending in a question mark no quote closes: the article's hook, a heading)."""
    from rag.chunk import split_sentences

    return any(s.rstrip().endswith(("?", "？")) for s in split_sentences(text))


def _grams(sentence: str) -> set[str]:
    import re

    low = re.sub(r"[一二两三四五六七八九十](?=[个天次年周小工分])",
                 lambda m: str("一二三四五六七八九十".find(m.group(0).replace("两", "二")) + 1), sentence.casefold())
    words = set(re.findall(r"[a-z0-9]+", low))
    cjk = re.sub(r"[^\u4e00-\u9fff0-9]", "", low)
    return words | {cjk[i:i + 2] for i in range(len(cjk) - 1)}


def _repeats(text: str) -> bool:
    """A reply that says a sentence twice in other words: most of its words (or Chinese character pairs) and all its
    numbers are an earlier line's (list lines, which share their list's words, aside)."""
    import re

    from rag.chunk import split_sentences

    prose = [ln for ln in text.splitlines() if ln.strip() and not re.match(r"\s*(?:•|\d+[.)]\s)", ln)]
    earlier: list[set[str]] = []
    for ln in prose:
        for s in split_sentences(ln):
            g = _grams(s)
            if len(g) >= 4 and any(len(g & e) >= 0.55 * len(g) and {w for w in g if w.isdigit()} <= e for e in earlier):
                return True
        earlier.append(_grams(ln))
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default=str(REPO / "tests" / "rag" / "answer_set.jsonl"))
    ap.add_argument("--threshold", type=float, help="answer threshold (default: the configured one)")
    ap.add_argument("--threads", type=int, default=2, help="encoder threads (default: the gateway's)")
    ap.add_argument("--show-wrong", action="store_true", help="print every reply judged wrong")
    ap.add_argument("--rows", help="also write each question's confidence signals and whether its reply would be "
                    "right, for `switchboard rag calibrate --rows FILE`")
    ap.add_argument("--models-dir", default=os.environ.get("SWITCHBOARD_HOME", str(REPO / "var")) + "/models")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "answer_set.json"))
    args = ap.parse_args()

    from router.app.services import limit_threads

    limit_threads(args.threads)
    from rag.config import RetrievalConfig, load_calibration
    from rag.encoder_backends import load_encoder
    from rag.eval import answer_set_rates, evaluate_answer_set, load_answer_set
    from rag.lexical.tantivy import TantivyIndex
    from rag.rewrite import get_tokenizer, load_glossary
    from rag.service import SAMPLE_KB, KnowledgeBase
    from router.db import EmbeddedPostgres, migrate, open_pool

    work = Path(tempfile.mkdtemp(prefix="sb-answers-"))
    dsn = os.environ.get("SWITCHBOARD_DATABASE_URL")
    embedded = None
    if not dsn:
        embedded = EmbeddedPostgres(work / "pg")
        dsn = embedded.start()
    migrate(dsn)
    pool = open_pool(dsn, min_size=1, max_size=4)
    try:
        encoder = load_encoder("multilingual-e5-small", Path(args.models_dir), threads=args.threads)
        glossary = load_glossary(SAMPLE_KB)
        config = RetrievalConfig(**load_calibration(SAMPLE_KB, "multilingual-e5-small"))
        kb = KnowledgeBase(pool, encoder, TantivyIndex(work / "index", tokenizer=get_tokenizer(glossary.words())),
                           glossary=glossary, config=config)
        if args.threshold is not None:
            kb.config.answer_threshold = args.threshold
        build = kb.generations.rebuild(SAMPLE_KB)
        t, cpu = time.perf_counter(), time.process_time()
        lines = kb.warm()
        warm_s, warm_cpu = round(time.perf_counter() - t, 1), round(time.process_time() - cpu, 1)
        # a restart: a new knowledge base over the same database warms from the embedding cache
        again = KnowledgeBase(pool, encoder, kb.lexical, glossary=glossary, config=config)
        t, cpu = time.perf_counter(), time.process_time()
        again.warm()
        rewarm_s, rewarm_cpu = round(time.perf_counter() - t, 2), round(time.process_time() - cpu, 2)
        rows = load_answer_set(args.set)
        report = evaluate_answer_set(kb, rows)
        verdicts = report.pop("verdicts")
        calibration_rows = report.pop("calibration_rows")
        if args.rows:
            with open(args.rows, "w", encoding="utf-8") as fh:
                for r in calibration_rows:
                    fh.write(json.dumps(r, ensure_ascii=False) + "\n")
            print(f"wrote {len(calibration_rows)} rows to {args.rows}")
        print(f"{len(rows)} questions ({report['n_unanswerable']} the pack cannot answer); {build['docs']} docs, "
              f"{lines} lines warmed in {warm_s} s ({warm_cpu} s CPU), again after a restart in {rewarm_s} s "
              f"({rewarm_cpu} s CPU); load {os.getloadavg()[0]:.1f}")
        # the set's halves: "dev" is what anything is tuned on, "test" is only reported
        splits = {}
        for split in sorted({str(r.get("split")) for r in rows if r.get("split")}):
            part = [v for v, r in zip(verdicts, rows, strict=True) if r.get("split") == split]
            splits[split] = {k: v for k, v in answer_set_rates(part).items()
                             if k in ("n", "right_rate", "unanswered_answerable_rate",
                                      "wrong_answer_unanswerable_rate", "by_kind")}
            print(f"  [{split}] {splits[split]}")
        said = [v["text"] for v in verdicts if v["answered"] and v["text"]]
        report["asking"] = sum(_asks(t) for t in said)          # replies that hold a question
        report["repeating"] = sum(_repeats(t) for t in said)    # replies that say a sentence twice
        for key in ("right_rate", "answerable_right_rate", "unanswered_answerable_rate",
                    "wrong_answer_unanswerable_rate", "cited_right_rate", "framing", "fragments", "wrong_language",
                    "asking", "repeating", "by_kind", "latency_ms_p50", "latency_ms_p95"):
            print(f"  {key:<32} {report[key]}")
        if args.show_wrong:
            for v in verdicts:
                if not v["right"] or v["framing"] or v["fragment"] or v["wrong_language"] or (
                        v["answered"] and (_asks(v["text"] or "") or _repeats(v["text"] or ""))):
                    print(f"- {v['q']} (answered {v['answered']}, cited {v['cited']}): {v['text'][:200]!r}")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"set": args.set, "threshold": kb.config.answer_threshold, "encoder": encoder.name,
                                   "machine": platform.machine(), "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                                   "warm_seconds": warm_s, "warm_cpu_seconds": warm_cpu,
                                   "rewarm_seconds": rewarm_s, "rewarm_cpu_seconds": rewarm_cpu, "splits": splits,
                                   **report,
                                   "wrong": [v for v in verdicts if not v["right"]]},
                                  indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    finally:
        pool.close()
        if embedded is not None:
            embedded.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
