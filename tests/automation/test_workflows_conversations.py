"""Scripted conversations against the second shop, each judged by the records the shop changed.

Every case (``second_shop/conversations.jsonl``) names the customer, the turns and the writes it should
leave (tool + fields of the real result); nothing else may change, and no reply may claim success
without a success result.
"""

from __future__ import annotations

import json
from pathlib import Path

from automation.tools import Caller

CASES = [json.loads(line) for line in (Path(__file__).parent / "second_shop" / "conversations.jsonl").read_text(
    encoding="utf-8").splitlines() if line.strip()]
SUCCESS_WORDS = ("goes back", "Cancelled W", "now going to", "Exchange requested", "已提交", "已取消", "已改地址")


def _matches(write, expected):
    tool, fields = expected
    return write["tool"] == tool and all(write["result"].get(k) == v for k, v in fields.items())


def test_scripted_conversations_change_exactly_what_they_should(engine, shop, turn):
    failures, per_workflow = [], {}
    for i, case in enumerate(CASES):
        shop.shop("debug_reset")
        if case.get("fail"):
            shop.shop("debug_fail", tool=case["fail"][0], times=case["fail"][1])
        caller = Caller("web", case["customer"], conversation_id=f"conv-{i}-{case['id']}")
        t = turn(engine.start, case["workflow"], caller, case["turns"][0], {}, case["lang"])
        replies = [t.reply]
        for text in case["turns"][1:]:
            t = turn(engine.advance, t.instance_id, caller, text, {}, case["lang"])
            replies.append(t.reply)
        writes = shop.shop("debug_dump")["writes"]
        problems = []
        if t.status != case["status"]:
            problems.append(f"status {t.status} != {case['status']}")
        if case.get("outcome") and t.outcome != case["outcome"]:
            problems.append(f"outcome {t.outcome} != {case['outcome']}")
        if len(writes) != len(case["writes"]) or not all(_matches(w, e) for w, e in zip(writes, case["writes"])):
            problems.append(f"writes {[(w['tool'], w['result']) for w in writes]} != {case['writes']}")
        if not writes and any(word in r for r in replies for word in SUCCESS_WORDS):
            problems.append(f"a success reply without a success result: {replies}")
        if case.get("reply_lacks") and any(case["reply_lacks"] in r for r in replies):
            problems.append(f"a reply shows {case['reply_lacks']!r}")
        ok = per_workflow.setdefault(case["workflow"], [0, 0])
        ok[1] += 1
        if problems:
            failures.append((case["id"], problems, replies[-1]))
        else:
            ok[0] += 1
    print({wf: f"{a}/{n}" for wf, (a, n) in per_workflow.items()})
    assert not failures, "\n".join(f"{cid}: {p} (last reply: {r!r})" for cid, p, r in failures)
