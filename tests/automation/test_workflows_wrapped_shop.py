"""The second shop's workflows.yaml, unchanged, on a server of another convention (wrapped answers, writes
without an idempotency argument: ``second_shop/tools_wrapped.yaml``), judged by the records the shop changed;
and a request repeated in one conversation is recognised, not written twice."""

from __future__ import annotations

import json

import pytest

from automation.tools import Caller
from flow_testkit import SECOND_SHOP, Trailhead
from tool_servers import gateway_env

CASES = {c["id"]: c for c in map(json.loads, (SECOND_SHOP / "conversations.jsonl").read_text(
    encoding="utf-8").splitlines()) if c}
ONE_PER_WORKFLOW = ["cancel-all-en", "ca-suite-en", "cp-fleece-medium", "exchange-boots", "readdress-office",
                    "rx-hose-boots-en", "ret-hose-card", "ret-lamp-gift-zh"]


@pytest.fixture
def wrapped_engine(pool):
    from automation.tools import load_tool_gateway
    from automation.workflows.engine import FlowEngine
    from automation.workflows.spec import load_workflows
    from flow_testkit import RecordingApprovals

    gw = load_tool_gateway(SECOND_SHOP / "tools_wrapped.yaml", pool=pool, variables=gateway_env(
        TRAILHEAD_WRAPPED_SERVER=str(SECOND_SHOP / "wrapped_server.py")))
    # the load-time checks hold against the wrapped file: same tools, writes without a key argument
    engine = FlowEngine(load_workflows(SECOND_SHOP / "workflows.yaml", tools=gw), gw, RecordingApprovals())
    yield engine, Trailhead(gw, pool)
    gw.close()


def _flow(engine, turn, caller, case):
    t = turn(engine.start, case["workflow"], caller, case["turns"][0], {}, case["lang"])
    for text in case["turns"][1:]:
        if t.status != "waiting":
            break
        t = turn(engine.advance, t.instance_id, caller, text, {}, case["lang"])
    return t


def _matches(writes, expected):
    return len(writes) == len(expected) and all(
        w["tool"] == tool and all(w["result"].get(k) == v for k, v in fields.items())
        for w, (tool, fields) in zip(writes, expected))


PROFILE_ADDRESS = """
version: 1
workflows:
  default_address:
    description: {zh: 修改默认地址, en: change the default address}
    slots:
      address: {}
    steps:
      - id: load_profile
        call: get_customer_profile
        bind: profile
      - id: pick_address
        choose: address
        options: profile.addresses
        label: "{{ option.label }}: {{ option.city }}"
        option_id: option.address_id
        match: ["option.label", "option.city"]
        prompt: {zh: "哪个地址？", en: "Which address?"}
      - id: confirm
        confirm: {zh: "把默认地址改为 {{ slots.address.city }}？", en: "Make {{ slots.address.city }} your default?"}
        pending_action:
          tool: update_customer_address
          arguments: {address: slots.address}
          summary: {zh: "默认地址改为 {{ slots.address.city }}", en: "default address: {{ slots.address.city }}"}
      - id: write
        call: update_customer_address
        args:
          address: "{'line1': slots.address.line1, 'line2': slots.address.line2, 'city': slots.address.city, 'state': slots.address.state, 'zip': slots.address.zip, 'country': slots.address.country}"
        bind: changed
        already: {zh: "默认地址已经在本次对话中改为 {{ earlier.result.default_address.city }}，没有再改。",
                  en: "Your default address was already changed to {{ earlier.result.default_address.city }} in this conversation; nothing changed now."}
      - id: done
        reply: {zh: "默认地址已改为 {{ changed.default_address.city }}。",
                en: "Default address changed to {{ changed.default_address.city }} ({{ size(done) }} change(s) in this conversation: {{ done.map(d, d.tool).join(', ') }})."}
      - end: completed
"""


def test_the_workflows_run_unchanged_on_a_wrapping_server_without_idempotency_arguments(wrapped_engine, turn,
                                                                                      tmp_path):
    engine, shop = wrapped_engine
    wrong = []
    for i, name in enumerate(ONE_PER_WORKFLOW):
        case = CASES[name]
        shop.shop("debug_reset")
        t = _flow(engine, turn, Caller("web", case["customer"], conversation_id=f"wrapped-{i}"), case)
        writes = shop.shop("debug_dump")["writes"]
        if t.status != case["status"] or not _matches(writes, case["writes"]):
            wrong.append((name, t.status, t.reply, [(w["tool"], w["result"]) for w in writes]))
    assert not wrong
    assert {r["tool"] for r in shop.calls if r["idempotency_key"]} >= {"cancel_pending_order",
                                                                      "return_delivered_order_items"}

    # a request repeated in the conversation is recognised and not written twice
    _repeated_request(shop, turn, tmp_path)


def _repeated_request(shop, turn, tmp_path):
    from automation.workflows.engine import FlowEngine
    from automation.workflows.spec import load_workflows
    from flow_testkit import RecordingApprovals

    (tmp_path / "workflows.yaml").write_text(PROFILE_ADDRESS, encoding="utf-8")
    gw = shop.gateway
    engine = FlowEngine(load_workflows(tmp_path / "workflows.yaml", tools=gw), gw, RecordingApprovals())
    shop.shop("debug_reset")
    caller = Caller("web", "cus_ava", conversation_id="wrapped-repeat")
    case = {"workflow": "default_address", "lang": "en", "turns": ["change my default address", "office", "yes"]}
    first = _flow(engine, turn, caller, case)
    assert first.outcome == "completed" and "Default address changed to" in first.reply
    # CEL `done`: what the conversation's flows already wrote, from the audit
    assert "(1 change(s) in this conversation: update_customer_address)" in first.reply
    again = _flow(engine, turn, caller, case)        # asked again: the same change, recognised
    assert again.status == "completed" and again.outcome == "already_done"
    assert "already changed to" in again.reply and "nothing changed now" in again.reply
    assert [w["tool"] for w in shop.shop("debug_dump")["writes"]] == ["update_customer_address"]
    elsewhere = _flow(engine, turn, Caller("web", "cus_ava", conversation_id="wrapped-other"), case)
    assert elsewhere.outcome == "completed"           # another conversation: a new request, written
    assert len(shop.shop("debug_dump")["writes"]) == 2
