"""CEL ``done`` (the writes earlier flows of a conversation made) is read from the audit only for a workflow that
names it: a loop of writes would otherwise read it again after each write for nothing (benchmarks/flow_step.py's
loop over 10 orders: 1,155 statements for 50 turns, 800 of them that read)."""

from __future__ import annotations

from automation.workflows.spec import BUNDLED, load_workflows

ONE = """
workflows:
  {name}:
    intents: [{name}]
    slots:
      order_id:
        validate: {{entity: order_id}}
        prompt: {{zh: "订单号？", en: "Which order?"}}
      done: {{}}
    steps:
      - id: ask
        ask: order_id
      - id: done
        reply: {{zh: "好的", en: "{reply}"}}
        goto: done_too
      - id: done_too
        end: completed
"""


def test_only_a_workflow_that_names_done_reads_it(tmp_path):
    path = tmp_path / "wf.yaml"
    path.write_text(ONE.format(name="plain", reply="Order {{ slots.order_id }} noted."), encoding="utf-8")
    plain = load_workflows(path).workflows["plain"]
    # a step called "done" and a goto to it are step names, not the CEL value
    assert plain.reads_done is False
    path.write_text(ONE.format(name="slot", reply="{{ slots.done }} noted."), encoding="utf-8")
    assert load_workflows(path).workflows["slot"].reads_done is False      # a slot called done
    path.write_text(ONE.format(name="counts", reply="{{ size(done) }} change(s) so far."), encoding="utf-8")
    assert load_workflows(path).workflows["counts"].reads_done is True


def test_the_bundled_workflows_never_read_done():
    bundled = load_workflows(BUNDLED / "shop.yaml").workflows
    assert len(bundled) >= 5 and not any(wf.reads_done for wf in bundled.values())
