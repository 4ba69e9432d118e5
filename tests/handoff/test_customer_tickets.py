"""A customer's recent tickets, as the workflows' session memory reads them at every flow start."""

from __future__ import annotations

from handoff.queries import customer_tickets


def test_recent_tickets_newest_first_of_that_customer_only(pool, open_ticket, conversation):
    first = open_ticket(customer_id="u1", conversation_id=conversation(customer_id="u1"))
    other = open_ticket(customer_id="u2", conversation_id=conversation(customer_id="u2"))
    second = open_ticket(customer_id="u1", conversation_id=conversation(customer_id="u1"), reason="complaint")
    with pool.connection() as conn:
        got = customer_tickets(conn, "web", "u1", limit=5)
        assert [t["id"] for t in got] == [str(second["id"]), str(first["id"])]
        assert str(other["id"]) not in {t["id"] for t in customer_tickets(conn, "web", "u1", limit=5)}
        assert len(customer_tickets(conn, "web", "u1", limit=1)) == 1


def test_read_through_an_index_not_the_whole_table(pool):
    """Read at every flow start: a scan of all tickets grew with the desk's history (9 ms at 5,000 tickets)."""
    with pool.connection() as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute(
            "EXPLAIN SELECT id::text AS id, kind, status, outcome, reason, created_at FROM tickets"
            " WHERE channel = 'web' AND customer_id = 'u1' ORDER BY created_at DESC LIMIT 5").fetchall())
    assert "tickets_customer_idx" in plan
    assert "Seq Scan" not in plan and "Sort" not in plan   # the index gives the newest first
