"""The conversation state machine on a real Postgres: the table, legality, history, sessions, the handoff port."""

from __future__ import annotations

import itertools

import pytest

from handoff.ports import CustomerUnreachable
from router.turn import state as sm
from router.turn.guards import set_do_not_contact


def _conversation(conn, external="c-1", state="idle"):
    row = conn.execute(
        "INSERT INTO conversations (channel, external_id, customer_id, state) VALUES ('web', %s, 'u-1', %s) "
        "RETURNING id, channel, external_id, customer_id, state, session_no, metadata",
        (external, state),
    ).fetchone()
    return row


LIFECYCLES = [
    ["classifying", "l1_resolving", "l1_resolved", "feedback_pending", "closed"],
    ["classifying", "l1_resolving", "l2_assisting", "l2_resolved", "classifying", "l3_queuing", "l3_connected",
     "feedback_pending", "closed"],
    ["classifying", "l3_queuing", "l3_connected", "l3_queuing", "idle", "classifying", "l2_assisting", "idle"],
    ["classifying", "l1_resolving", "l1_resolved", "classifying", "l1_resolving", "l1_resolved", "feedback_pending",
     "classifying", "l3_queuing", "feedback_pending", "closed"],
]


@pytest.mark.parametrize("path", LIFECYCLES)
def test_legal_lifecycles_are_persisted_with_history(pool, path):
    with pool.connection() as conn:
        conv = _conversation(conn)
        for to in path:
            sm.transition(conn, conv, to, reason=f"to {to}")
        stored = conn.execute("SELECT state FROM conversations WHERE id = %s", (conv["id"],)).fetchone()
        assert stored["state"] == path[-1] == conv["state"]
        hist = sm.history(conn, conv["id"])
        assert [h["to_state"] for h in hist] == path
        assert [h["from_state"] for h in hist] == ["idle", *path[:-1]]
        assert all(h["reason"] == f"to {h['to_state']}" for h in hist)
        entries = conn.execute("SELECT state_entries FROM conversation_counters WHERE conversation_id = %s",
                               (conv["id"],)).fetchone()["state_entries"]
        assert entries == {s: path.count(s) for s in set(path)}


ILLEGAL = [(a, b) for a, b in itertools.product(sm.STATES, sm.STATES) if b not in sm.TRANSITIONS[a]]


def test_table_shape():
    # the brief's spine is in the table, and a human-held conversation cannot jump to an answer
    for a, b in [("idle", "classifying"), ("classifying", "l1_resolving"), ("classifying", "l2_assisting"),
                 ("classifying", "l3_queuing"), ("l1_resolving", "l1_resolved"), ("l2_assisting", "l2_resolved"),
                 ("l3_queuing", "l3_connected"), ("l3_connected", "feedback_pending"),
                 ("feedback_pending", "closed"), ("closed", "idle")]:
        sm.check_transition(a, b)
    assert len(ILLEGAL) > 70
    assert ("l3_connected", "l1_resolving") in ILLEGAL and ("closed", "classifying") in ILLEGAL


@pytest.mark.parametrize("from_state,to_state", [
    ("idle", "l1_resolved"), ("idle", "closed"), ("closed", "classifying"), ("l3_connected", "l1_resolving"),
    ("l3_queuing", "l1_resolved"), ("feedback_pending", "l3_connected"), ("classifying", "closed"),
    ("l1_resolved", "l1_resolving"), ("idle", "idle"), ("idle", "nonsense"),
])
def test_illegal_transition_is_rejected_and_changes_nothing(pool, from_state, to_state):
    with pool.connection() as conn:
        conv = _conversation(conn, state=from_state)
        with pytest.raises(sm.IllegalTransition) as err:
            sm.transition(conn, conv, to_state, reason="bad")
        assert from_state in str(err.value) and to_state in str(err.value)
        assert conv["state"] == from_state
        assert conn.execute("SELECT state FROM conversations WHERE id = %s", (conv["id"],)).fetchone()["state"] \
            == from_state
        assert sm.history(conn, conv["id"]) == []


def test_every_illegal_pair_raises():
    for a, b in ILLEGAL:
        with pytest.raises(sm.IllegalTransition):
            sm.check_transition(a, b)


