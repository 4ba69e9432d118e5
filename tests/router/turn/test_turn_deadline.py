"""A turn's deadline (issue 34: no customer can hold the pool): a transaction that waits longer than
``deadline`` between two statements is ended by Postgres itself (idle_in_transaction_session_timeout), which
frees the conversation's lock and the pooled connection; the turn is repeated on a fresh connection like any
lost one. Real Postgres, real pipeline; the slow work is a decider that sleeps with the conversation locked."""

from __future__ import annotations

import threading

from router.schemas import InboundMessage
from router.turn.pipeline import Pipeline, record_only


def _msg(message_id: str, text: str = "hello") -> InboundMessage:
    return InboundMessage(channel="web", conversation_external_id="c-deadline", customer_id="cust-1",
                          message_external_id=message_id, text=text)


def test_a_turn_stuck_under_its_lock_is_ended_by_the_server_and_repeated(services):
    started, woke = threading.Event(), threading.Event()
    attempts = []

    def stuck_once(ctx):
        attempts.append(ctx.message["id"])
        if len(attempts) == 1:          # the first attempt hangs with the conversation locked (a hung call)
            started.set()
            woke.wait(20)
        return record_only(ctx)

    slow = Pipeline(services.pool, services.metrics, stuck_once, deadline=1.0)
    quick = Pipeline(services.pool, services.metrics, record_only, deadline=1.0)
    assert quick.handle(_msg("m-0"))[0]["conversation_id"]        # the conversation exists
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("slow", slow.handle(_msg("m-slow", "refund please"))))
    t.start()
    assert started.wait(20)
    # the same conversation's next message waits for the row lock: the server ends the stuck session after the
    # deadline, so it is routed while the stuck turn is still asleep
    response, replayed = quick.handle(_msg("m-next", "are you there?"))
    assert response["turn_id"] and not replayed
    assert not woke.is_set()
    woke.set()
    t.join(30)
    # the stuck turn was repeated on a fresh connection and stored once
    assert out["slow"][0]["turn_id"] and len(attempts) == 2
    with services.pool.connection() as conn:
        texts = [r["text"] for r in conn.execute(
            "SELECT m.text FROM messages m JOIN turns t ON t.message_id = m.id ORDER BY t.created_at").fetchall()]
    assert texts == ["hello", "are you there?", "refund please"]


def test_without_a_deadline_the_setting_is_left_alone(services):
    """The deadline is per turn (SET LOCAL): other work on the same pooled connections keeps the server's."""
    quick = Pipeline(services.pool, services.metrics, record_only, deadline=1.0)
    quick.handle(_msg("m-1"))
    with services.pool.connection() as conn:
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[
            "idle_in_transaction_session_timeout"] == "0"
