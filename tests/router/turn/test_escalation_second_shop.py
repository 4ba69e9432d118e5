"""The escalation rules on a deployer's multi-write session (issue: the second shop's conversations ended in a
handoff after the first write until three rules were switched off).

The second shop's tools and workflows behind the whole gateway (classifier, escalation rules, workflows, the
real MCP server): answers to a flow's own questions (a second "yes", a choice) are not repeated questions or
unclear turns, and the turns flows served are not loop-guard rounds: a fourth request after three flows' turns
(each entering l1_resolving) is answered, not handed to a person.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from routing_kit import flow_services
from test_decide import Chat

pytestmark = pytest.mark.slow

SECOND_SHOP = Path(__file__).resolve().parents[2] / "automation" / "second_shop"


@pytest.fixture
def svc(fresh_db, pg_server, template_dsn, e5_encoder, monkeypatch):
    monkeypatch.setenv("TRAILHEAD_SERVER", str(SECOND_SHOP / "server.py"))
    s = flow_services(fresh_db, pg_server, template_dsn, e5_encoder, tools_file=SECOND_SHOP / "tools.yaml",
                      workflows_file=SECOND_SHOP / "workflows.yaml")
    yield s
    s.close()


def test_answers_to_flows_and_served_requests_never_escalate(svc):
    chat = Chat(svc, conv="second-shop-session", customer="cus_ava")
    script = ["I need to change the delivery address of my pending orders", "office", "yes",  # a write, confirmed
              "I want to cancel all my pending orders", "no longer needed", "yes",   # a second request: a second "yes"
              "change the delivery address of my orders",                         # a third: nothing left to move
              "how long does a refund take to reach my card?"]                      # a fourth, answered (L1)
    seen = []
    for text in script:
        out = chat.say(text)
        rule = ((out.get("decision") or {}).get("escalation") or {}).get("rule")
        seen.append((text, out["state"], rule, out.get("ticket_id"), (out.get("flow") or {}).get("workflow")))
    assert all(rule is None and ticket is None and state != "l3_queuing" for _, state, rule, ticket, _ in seen), seen
    assert all(flow for *_, flow in seen[:-1]) and seen[-1][1] == "l1_resolved", seen   # flows, then the answer
    writes = [w["tool"] for w in _shop_writes(svc)]
    assert "modify_pending_order_address" in writes and writes.count("cancel_pending_order") == 2


def _shop_writes(svc) -> list[dict]:
    from automation.tools import Caller

    res = svc.tools.call("debug_dump", {}, Caller("test", "tests", purpose="tests"))
    assert res.ok, res.error
    return res.output["writes"]