def test_new_session_after_closed_resets_counters(pool):
    with pool.connection() as conn:
        conv = _conversation(conn, state="closed")
        conn.execute("INSERT INTO conversation_counters (conversation_id, session_no, dissatisfied_streak, "
                     "last_question) VALUES (%s, 1, 1, 'where is my order')", (conv["id"],))
        with pytest.raises(sm.IllegalTransition):
            sm.start_new_session(conn, {**conv, "state": "l1_resolved"})
        sm.start_new_session(conn, conv)
        assert conv["state"] == "idle" and conv["session_no"] == 2
        row = conn.execute("SELECT session_no, state FROM conversations WHERE id = %s", (conv["id"],)).fetchone()
        assert (row["session_no"], row["state"]) == (2, "idle")
        counters = sm.load_counters(conn, conv)
        assert counters["session_no"] == 2 and counters["dissatisfied_streak"] == 0
        assert counters["last_question"] is None
        hist = sm.history(conn, conv["id"])
        assert hist[-1]["reason"] == "new_session" and hist[-1]["session_no"] == 2


def test_save_counters_rejects_unknown_fields(pool):
    with pool.connection() as conn:
        conv = _conversation(conn)
        sm.load_counters(conn, conv)
        sm.save_counters(conn, conv["id"], repeat_count=2, state_entries={"l1_resolving": 2})
        row = sm.load_counters(conn, conv)
        assert row["repeat_count"] == 2 and row["state_entries"] == {"l1_resolving": 2}
        with pytest.raises(ValueError):
            sm.save_counters(conn, conv["id"], state="closed")


def _walk(conn, conv, *states):
    for s in states:
        sm.transition(conn, conv, s, reason="setup")


def test_port_moves_conversation_on_ticket_events(pool):
    port = sm.ConversationStatePort()
    with pool.connection() as conn:
        conv = _conversation(conn)
        _walk(conn, conv, "classifying", "l3_queuing")
        ticket = {"id": "t-1", "kind": "handoff", "conversation_id": conv["id"]}
        port.on_ticket_claimed(conn, ticket)
        assert sm.lock_conversation(conn, conv["id"])["state"] == "l3_connected"
        port.on_ticket_claimed(conn, ticket)            # repeated event: nothing moves, nothing raises
        port.on_ticket_resolved(conn, ticket)
        assert sm.lock_conversation(conn, conv["id"])["state"] == "feedback_pending"
        port.on_returned_to_bot(conn, ticket)           # too late: resolved conversations do not bounce back
        assert sm.lock_conversation(conn, conv["id"])["state"] == "feedback_pending"
        hist = sm.history(conn, conv["id"])
        assert [(h["to_state"], h["actor"], h["ticket_id"]) for h in hist[-2:]] == [
            ("l3_connected", "handoff", "t-1"), ("feedback_pending", "handoff", "t-1")]

        other = _conversation(conn, "c-2")
        _walk(conn, other, "classifying", "l2_assisting")
        assist = {"id": "t-2", "kind": "assist", "conversation_id": other["id"]}
        port.on_ticket_claimed(conn, assist)            # claiming an assist ticket does not hand the chat to a human
        assert sm.lock_conversation(conn, other["id"])["state"] == "l2_assisting"
        port.on_ticket_resolved(conn, assist)
        assert sm.lock_conversation(conn, other["id"])["state"] == "l2_resolved"

        third = _conversation(conn, "c-3")
        _walk(conn, third, "classifying", "l3_queuing", "l3_connected")
        sm.save_counters(conn, third["id"], dissatisfied_streak=1)
        port.on_returned_to_bot(conn, {"id": "t-3", "kind": "handoff", "conversation_id": third["id"]})
        assert sm.lock_conversation(conn, third["id"])["state"] == "idle"
        assert sm.load_counters(conn, third)["dissatisfied_streak"] == 0

        fourth = _conversation(conn, "c-4")
        _walk(conn, fourth, "classifying", "l3_queuing")
        port.on_ticket_cancelled(conn, {"id": "t-4", "kind": "handoff", "conversation_id": fourth["id"]})
        assert sm.lock_conversation(conn, fourth["id"])["state"] == "idle"


