"""Redaction cost: masking one 200-character customer message (zh and en), p50/p95, with and without
personal data in it, plus what Presidio's AnalyzerEngine would cost on the same text.

    .venv/bin/python benchmarks/redaction.py [--n 2000] [--presidio-engine] [--json]

Prints the figures and writes benchmarks/results/redaction.json. Target on 2 cores: p95 < 1 ms per
message. Wall time and the thread's CPU time are both reported: on a shared machine the wall figure's
tail measures the neighbours (the load average is recorded with the figures).
"""

from __future__ import annotations

# arguments of `make bench` (benchmarks/run_all.py): quick by default, full = this script's defaults
RUN_ALL = {"quick": ["--n", "500"], "full": []}

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from text.personal import mask, warm_up  # noqa: E402
from _stats import ms  # noqa: E402

MESSAGES = {
    "zh_personal": "您好，我的订单 20241130 还没到，请联系我 138 1234 5678 或者邮箱 王五@例子.公司，地址杭州市西湖区"
                   "文三路90号，IP 192.168.1.10。我上周付了¥299，麻烦尽快处理，谢谢！如果不方便可以打座机010-62345678，"
                   "或者发邮件到li.lei@example.com，身份证11010519491231002X，银行卡6222 0212 3456 7890 123。",
    "en_personal": "Hi, my order 12345678 has not arrived yet. Call me at +1 415 555 2671 or mail li.lei@example.com; "
                   "my IP is 10.0.0.12 and my card 4111 1111 1111 1111 was charged $49.99 twice. Passport E12345678. "
                   "Thanks!",
    "zh_plain": "你好，我上周买的衣服尺码不合适，想换大一号的，请问怎么操作？另外订单 20241130 的快递好几天没动了，"
                "顺丰 1234 5678 9012 显示还在杭州，能帮我催一下吗？优惠券也用不了，结账的时候一直提示失败，麻烦看看是"
                "什么原因，谢谢你们。我下午都在家，可以随时联系我。",
    "en_plain": "Hello, I bought a jacket last week and the size is wrong, I would like to exchange it for a larger one. "
                "Also my order 20241130 has not moved for days, tracking SF 1234 5678 9012 still shows Hangzhou. Could "
                "you check it?",
}


def time_it(fn, text: str, n: int) -> dict:
    for _ in range(200):
        fn(text)
    wall, cpu = [], []
    for _ in range(n):
        w, c = time.perf_counter(), time.thread_time()
        fn(text)
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
    return {"chars": len(text), "n": n, "wall_p50_ms": ms(wall, 50, 4), "wall_p95_ms": ms(wall, 95, 4),
            "cpu_p50_ms": ms(cpu, 50, 4), "cpu_p95_ms": ms(cpu, 95, 4)}


def presidio_engine():
    """Presidio's AnalyzerEngine with spaCy blank pipelines (no model download) and the same two recognizers."""
    import logging

    import spacy
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.nlp_engine import SpacyNlpEngine
    from presidio_analyzer.predefined_recognizers import IpRecognizer

    from text.personal import _presidio

    logging.getLogger("presidio-analyzer").setLevel(logging.WARNING)

    class BlankSpacy(SpacyNlpEngine):
        def load(self):
            self.nlp = {"en": spacy.blank("en"), "zh": spacy.blank("zh")}

    nlp = BlankSpacy(models=[{"lang_code": "en", "model_name": "blank"}, {"lang_code": "zh", "model_name": "blank"}])
    nlp.load()
    email_cls = type(_presidio()[0])
    registry = RecognizerRegistry(supported_languages=["en", "zh"])
    for lang in ("en", "zh"):
        registry.add_recognizer(email_cls(supported_language=lang))
        registry.add_recognizer(IpRecognizer(supported_language=lang))
    return AnalyzerEngine(nlp_engine=nlp, registry=registry, supported_languages=["en", "zh"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000, help="timed calls per message")
    parser.add_argument("--presidio-engine", action="store_true", help="also time Presidio's AnalyzerEngine")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    warm_up()
    results = {}
    for name, text in MESSAGES.items():
        text = (text * 2)[:200]
        results[name] = time_it(mask, text, args.n)
        results[name]["masked"] = mask(text)
    engine = {}
    if args.presidio_engine:
        analyzer = presidio_engine()
        for name in ("zh_personal", "en_personal"):
            text = (MESSAGES[name] * 2)[:200]
            lang = name[:2]
            engine[name] = time_it(lambda t, lang=lang: analyzer.analyze(t, language=lang), text, args.n)
    out = {"benchmark": "redaction", "target": "p95 < 1 ms per 200-character message on 2 cores",
           "machine": {"python": platform.python_version(), "platform": platform.platform(),
                       "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]},
           "mask": results, "presidio_analyzer_engine_email_ip_only": engine,
           "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = ROOT / "benchmarks" / "results" / "redaction.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return 0
    print(f"machine: {out['machine']}")
    for name, r in results.items():
        print(f"mask {name:12s} {r['chars']} chars  wall p50 {r['wall_p50_ms']:.3f} ms  p95 {r['wall_p95_ms']:.3f} ms"
              f"  cpu p50 {r['cpu_p50_ms']:.3f} ms  p95 {r['cpu_p95_ms']:.3f} ms")
    for name, r in engine.items():
        print(f"presidio AnalyzerEngine (e-mail + ip only) {name:12s} wall p50 {r['wall_p50_ms']:.3f} ms  "
              f"p95 {r['wall_p95_ms']:.3f} ms  cpu p95 {r['cpu_p95_ms']:.3f} ms")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
