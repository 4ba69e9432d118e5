"""The third shop's scripted conversations, each run once and judged by the records the shop changed.

>= 90 % of the cases must change exactly what they should; never a write without the customer's yes to a
confirmation, never a wrong write after weak evidence (strict, whatever the rate). pass^k over varied
phrasings is ``benchmarks/third_shop.py``.
"""

from __future__ import annotations

import pytest

from third_shop_kit import CASES, control, northwind_gateway, run_case, table

TARGET = 0.9


@pytest.fixture
def northwind(pool):
    gw = northwind_gateway(pool)
    yield gw
    gw.close()


@pytest.fixture
def third_engine(northwind, approvals):
    from automation.workflows.engine import FlowEngine
    from automation.workflows.spec import load_workflows
    from third_shop_kit import THIRD_SHOP

    return FlowEngine(load_workflows(THIRD_SHOP / "workflows.yaml", tools=northwind), northwind, approvals)


@pytest.fixture
def pooled(pool):
    from third_shop_kit import pooled_turns

    return pooled_turns(pool)


def test_the_cases_cover_every_process_in_both_languages():
    assert len(CASES) >= 100
    assert {c["lang"] for c in CASES} == {"en", "zh"}
    assert {c["workflow"] for c in CASES} == {"return_items", "exchange_item", "cancel_orders", "change_address",
                                              "modify_items"}
    assert sum(1 for c in CASES if not c["writes"]) >= 15     # refusals, "no" at a confirmation, nothing named
    assert sum(1 for c in CASES if len(c["writes"]) > 1) >= 10   # requests across orders


def test_scripted_conversations_change_exactly_what_they_should(third_engine, northwind, pooled):
    turn, history = pooled
    verdicts = [run_case(third_engine, northwind, turn, history, case, f"conv3-{i}-{case['id']}")
                for i, case in enumerate(CASES)]
    print("\n" + table(verdicts))
    for v in verdicts:
        if not v.right:
            print(f"FAILED {v.case}: {v.problems} (last reply: {v.replies[-1]!r})")
    unconfirmed = [f"{v.case}: {u}" for v in verdicts for u in v.unconfirmed]
    weak_wrong = [f"{v.case}: {w}" for v in verdicts for w in v.weak_wrong]
    assert not unconfirmed, "\n".join(unconfirmed)
    assert not weak_wrong, "\n".join(weak_wrong)
    right = sum(v.right for v in verdicts) / len(verdicts)
    assert right >= TARGET, f"right {right:.1%}"
    # the judge can fail: the same conversation judged against other records is a wrong write after weak evidence
    case = next(c for c in CASES if c["id"] == "can-kettle-lamp")
    twisted = {**case, "id": "twisted", "weak": True,
               "writes": [["cancel_order", {"order_id": "H2001", "reason": "no longer needed"}]]}
    v = run_case(third_engine, northwind, turn, history, twisted, "conv3-twisted")
    assert not v.right and v.weak_wrong, v
    assert control(northwind, "debug_dump")["orders"]["H2002"]["status"] == "cancelled"