def test_port_send_to_customer_uses_outbox_and_respects_stop(pool):
    port = sm.ConversationStatePort()
    with pool.connection() as conn:
        conv = _conversation(conn)
        ticket = {"id": "t-9", "kind": "handoff", "conversation_id": conv["id"]}
        ids = port.send_to_customer(conn, ticket, text="Hello, I am Li from support.", sender="agent", agent_id="a-1")
        row = conn.execute("SELECT o.channel, o.kind, o.payload, m.sender, m.direction, m.text FROM outbox o "
                           "JOIN messages m ON m.id = o.message_id WHERE o.id = %s", (ids["outbox_id"],)).fetchone()
        assert row["channel"] == "web" and row["kind"] == "agent_message"
        assert (row["sender"], row["direction"], row["text"]) == ("agent", "out", "Hello, I am Li from support.")
        assert row["payload"]["ticket_id"] == "t-9" and row["payload"]["agent_id"] == "a-1"

        set_do_not_contact(conn, "web", "u-1", True)
        with pytest.raises(CustomerUnreachable):   # the port's declared error: handoff answers 409
            port.send_to_customer(conn, ticket, text="Are you there?", sender="agent", agent_id="a-1")
        assert conn.execute("SELECT count(*) AS n FROM outbox").fetchone()["n"] == 1


def test_move_conversation_matches_transition(pool):
    """The port's move (it locks the row itself) records what transition() of a locked row records."""
    with pool.connection() as conn, conn.transaction():
        a = _conversation(conn, "move-a", "l3_queuing")
        b = _conversation(conn, "move-b", "l3_queuing")
        sm.transition(conn, dict(b), "l3_connected", reason="ticket_claimed", actor="handoff", ticket_id="t-1")
        moved = sm.move_conversation(conn, a["id"], {"l3_queuing": "l3_connected"}, reason="ticket_claimed",
                                     actor="handoff", ticket_id="t-1")
        assert moved["from"] == "l3_queuing" and moved["to"] == "l3_connected"
        # a second delivery of the same event finds the conversation elsewhere and changes nothing
        assert sm.move_conversation(conn, a["id"], {"l3_queuing": "l3_connected"}, reason="ticket_claimed",
                                    actor="handoff") is None
        # and back: the loop-guard counter counts every entry
        sm.move_conversation(conn, a["id"], {"l3_connected": "l3_queuing"}, reason="ticket_requeued", actor="handoff")
        sm.move_conversation(conn, a["id"], {"l3_queuing": "l3_connected"}, reason="ticket_claimed", actor="handoff")
        rows = {}
        for conv in (a, b):
            rows[conv["external_id"]] = (
                conn.execute("SELECT state FROM conversations WHERE id = %s", (conv["id"],)).fetchone()["state"],
                [(h["from_state"], h["to_state"], h["reason"], h["actor"]) for h in sm.history(conn, conv["id"])],
                conn.execute("SELECT state_entries FROM conversation_counters WHERE conversation_id = %s",
                             (conv["id"],)).fetchone()["state_entries"],
            )
    assert rows["move-a"][0] == "l3_connected"
    assert rows["move-a"][1][0] == rows["move-b"][1][0] == ("l3_queuing", "l3_connected", "ticket_claimed", "handoff")
    assert len(rows["move-a"][1]) == 3
    assert rows["move-a"][2] == {"l3_connected": 2, "l3_queuing": 1}
    assert rows["move-b"][2] == {"l3_connected": 1}
    with pytest.raises(sm.IllegalTransition):
        sm.move_conversation(pool, a["id"], {"idle": "l3_connected"}, reason="x", actor="handoff")


