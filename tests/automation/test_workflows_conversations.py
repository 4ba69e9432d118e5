"""Scripted conversations against the second shop, each judged by the records the shop changed.

Every case (``second_shop/conversations.jsonl``) names the customer, the turns and the writes it should
leave (tool + fields of the real result); nothing else may change. A case may hold several flows of one
conversation (``then``). Besides task success (>= 80 % overall and per SOP), two things must never
happen: a write in a flow whose customer had not said yes to a confirmation, and a reply that claims
success in a turn whose tool produced no success result.
"""

from __future__ import annotations

import json
from pathlib import Path

from automation.tools import Caller
from automation.workflows import understand as U

CASES = [json.loads(line) for line in (Path(__file__).parent / "second_shop" / "conversations.jsonl").read_text(
    encoding="utf-8").splitlines() if line.strip()]
SUCCESS_WORDS = ("goes back", "Cancelled W", "now going to", "Exchange requested", "Return requested", " changed:",
                 "已提交", "已取消", "已改地址", "已修改订单")
TARGET = 0.8


def _matches(write, expected):
    tool, fields = expected
    return write["tool"] == tool and all(write["result"].get(k) == v for k, v in fields.items())


def _run_flow(engine, shop, turn, caller, flow, lang, seen_writes):
    """One flow of a conversation: (last turn, replies, problems that break the hard rules, pending actions)."""
    hard, actions = [], []
    t = turn(engine.start, flow["workflow"], caller, flow["turns"][0], {}, lang)
    replies, confirmed = [t.reply], False
    for k, text in enumerate(flow["turns"]):
        if k > 0:
            if t.awaiting == "confirmation" and U.yes_no(text) is True:
                confirmed = True
            t = turn(engine.advance, t.instance_id, caller, text, {}, lang)
            replies.append(t.reply)
        if t.pending_action:
            actions.append(t.pending_action)
        writes = shop.shop("debug_dump")["writes"]
        new = writes[seen_writes:]
        seen_writes = len(writes)
        if new and not confirmed:
            hard.append(f"turn {k}: a change the customer did not confirm: {[w['tool'] for w in new]}")
        if not new and any(word in t.reply for word in SUCCESS_WORDS):
            hard.append(f"turn {k}: a success reply without a success result: {t.reply!r}")
    return t, replies, hard, actions, seen_writes


def test_scripted_conversations_change_exactly_what_they_should(engine, shop, turn):
    assert len(CASES) >= 60 and {c["lang"] for c in CASES} == {"en", "zh"}
    failures, hard, per_workflow = [], [], {}
    for i, case in enumerate(CASES):
        shop.shop("debug_reset")
        if case.get("fail"):
            shop.shop("debug_fail", tool=case["fail"][0], times=case["fail"][1])
        caller = Caller("web", case["customer"], conversation_id=f"conv-{i}-{case['id']}")
        flows = [case] + case.get("then", [])
        problems, replies, actions, seen = [], [], [], 0
        for n, flow in enumerate(flows):
            t, said, broken, pa, seen = _run_flow(engine, shop, turn, caller, flow, flow.get("lang", case["lang"]), seen)
            replies += said
            actions += pa
            hard += [f"{case['id']}: {b}" for b in broken]
            problems += broken
            if t.status != flow["status"]:
                problems.append(f"flow {n}: status {t.status} != {flow['status']}")
            if flow.get("outcome") and t.outcome != flow["outcome"]:
                problems.append(f"flow {n}: outcome {t.outcome} != {flow['outcome']}")
        writes = shop.shop("debug_dump")["writes"]
        if len(writes) != len(case["writes"]) or not all(_matches(w, e) for w, e in zip(writes, case["writes"])):
            problems.append(f"writes {[(w['tool'], w['result']) for w in writes]} != {case['writes']}")
        if case.get("reply_lacks") and any(case["reply_lacks"] in r for r in replies):
            problems.append(f"a reply shows {case['reply_lacks']!r}")
        if case.get("reply_has") and not any(case["reply_has"] in r for r in replies):
            problems.append(f"no reply shows {case['reply_has']!r}")
        if case.get("confirm_lists"):   # one confirmation lists each pending action, in the order they will run
            listed = [[a["tool"] for a in pa.get("actions", [pa])] for pa in actions]
            if case["confirm_lists"] not in listed:
                problems.append(f"pending actions {listed} never list {case['confirm_lists']}")
        sop = case.get("sop", case["workflow"])
        ok = per_workflow.setdefault(sop, [0, 0])
        ok[1] += 1
        if problems:
            failures.append((case["id"], problems, replies[-1]))
        else:
            ok[0] += 1
    total_ok = sum(a for a, _ in per_workflow.values())
    print(f"\n{'SOP':<24}{'cases':>7}{'success':>9}{'rate':>8}")
    for sop, (a, n) in per_workflow.items():
        print(f"{sop:<24}{n:>7}{a:>9}{a / n:>8.0%}")
    print(f"{'overall':<24}{len(CASES):>7}{total_ok:>9}{total_ok / len(CASES):>8.0%}")
    for cid, p, r in failures:
        print(f"FAILED {cid}: {p} (last reply: {r!r})")
    assert not hard, "\n".join(hard)
    assert total_ok / len(CASES) >= TARGET, f"task success {total_ok}/{len(CASES)}"
    low = {sop: f"{a}/{n}" for sop, (a, n) in per_workflow.items() if a / n < TARGET}
    assert not low, f"SOPs below {TARGET:.0%}: {low}"


CARELESS = """\
workflows:
  careless:
    slots: {reason: {}}
    steps:
      - {id: load, call: list_customer_orders, bind: orders}
      - id: cancel_first
        call: cancel_pending_order
        args: {order_ref: "orders.orders.filter(o, o.status == 'pending')[0].order_ref", reason: '"no longer needed"'}
        on_error: {goto: boast}          # careless: a failure is reported as a success
      - id: boast
        reply: {zh: "已取消。", en: "Cancelled W1001 and W1002."}
      - end: completed
"""


def test_the_judge_catches_an_unconfirmed_change_and_a_success_claim_without_a_result(shop, approvals, turn):
    """The two rules that must never break are checked per turn: a workflow that writes without asking, and
    one that claims a success it did not get, are both caught."""
    from automation.workflows.engine import FlowEngine
    from automation.workflows.spec import parse_workflows

    careless = FlowEngine(parse_workflows(CARELESS, file="careless.yaml", tools=shop.gateway), shop.gateway, approvals)
    shop.shop("debug_reset")
    caller = Caller("web", "cus_ava", conversation_id="conv-careless")
    t, _, hard, _, _ = _run_flow(careless, shop, turn, caller, {"workflow": "careless", "turns": ["cancel it"]}, "en", 0)
    assert t.status == "completed"
    assert any("did not confirm" in h for h in hard), hard
    shop.shop("debug_reset")
    shop.shop("debug_fail", tool="cancel_pending_order", times=3)
    caller = Caller("web", "cus_ava", conversation_id="conv-careless-2")
    _, _, hard, _, _ = _run_flow(careless, shop, turn, caller, {"workflow": "careless", "turns": ["cancel it"]}, "en", 0)
    assert not shop.shop("debug_dump")["writes"]
    assert any("success reply without a success result" in h for h in hard), hard
