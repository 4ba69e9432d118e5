"""A turn holds at most one connection of the gateway's pool at a time.

The bound on turns at once (router.turn.passes.TurnSlots, sized by router.turn.passes.pass_slots) counts one
connection a turn: retrieval reads through the knowledge base's own pool, and the look ahead, the tool calls
and the session memory's loads take theirs between the passes, never while the pass holds one. A turn that took
a second connection inside its pass could leave every connection held by turns waiting for another. Walked
on the whole bundled pack (real Postgres, tantivy, model, MCP shop): an answer, a draft, a ticket, a lookup
in a flow, a refund up to its approval."""

from __future__ import annotations

import threading

import pytest

from test_listening_misses import _services, _talking

pytestmark = pytest.mark.slow


@pytest.fixture
def watched(fresh_db, pg_server, template_dsn, e5_encoder, tmp_path):
    """The pack's services, its main pool reporting any thread that takes a connection while holding one."""
    s = _services(fresh_db, pg_server, template_dsn, e5_encoder, tmp_path, topics=None)
    pool, held, nested = s.pool, threading.local(), []
    get, put = pool.getconn, pool.putconn

    def getconn(timeout=None):
        n = getattr(held, "n", 0)
        if n:
            nested.append(threading.current_thread().name)
        conn = get(timeout)
        held.n = n + 1
        return conn

    def putconn(conn):
        held.n = max(0, getattr(held, "n", 0) - 1)
        return put(conn)

    pool.getconn, pool.putconn = getconn, putconn
    yield s, nested
    s.close()


def test_no_turn_takes_a_second_connection_while_holding_one(watched):
    s, nested = watched
    with _talking(s) as talk:
        said = talk("c2", ["how long does a refund take?"])                 # an answer from the knowledge base
        assert "business days" in said[0][1]
        said = talk("c6", ["do you sell phone cases?"])                     # not answerable: a draft for a person
        assert said[0][3] is not None
        said = talk("c1", ["I want to talk to a human"])                    # a ticket
        assert said[0][3] is not None
        said = talk("c2", ["where is my order", "the boots"])               # a flow: memory, then a lookup
        assert "100241" in said[1][1] and "shipped" in said[1][1]
        said = talk("c2", ["refund order 100240", "all"])                   # a write up to its approval or its reply
        assert said[1][1]
    assert nested == [], nested