def test_claim_in_one_statement_moves_the_conversation_as_the_port_call_does(pool):
    """claim-next with the state port runs as one statement (ConversationStatePort.claim_sql); it must
    leave conversations, history and loop-guard counters exactly as on_ticket_claimed does, under
    concurrent claimers, and leave assist tickets' conversations alone."""
    import threading

    from handoff import agents as agent_store
    from handoff.service import HandoffService

    class CallPort(sm.ConversationStatePort):   # the same port without its SQL: claims call on_ticket_claimed
        def claim_sql(self):
            return None

    def scenario(port, tag):
        svc = HandoffService(pool, port)
        convs = []
        with pool.connection() as conn:
            agent_store.add_agent(conn, f"agent-{tag}", role="agent", teams=("general",), actor="test")
            token, _ = agent_store.issue_token(conn, f"agent-{tag}", label="t", actor="test")
            agent = agent_store.authenticate(conn, token)
            for i in range(24):
                conv = _conversation(conn, f"{tag}-{i}")
                _walk(conn, conv, "classifying", "l2_assisting" if i % 4 == 3 else "l3_queuing")
                if i % 8 == 0:   # the conversation has been with a human before: its counter goes to 2
                    _walk(conn, conv, "l3_connected", "l3_queuing")
                with conn.transaction():
                    svc.open_ticket(conn, kind="assist" if i % 4 == 3 else "handoff", conversation_id=str(conv["id"]),
                                    channel="web", customer_id="u-1", reason="asks_for_human", context={})
                convs.append(conv)
        claimed, errors = [], []

        def claimer():
            try:
                while (t := svc.claim_next(agent)) is not None:
                    claimed.append(t["id"])
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=claimer) for _ in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors and len(claimed) == len(set(claimed)) == 24
        out = []
        with pool.connection() as conn:
            for conv in convs:
                state = conn.execute("SELECT state FROM conversations WHERE id = %s", (conv["id"],)).fetchone()["state"]
                hist = [(h["session_no"], h["from_state"], h["to_state"], h["reason"], h["actor"], h["ticket_id"] is None)
                        for h in sm.history(conn, conv["id"])]
                entries = conn.execute("SELECT state_entries FROM conversation_counters WHERE conversation_id = %s",
                                       (conv["id"],)).fetchone()["state_entries"]
                out.append((state, hist, entries))
        return out

    assert sm.ConversationStatePort().claim_sql() and CallPort().claim_sql() is None
    one_statement, port_calls = scenario(sm.ConversationStatePort(), "sql"), scenario(CallPort(), "call")
    assert one_statement == port_calls
    states = [s for s, _, _ in one_statement]
    assert states.count("l3_connected") == 18 and states.count("l2_assisting") == 6
    assert one_statement[0][2]["l3_connected"] == 2 and one_statement[1][2]["l3_connected"] == 1
    assert one_statement[0][1][-1] == (1, "l3_queuing", "l3_connected", "ticket_claimed", "handoff", False)


@pytest.mark.parametrize("path", LIFECYCLES)
def test_a_chain_of_moves_in_one_statement_records_what_moves_one_by_one_record(pool, path):
    """A turn writes its moves together (move_along): the same state, history (in order, with reasons, tickets and
    the message) and loop-guard counts as transition() edge by edge, on top of counts already there."""
    with pool.connection() as conn, conn.transaction():
        one, chain = _conversation(conn, "one-by-one"), _conversation(conn, "chained")
        message = conn.execute("INSERT INTO messages (conversation_id, channel, external_id, direction, sender, text)"
                               " VALUES (%s, 'web', 'm-chain', 'in', 'customer', 'hi') RETURNING id",
                               (chain["id"],)).fetchone()["id"]
        for conv in (one, chain):            # counts from an earlier turn: the chain adds to them
            sm.transition(conn, conv, "classifying", reason="earlier")
            sm.transition(conn, conv, "l1_resolving", reason="earlier")
            sm.transition(conn, conv, "l1_resolved", reason="earlier", counted=False)
        edges, at = [], "l1_resolved"
        for i, to in enumerate(path):
            edges.append((at, to, f"to {to}", f"t-{i}" if i % 3 == 0 else None, i % 2 == 0))
            at = to
        for frm, to, reason, ticket, counted in edges:
            sm.transition(conn, one, to, reason=reason, ticket_id=ticket, counted=counted, message_id=message)
        ids = sm.move_along(conn, chain["id"], edges, message_id=message)

        def stored(conv):
            return (conn.execute("SELECT state FROM conversations WHERE id = %s", (conv["id"],)).fetchone()["state"],
                    [(h["from_state"], h["to_state"], h["reason"], h["ticket_id"], h["message_id"], h["actor"])
                     for h in sm.history(conn, conv["id"])],
                    conn.execute("SELECT state_entries FROM conversation_counters WHERE conversation_id = %s",
                                 (conv["id"],)).fetchone()["state_entries"])

        assert stored(chain) == stored(one)
        assert stored(chain)[0] == path[-1]
        history_ids = [h["id"] for h in conn.execute(
            "SELECT id FROM conversation_transitions WHERE conversation_id = %s ORDER BY id", (chain["id"],))]
        assert ids == history_ids[3:] and len(ids) == len(path)
        # the conversation moved on meanwhile (the first edge no longer leaves its state): nothing is written
        assert sm.move_along(conn, chain["id"], edges[:1], message_id=message) is None
        assert stored(chain) == stored(one)
    with pytest.raises(sm.IllegalTransition):
        sm.move_along(pool, chain["id"], [("idle", "l1_resolved", "x", None, True)])
    with pytest.raises(ValueError, match="connect"):
        sm.move_along(pool, chain["id"], [("idle", "classifying", "x", None, True),
                                          ("l1_resolving", "l1_resolved", "y", None, True)])
