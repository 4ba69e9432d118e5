"""The reads every turn makes of a conversation's flows go through an index, not every conversation's flows."""

from __future__ import annotations

import pytest

# the per-conversation reads (automation.workflows.store: overview, last, recent; engine._instance_id's count)
READS = [
    "SELECT count(*) FROM flow_instances WHERE conversation_id = 'c1'",
    "SELECT * FROM flow_instances WHERE conversation_id = 'c1' ORDER BY created_at DESC, id LIMIT 1",
    "SELECT id, workflow, status, outcome, slots, updated_at FROM flow_instances WHERE conversation_id = 'c1'"
    " ORDER BY created_at DESC LIMIT 5",
]


@pytest.mark.parametrize("sql", READS)
def test_a_conversations_flows_are_read_through_an_index(pool, sql):
    with pool.connection() as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute("EXPLAIN " + sql).fetchall())
    assert "flow_instances_conversation" in plan
    assert "Seq Scan" not in plan
