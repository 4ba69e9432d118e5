"""Deflection on /metrics and in the report: routed turns by outcome, channel and language, read back
from the real pipeline's turns (rules-only classifier of test_everyday_decide, real Postgres)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from test_everyday_decide import gateway, say  # noqa: F401 - the fixture

from router.ops.report import build_report, render_text


def _sample(text: str, **labels) -> float:
    for line in text.splitlines():
        if line.startswith("switchboard_turn_outcomes_total{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_outcomes_are_counted_on_metrics_and_in_the_report(gateway):  # noqa: F811
    svc, make = gateway
    pipe = make()
    say(pipe, "hello", conv="a")                     # resolved by the bot (template)
    say(pipe, "你好", conv="b")                       # resolved, in Chinese
    say(pipe, "blorp quux", conv="c")                # clarified
    say(pipe, "where is my order", conv="d")         # clarified: asks for the order number
    say(pipe, "转人工", conv="e")                      # ticketed
    say(pipe, "还在吗", conv="e")                      # held: added to the person's ticket
    text = svc.metrics.render().decode()
    assert _sample(text, outcome="resolved", channel="web", lang="en") == 1
    assert _sample(text, outcome="resolved", channel="web", lang="zh") == 1
    assert _sample(text, outcome="clarified", channel="web", lang="en") == 2
    assert _sample(text, outcome="ticketed", channel="web", lang="zh") == 1
    assert _sample(text, outcome="held", channel="web", lang="zh") == 1
    with svc.pool.connection() as conn:
        report = build_report(conn, datetime.now(timezone.utc) - timedelta(hours=1))
    d = report["deflection"]
    assert d["turns"] == 6
    assert d["outcomes"] == {"resolved": 2, "clarified": 2, "ticketed": 1, "held": 1, "none": 0}
    assert d["by_channel"]["web"] == d["outcomes"]
    assert d["by_lang"]["zh"]["ticketed"] == 1 and d["by_lang"]["en"]["clarified"] == 2
    assert d["rates"]["resolved"] == round(2 / 6, 4)
    # template replies are not knowledge-base answers: the citation check still holds
    assert report["checks"]["l1_answers_cited"] is True
    # the two clarifications are their own category, not resolutions
    assert report["auto_resolution"]["sessions"] == 2 and report["clarified"]["sessions"] == 2
    assert "deflection (turns)  resolved 2, clarified 2, ticketed 1, held 1" in render_text(report)
