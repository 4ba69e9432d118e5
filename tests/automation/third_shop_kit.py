"""The third shop (``third_shop/``) behind the real tool gateway, and the judge of its scripted conversations.

Shared by ``test_third_shop.py`` (every case once) and ``benchmarks/third_shop.py`` (pass^k over varied
phrasings). A case is judged by the records the shop changed: the writes it must show, in order, and
nothing else. Two things must never happen and are counted apart: a write in a flow whose customer had not
said yes to a confirmation, and a wrong write in a case where the customer's words were weak evidence (the
case says so with ``weak``, or the flow's history shows a choice made fuzzily or by meaning).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

THIRD_SHOP = Path(__file__).resolve().parent / "third_shop"
CASES = [json.loads(line) for line in (THIRD_SHOP / "conversations.jsonl").read_text(encoding="utf-8").splitlines()
         if line.strip()]
WEAK_HOW = ("fuzzy", "encoder", "said:fuzzy", "said:encoder")
TEST_PURPOSE = "tests"


def northwind_gateway(pool: Any) -> Any:
    from automation.tools import load_tool_gateway
    from tool_servers import gateway_env

    return load_tool_gateway(THIRD_SHOP / "tools.yaml", pool=pool,
                             variables=gateway_env(NORTHWIND_SERVER=str(THIRD_SHOP / "server.py")))


def control(gateway: Any, name: str, **args: Any) -> Any:
    """A test control of the shop (debug_reset, debug_dump, debug_fail), allowed only for the tests' purpose."""
    from automation.tools import Caller

    res = gateway.call(name, args, Caller("test", "tests", purpose=TEST_PURPOSE))
    assert res.ok, res.error
    return res.output


@dataclass
class Verdict:
    case: str
    workflow: str
    right: bool
    problems: list[str] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)     # writes before the customer's yes
    weak_wrong: list[str] = field(default_factory=list)      # wrong writes after weak evidence
    replies: list[str] = field(default_factory=list)


def matches(write: dict[str, Any], expected: list[Any]) -> bool:
    tool, fields = expected
    result = dict(write["result"])
    if "changed" in fields:
        result["changed"] = sorted(result.get("changed") or [])
    return write["tool"] == tool and all(result.get(k) == v for k, v in fields.items())


def pooled_turns(pool: Any) -> tuple[Callable[..., Any], Callable[[str], list[dict[str, Any]]]]:
    """``turn(fn, ...)``: ``fn(conn, ...)`` in its own committed transaction on a pooled connection (hundreds of
    turns, a few connections); ``history(instance_id)``: the flow's history as saved."""
    from automation.workflows import store

    def turn(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with pool.connection() as conn:
            with conn.transaction():
                return fn(conn, *args, **kwargs)

    def history(instance_id: str) -> list[dict[str, Any]]:
        with pool.connection() as conn:
            inst = store.get(conn, instance_id)
        return list((inst or {}).get("history") or [])

    return turn, history


def run_case(engine: Any, gateway: Any, turn: Callable[..., Any], history: Callable[[str], list[dict[str, Any]]],
             case: dict[str, Any], conversation_id: str, first: str | None = None) -> Verdict:
    """One scripted conversation from a reset shop; ``first`` replaces its first message (a rephrasing)."""
    from automation.tools import Caller
    from automation.workflows import understand as U

    control(gateway, "debug_reset")
    caller = Caller("web", case["customer"], conversation_id=conversation_id)
    turns = list(case["turns"])
    if first is not None:
        turns[0] = first
    v = Verdict(case["id"], case["workflow"], False)
    t = turn(engine.start, case["workflow"], caller, turns[0], {}, case["lang"])
    v.replies.append(t.reply)
    confirmed, seen = False, 0
    for k, text in enumerate(turns):
        if k > 0:
            if t.status != "waiting":
                v.problems.append(f"turn {k}: the flow is {t.status} ({t.outcome}) before the customer said {text!r}")
                break
            if t.awaiting == "confirmation" and U.yes_no(text) is True:
                confirmed = True
            t = turn(engine.advance, t.instance_id, caller, text, {}, case["lang"])
            v.replies.append(t.reply)
        new = control(gateway, "debug_writes", since=seen)
        if new["writes"] and not confirmed:
            v.unconfirmed.append(f"turn {k}: {[w['tool'] for w in new['writes']]} without a yes")
        seen = new["count"]
    writes = control(gateway, "debug_writes")["writes"]
    expected = case["writes"]
    if t.status != case["status"]:
        v.problems.append(f"status {t.status} ({t.outcome}) != {case['status']}")
    if case.get("outcome") and t.outcome != case["outcome"]:
        v.problems.append(f"outcome {t.outcome} != {case['outcome']}")
    if len(writes) != len(expected) or not all(matches(w, e) for w, e in zip(writes, expected)):
        v.problems.append(f"writes {[(w['tool'], w['result']) for w in writes]} != {expected}")
        wrong = [w for w in writes if not any(matches(w, e) for e in expected)]
        weak = case.get("weak") or any(h.get("event") in ("chose", "selected") and h.get("how") in WEAK_HOW
                                       for h in history(t.instance_id))
        if wrong and weak:
            v.weak_wrong.append(f"{[(w['tool'], w['result']) for w in wrong]} after weak evidence")
    v.problems += v.unconfirmed + v.weak_wrong
    v.right = not v.problems
    return v


def table(verdicts: list[Verdict]) -> str:
    per: dict[str, list[int]] = {}
    for v in verdicts:
        ok = per.setdefault(v.workflow, [0, 0])
        ok[0] += v.right
        ok[1] += 1
    lines = [f"{'workflow':<16}{'cases':>7}{'right':>7}{'rate':>8}"]
    for wf, (a, n) in per.items():
        lines.append(f"{wf:<16}{n:>7}{a:>7}{a / n:>8.0%}")
    a = sum(v.right for v in verdicts)
    lines.append(f"{'overall':<16}{len(verdicts):>7}{a:>7}{a / max(1, len(verdicts)):>8.0%}")
    return "\n".join(lines)
