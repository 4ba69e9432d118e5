"""Operating workflows: reload on SIGHUP, flow counts in /metrics, flow steps in the trace and task completion
in the report, on real parts: the bundled workflows copied to a folder of the test's own, the example shop
over MCP stdio, embedded Postgres.

A running flow keeps the version it started with; a new one starts on the reloaded version; a broken
file keeps everything as it was and names the file, line and field; a flow whose step is gone goes to a
person politely."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import signal
import time
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from automation.workflows.spec import BUNDLED
from keys_testkit import authorize
from routing_kit import kb_template, routing_services, rows

pytestmark = pytest.mark.slow

_ids = itertools.count()


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "workflows"
    d.mkdir()
    shutil.copy(BUNDLED / "shop.yaml", d / "shop.yaml")
    return d


@pytest.fixture
def svc(fresh_db, pg_server, template_dsn, e5_encoder, folder):
    before = signal.getsignal(signal.SIGHUP)
    _, uri = pg_server
    template_name = psycopg.conninfo.conninfo_to_dict(template_dsn)["dbname"]
    name, home, kb_dir = kb_template(uri, template_name, e5_encoder)
    s = routing_services(fresh_db(name), home, e5_encoder, kb_dir, flows=True, workflows_file=folder)
    assert s.flows is not None
    yield s
    s.close()
    signal.signal(signal.SIGHUP, before)


@pytest.fixture
def api(svc):
    from router.app.factory import create_app

    with TestClient(create_app(services=svc)) as c:
        authorize(c, svc.pool)
        yield c


def say(api, text: str, conversation: str) -> dict:
    r = api.post("/v1/messages", json={"channel": "web", "conversation_id": conversation, "customer_id": "c1",
                                       "message_id": f"m-{next(_ids)}", "text": text})
    assert r.status_code == 200, r.text
    return r.json()


def edit_refund(folder, *, version: int | None, old: str, new: str) -> None:
    f = folder / "shop.yaml"
    text = f.read_text(encoding="utf-8")
    assert old in text
    text = text.replace(old, new)
    if version is not None:
        text = text.replace("  refund:\n    intents:", f"  refund:\n    version: {version}\n    intents:", 1)
    f.write_text(text, encoding="utf-8")


def test_sighup_reloads_and_a_running_flow_keeps_its_version(api, svc, folder):
    first = say(api, "I want a refund of 30 for order 100234", "conv-old")
    assert first["flow"]["step"] == "confirm_refund"
    engine, before = svc.flows, svc.flows.workflows
    edit_refund(folder, version=2, old="      - id: confirm_refund\n", new="      - id: confirm_it\n")
    edit_refund(folder, version=None, old="Refunded {{ refund.amount }}", new="Done: refunded {{ refund.amount }}")

    os.kill(os.getpid(), signal.SIGHUP)            # as `kill -HUP` would: the reload runs in a thread
    deadline = time.monotonic() + 90
    while engine.workflows is before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert engine.workflows is not before, "SIGHUP did not reload the workflows"
    assert engine.workflows["refund"].version == 2 and "confirm_it" in engine.workflows["refund"].steps

    done = say(api, "yes", "conv-old")              # the old flow finishes on version 1, its step and text
    assert done["flow"]["status"] == "completed", done
    assert done["reply"]["text"].startswith("Refunded 30"), done["reply"]["text"]
    fresh = say(api, "I want a refund of 20 for order 100234", "conv-new")
    assert fresh["flow"]["step"] == "confirm_it", fresh
    assert say(api, "yes", "conv-new")["reply"]["text"].startswith("Done: refunded 20")
    versions = {r["conversation_id"]: r["version"] for r in rows(
        svc.pool, "SELECT c.external_id AS conversation_id, f.version FROM flow_instances f "
                  "JOIN conversations c ON c.id::text = f.conversation_id")}
    assert versions == {"conv-old": 1, "conv-new": 2}


def test_a_broken_file_keeps_the_running_workflows_and_names_file_line_and_field(svc, folder, caplog):
    from router.app.composition import reload_flows

    before, tools_before = svc.flows.workflows, svc.flows.tools
    edit_refund(folder, version=None, old="        call: request_refund\n", new="        call: refund_everything\n")
    with caplog.at_level(logging.ERROR, logger="router.app.composition"):
        assert reload_flows(svc) is False
    assert svc.flows.workflows is before and svc.flows.tools is tools_before
    logged = "\n".join(r.getMessage() for r in caplog.records)
    line = next(n for n, t in enumerate((folder / "shop.yaml").read_text().splitlines(), 1)
                if "refund_everything" in t)
    assert f"shop.yaml:{line}" in logged and "refund_everything" in logged, logged
    assert "not reloaded" in logged


def test_a_flow_whose_step_is_gone_goes_to_a_person_politely(api, svc, folder, caplog):
    from router.app.composition import reload_flows

    assert say(api, "I want a refund of 30 for order 100234", "conv-1")["flow"]["step"] == "confirm_refund"
    # the same version number with the step renamed: the definition is replaced, the step no longer exists
    edit_refund(folder, version=None, old="      - id: confirm_refund\n", new="      - id: confirm_it\n")
    with caplog.at_level(logging.WARNING, logger="router.app.composition"):
        assert reload_flows(svc) is True
    assert any("kept version 1" in r.getMessage() for r in caplog.records)
    out = say(api, "yes", "conv-1")
    assert out["flow"]["status"] == "escalated", out
    assert "just been updated" in out["reply"]["text"] and "Refunded" not in out["reply"]["text"]
    assert out["ticket_id"] is not None
    ticket = rows(svc.pool, "SELECT reason FROM tickets WHERE id = %s", out["ticket_id"])[0]
    assert "confirm_refund" in ticket["reason"]


def test_metrics_count_flows_per_workflow_with_closed_labels(api, svc):
    say(api, "where is my order 100234", "conv-status")                   # started + completed
    say(api, "I want a refund of 30 for order 100234", "conv-refund")     # started
    say(api, "never mind", "conv-refund")                                 # cancelled
    body = api.get("/metrics").text

    def value(workflow: str, event: str) -> float:
        for line in body.splitlines():
            if line.startswith(f'switchboard_flows_total{{event="{event}",workflow="{workflow}"}}'):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no series for {workflow} {event}")

    assert value("order_status", "started") == 1 and value("order_status", "completed") == 1
    assert value("refund", "started") == 1 and value("refund", "cancelled") == 1
    assert value("refund", "completed") == 0 and value("invoice", "started") == 0   # every workflow, from zero
    svc.metrics.count_flow("a-name-nobody-loaded", "started")
    svc.metrics.count_flow("refund", "exploded")
    body = api.get("/metrics").text
    assert "a-name-nobody-loaded" not in body and "exploded" not in body
    assert 'switchboard_flows_total{event="started",workflow="other"} 1.0' in body


def test_trace_shows_flow_steps_and_report_shows_task_completion_per_workflow(api, svc):
    from datetime import datetime, timedelta, timezone

    from router.ops.report import build_report, render_text
    from router.ops.trace import load_trace

    say(api, "where is my order 100234", "conv-a")                       # completed
    say(api, "I want a refund of 30 for order 100234", "conv-b")
    say(api, "yes", "conv-b")                                             # completed, the refund ran
    say(api, "I want a refund of 30 for order 100234", "conv-c")
    say(api, "never mind", "conv-c")                                      # cancelled
    conv = rows(svc.pool, "SELECT id FROM conversations WHERE external_id = 'conv-b'")[0]["id"]
    with svc.pool.connection() as conn:
        replay = load_trace(conn, str(conv))
        now = datetime.now(timezone.utc)
        report = build_report(conn, now - timedelta(hours=1), now + timedelta(minutes=1))
    first, second = replay["turns"][0]["flow"], replay["turns"][1]["flow"]
    assert first["workflow"] == "refund" and first["status"] == "waiting" and first["awaiting"] == "confirmation"
    kinds = [s["kind"] for s in first["steps"]]
    # the session memory's order choice comes first (skipped: the order was named), then collect, look up, confirm
    assert kinds[0] == "choose" and "ask" in kinds and "confirm" in kinds
    assert kinds.index("ask") < kinds.index("call") < kinds.index("confirm")
    assert all(isinstance(s["ms"], (int, float)) for s in first["steps"])
    assert any(s["kind"] == "call" and s["tool_status"] == "ok" for s in second["steps"])
    assert second["status"] == "completed"
    (flow,) = replay["flows"]
    assert (flow["workflow"], flow["status"], flow["outcome"], flow["version"]) == ("refund", "completed", "completed", 1)
    assert flow["slots"]["order_id"] == "100234"
    refund = next(c for c in flow["calls"] if c["tool"] == "request_refund")
    assert refund["status"] == "ok" and float(refund["output"]["amount"]) == 30.0
    assert refund["idempotency_key"].startswith(f"flow:{flow['instance_id']}:do_refund")

    per = report["workflows"]["by_workflow"]
    assert per["order_status"]["started"] == 1 and per["order_status"]["completion_rate"] == 1.0
    assert per["refund"]["started"] == 2 and per["refund"]["completed"] == 1 and per["refund"]["cancelled"] == 1
    assert per["refund"]["completion_rate"] == 0.5 and per["refund"]["abandon_rate"] == 0.5
    assert report["workflows"]["completion_rate"] == round(2 / 3, 4)
    assert "task completion     order_status 100.0% of 1, refund 50.0% of 2" in render_text(report)


def test_the_conversation_eval_checks_flow_outcomes_slots_and_tool_effects(svc):
    import copy

    from router.cli.conversations import flows_of
    from router.ops.conversation_eval import load_cases, run_cases
    from router.schemas import InboundMessage

    def send(m):
        return svc.pipeline.handle(InboundMessage(
            channel=m["channel"], conversation_external_id=m["conversation_id"], customer_id=m["customer_id"],
            message_external_id=m["message_id"], text=m["text"]))[0]

    samples = Path(__file__).resolve().parents[3] / "router" / "samples" / "conversations.jsonl"
    (case,) = [c for c in load_cases(samples) if c["id"] == "refund-flow-en"]
    wrong = copy.deepcopy(case)
    wrong["id"] = "refund-flow-wrong"
    wrong["turns"][0]["expect"]["slots"] = {"order_id": "100235"}
    wrong["turns"][1]["expect"]["tools"] = [{"tool": "request_refund", "status": "ok", "times": 2}]
    wrong["turns"][1]["expect"]["flow"] = {"workflow": "refund", "status": "cancelled"}
    report = run_cases([case, wrong], send, inspect=lambda r: flows_of(svc, r))
    results = {r["id"]: r for r in report["results"]}
    assert results["refund-flow-en"]["passed"], results["refund-flow-en"]["failures"]
    failed = {f["expect"] for f in results["refund-flow-wrong"]["failures"]}
    assert failed == {"slots", "tools", "flow"}, results["refund-flow-wrong"]["failures"]
    for key in ("flow", "slots", "tools"):
        assert report["expectations"][key]["not_evaluated"] == 0
    # the second case's own refund ran once as well: `times` counts per conversation, not per database
    assert report["expectations"]["tools"]["passed"] == 3
