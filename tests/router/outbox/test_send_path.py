"""One send path to a customer, with the do-not-contact check, on the real database: the outbox's
enqueue_outbound queues bot replies, the reply queued after a channel turn, agent messages and a flow's reply
after an approval or a staff cancel (the conversation port). A customer who sent STOP gets nothing from any
of them; the same customer on another channel, another customer, and the customer after START do."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from automation.workflows.engine import FlowTurn
from handoff.ports import CustomerUnreachable
from router.outbox.replies import ensure_reply_queued
from router.outbox.store import enqueue_outbound
from router.turn.guards import set_do_not_contact
from router.turn.state import ConversationStatePort


def conversation(conn, customer: str, channel: str = "web") -> dict:
    return conn.execute("INSERT INTO conversations (channel, external_id, customer_id) VALUES (%s, %s, %s) "
                        "RETURNING id, channel, customer_id", (channel, f"ext-{uuid.uuid4().hex}", customer)).fetchone()


def outbound(conn, conv) -> tuple[int, int]:
    m = conn.execute("SELECT count(*) AS n FROM messages WHERE conversation_id = %s AND direction = 'out'",
                     (conv["id"],)).fetchone()["n"]
    o = conn.execute("SELECT count(*) AS n FROM outbox WHERE conversation_id = %s", (conv["id"],)).fetchone()["n"]
    return m, o


def each_path(conn, conv) -> list[object]:
    """Every way a message reaches this customer, each tried once; what each returned."""
    port = ConversationStatePort()
    ticket = {"id": str(uuid.uuid4()), "kind": "approval", "conversation_id": conv["id"]}
    turn = {"id": uuid.uuid4(), "conversation_id": conv["id"], "created_at": datetime(2020, 1, 1, tzinfo=timezone.utc)}
    results: list[object] = [
        enqueue_outbound(conn, conversation_id=conv["id"], channel=conv["channel"], text="bot reply"),
        ensure_reply_queued(conn, turn, conv["channel"], "reply queued after the turn"),
    ]
    try:
        results.append(port.send_to_customer(conn, ticket, text="agent message", sender="agent", agent_id="a-1"))
    except CustomerUnreachable as exc:
        results.append(exc)
    # a flow's reply after an approval or a staff cancel (what on_approval_decided / on_ticket_cancelled queue)
    port._tell_customer(conn, ticket, FlowTurn(reply="Refunded 30.00 to your card.", status="completed",
                                               workflow="refund", instance_id="i-1", outcome="completed"))
    return results


def test_a_stopped_customer_gets_nothing_from_any_path_and_others_still_do(pool):
    with pool.connection() as conn, conn.transaction():
        stopped = conversation(conn, "u-stop")
        same_customer_elsewhere = conversation(conn, "u-stop", channel="telegram")
        other = conversation(conn, "u-other")
        set_do_not_contact(conn, "web", "u-stop", True)

        refused = each_path(conn, stopped)
        assert refused[:2] == [None, None]
        assert isinstance(refused[2], CustomerUnreachable) and "STOP" in str(refused[2])
        assert outbound(conn, stopped) == (0, 0)

        for conv in (same_customer_elsewhere, other):
            sent = each_path(conn, conv)
            assert sent[0]["outbox_id"] and isinstance(sent[1], int) and sent[2]["outbox_id"], sent
            assert outbound(conn, conv) == (4, 4)

        set_do_not_contact(conn, "web", "u-stop", False)             # START: reachable again
        each_path(conn, stopped)
        assert outbound(conn, stopped) == (4, 4)


def test_an_unknown_conversation_gets_nothing_and_no_error_from_the_outbox(pool):
    with pool.connection() as conn, conn.transaction():
        assert enqueue_outbound(conn, conversation_id=str(uuid.uuid4()), channel="web", text="hello") is None
        with pytest.raises(CustomerUnreachable, match="does not exist"):
            ConversationStatePort().send_to_customer(conn, {"id": "t", "conversation_id": str(uuid.uuid4())},
                                                     text="hi", sender="agent", agent_id="a-1")
        assert conn.execute("SELECT count(*) AS n FROM outbox").fetchone()["n"] == 0
