"""`switchboard report` on a conversation history seeded through the real tables."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from PIL import Image
from typer.testing import CliRunner

from router.ops.report import build_report, parse_since, render_text, write_charts

NOW = datetime.now(timezone.utc).replace(microsecond=0)
CITED = {"text": "See the article.", "citations": [{"doc_id": "returns-en", "chunk_id": "returns-en#0"}]}


class History:
    """Writes conversations, turns, transitions, tickets, ticket events and feedback at given times."""

    def __init__(self, conn):
        self.conn = conn
        self.n = 0

    def conversation(self, customer: str, channel: str = "web") -> dict:
        return self.conn.execute(
            "INSERT INTO conversations (channel, external_id, customer_id) VALUES (%s, %s, %s) RETURNING *",
            (channel, f"ext-{uuid.uuid4().hex[:8]}", customer)).fetchone()

    def turn(self, conv, at: datetime, *, tier: str | None, session: int = 1, reply: dict | None = None,
             rule: str | None = None, transitions: tuple[str, ...] = (), state: str = "idle",
             explanation: dict | None = None, outcome: str | None = None) -> str:
        self.n += 1
        msg = self.conn.execute(
            "INSERT INTO messages (conversation_id, channel, external_id, direction, sender, text, received_at) "
            "VALUES (%s, %s, %s, 'in', 'customer', %s, %s) RETURNING id",
            (conv["id"], conv["channel"], f"m-{self.n}", f"message {self.n}", at)).fetchone()["id"]
        if explanation is None:   # a reply with citations (even none) stands for an answer from the knowledge base
            explanation = {"answer": {"confidence": 0.9}} if reply is not None and "citations" in reply else {}
        decision = {"tier": tier, "intent": "x" if tier else None, "channel": "rules", "explanation": explanation,
                    "escalation": {"rule": rule, "reason": rule, "priority": "normal"} if rule else None}
        response = {"reply": reply, "state": state, **({"outcome": outcome} if outcome else {})}
        turn_id = self.conn.execute(
            "INSERT INTO turns (conversation_id, message_id, session_no, state, decision, response, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (conv["id"], msg, session, state, json.dumps(decision), json.dumps(response), at)).fetchone()["id"]
        prev = "idle"
        for to in transitions:
            self.transition(conv, prev, to, at, session=session, message_id=msg)
            prev = to
        return str(turn_id)

    def transition(self, conv, frm: str, to: str, at: datetime, *, session: int = 1, message_id=None,
                   actor: str = "router") -> None:
        self.conn.execute(
            "INSERT INTO conversation_transitions (conversation_id, session_no, from_state, to_state, reason, actor, "
            "message_id, created_at) VALUES (%s, %s, %s, %s, 'seed', %s, %s, %s)",
            (conv["id"], session, frm, to, actor, message_id, at))

    def ticket(self, conv, kind: str, opened: datetime, *, claimed: datetime | None = None,
               resolved: datetime | None = None, breached: datetime | None = None) -> None:
        status = "resolved" if resolved else "queued"
        tid = self.conn.execute(
            """
            INSERT INTO tickets (kind, status, conversation_id, channel, customer_id, reason, priority, team,
                                 sla_due_at, sla_breached_at, created_at)
            VALUES (%s, %s, %s, %s, %s, 'seed', 'normal', 'general', %s, %s, %s) RETURNING id
            """,
            (kind, status, str(conv["id"]), conv["channel"], conv["customer_id"], opened + timedelta(hours=1),
             breached, opened)).fetchone()["id"]
        for action, at in (("opened", opened), ("claimed", claimed), ("resolved", resolved)):
            if at is not None:
                self.conn.execute("INSERT INTO ticket_events (ticket_id, actor, action, at) VALUES (%s, 'seed', %s, %s)",
                                  (tid, action, at))

    def feedback(self, conv, csat: int, at: datetime, session: int = 1) -> None:
        self.conn.execute("INSERT INTO feedback (conversation_id, session_no, csat, created_at) VALUES (%s, %s, %s, %s)",
                          (conv["id"], session, csat, at))


L1_OK = ("classifying", "l1_resolving", "l1_resolved")


@pytest.fixture
def seeded(pool):
    """Five customers in the last week, plus one old conversation outside the window."""
    d = timedelta(days=1)
    with pool.connection() as conn, conn.transaction():
        h = History(conn)
        # A: answered by the knowledge base, rated 5
        a = h.conversation("cust-a")
        h.turn(a, NOW - 2 * d, tier="L1", reply=CITED, transitions=L1_OK, state="l1_resolved")
        h.feedback(a, 5, NOW - 2 * d + timedelta(minutes=2))
        # B: answered, then asked for a person (L3); resolved by an agent; back the next day with a new question
        b = h.conversation("cust-b")
        t0 = NOW - 3 * d
        h.turn(b, t0, tier="L1", reply=CITED, transitions=L1_OK, state="l1_resolved")
        h.turn(b, t0 + timedelta(minutes=10), tier="L3", rule="human_request", reply={"text": "ack"},
               state="l3_queuing")
        h.transition(b, "l1_resolved", "classifying", t0 + timedelta(minutes=10))
        h.transition(b, "classifying", "l3_queuing", t0 + timedelta(minutes=10))
        h.ticket(b, "handoff", t0 + timedelta(minutes=10), claimed=t0 + timedelta(minutes=15),
                 resolved=t0 + timedelta(minutes=35))
        h.transition(b, "l3_queuing", "l3_connected", t0 + timedelta(minutes=15), actor="handoff")
        h.transition(b, "l3_connected", "feedback_pending", t0 + timedelta(minutes=35), actor="handoff")
        h.feedback(b, 2, t0 + timedelta(minutes=36))
        h.turn(b, t0 + d, tier="L1", session=2, reply=CITED, transitions=L1_OK, state="l1_resolved")
        # C (telegram): L2 assist, the draft approved 40 minutes after it was opened
        c = h.conversation("cust-c", channel="telegram")
        t1 = NOW - d
        h.turn(c, t1, tier="L2", reply={"text": "ack"}, transitions=("classifying", "l2_assisting"),
               state="l2_assisting")
        h.ticket(c, "assist", t1, claimed=t1 + timedelta(minutes=10), resolved=t1 + timedelta(minutes=40))
        h.transition(c, "l2_assisting", "l2_resolved", t1 + timedelta(minutes=40), actor="handoff")
        # D: a big refund goes to a person; still queued, past its SLA
        dd = h.conversation("cust-d")
        h.turn(dd, NOW - 4 * d, tier="L3", rule="refund_amount", reply={"text": "ack"},
               transitions=("classifying", "l3_queuing"), state="l3_queuing")
        h.ticket(dd, "handoff", NOW - 4 * d, breached=NOW - 4 * d + timedelta(hours=1))
        # E: STOP only (the harness answered; nothing routed)
        e = h.conversation("cust-e", channel="sms")
        h.turn(e, NOW - 5 * d, tier=None, reply={"text": "unsubscribed"})
        # F: ten days ago, outside the window: an uncited L1 answer and a rating that must not count
        f = h.conversation("cust-f")
        h.turn(f, NOW - 10 * d, tier="L1", reply={"text": "no citation", "citations": []}, transitions=L1_OK)
        h.feedback(f, 1, NOW - 10 * d)
    return pool


def test_report_figures(seeded):
    with seeded.connection() as conn:
        r = build_report(conn, NOW - timedelta(days=7), NOW + timedelta(seconds=1))
    v = r["volume"]
    assert (v["sessions"], v["routed_sessions"], v["conversations"], v["turns"], v["inbound_messages"]) == (6, 5, 5, 7, 7)
    assert v["turns_by_tier"] == {"L1": 3, "L2": 1, "L3": 2, "none": 1}
    assert v["sessions_by_channel"] == {"sms": 1, "telegram": 1, "web": 4}
    # A and B's second session: answered by the bot alone
    assert r["auto_resolution"] == {"sessions": 2, "rate": 0.4}
    assert r["transfer"] == {"sessions": 2, "rate": 0.4}          # B (asked for a person) and D (refund)
    assert r["assist"] == {"sessions": 1, "rate": 0.2}            # C
    assert r["escalations_by_rule"] == {"human_request": 1, "refund_amount": 1}
    # resolved: A, B1, B2, C; B1 is followed by B2 a day later, so it was not first-contact
    fcr = r["first_contact_resolution"]
    assert (fcr["resolved_sessions"], fcr["sessions"], fcr["rate"]) == (4, 3, 0.6)
    h = r["handling"]
    assert h["tickets_resolved"] == 2
    assert h["average_handling_seconds"] == (20 * 60 + 30 * 60) / 2
    assert h["average_wait_seconds"] == (5 * 60 + 10 * 60) / 2
    assert h["by_kind"]["handoff"]["average_handling_seconds"] == 20 * 60
    assert h["by_kind"]["assist"]["average_handling_seconds"] == 30 * 60
    assert r["tickets"] == {"opened": {"assist": 1, "handoff": 2}, "sla_breached": 1}
    assert r["csat"] == {"responses": 2, "average": 3.5, "satisfied_rate": 0.5,
                         "distribution": {"1": 0, "2": 1, "3": 0, "4": 0, "5": 1}}
    assert r["l1_answers"] == {"total": 3, "without_citation": 0, "examples_without_citation": []}
    assert r["checks"] == {"l1_answers_cited": True, "knowledge_updates_applied": True}
    assert r["knowledge_base"] == {"refused_updates": 0, "refused_updates_total": 0, "latest_refusal": None}
    assert sum(day["sessions"] for day in r["daily"]) == 6
    # a shorter re-contact window makes B's first session first-contact resolved
    with seeded.connection() as conn:
        r12 = build_report(conn, NOW - timedelta(days=7), NOW + timedelta(seconds=1),
                           recontact_window=timedelta(hours=12))
    assert r12["first_contact_resolution"]["sessions"] == 4
    # a window of ten and a half days takes in F: its answer had no citation
    with seeded.connection() as conn:
        r10 = build_report(conn, NOW - timedelta(days=10, hours=12), NOW + timedelta(seconds=1))
    assert r10["l1_answers"]["without_citation"] == 1 and r10["checks"]["l1_answers_cited"] is False
    assert r10["csat"]["responses"] == 3


def test_channel_keys_are_the_registry_and_other(seeded, dsn, monkeypatch, tmp_path):
    """A legacy or client-chosen channel string stored on old rows (a phone number, a typo) is counted as
    ``other``: never a key of the report."""
    with seeded.connection() as conn, conn.transaction():
        h = History(conn)
        for name in ("+8613812345678", "Web ", "legacy-portal"):
            h.turn(h.conversation(f"cust-{name}", channel=name), NOW - timedelta(hours=3), tier="L1", reply=CITED,
                   transitions=L1_OK, state="l1_resolved")
    from router.cli import app as cli
    from router.channels.registry import CHANNELS

    with seeded.connection() as conn:
        r = build_report(conn, NOW - timedelta(days=7), NOW + timedelta(seconds=1), channels=CHANNELS)
    assert r["volume"]["sessions_by_channel"] == {"other": 3, "sms": 1, "telegram": 1, "web": 4}
    deflection = r["deflection"]["by_channel"]
    assert set(deflection) == {"other", "sms", "telegram", "web"}
    assert sum(deflection["other"].values()) == 3
    assert "13812345678" not in json.dumps(r)
    # the command keys by the registry
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    out = CliRunner().invoke(cli, ["report", "--json", "--since", "7d"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["volume"]["sessions_by_channel"]["other"] == 3 and "legacy-portal" not in out.output
    assert "13812345678" not in out.output


def test_charts_are_valid_pngs(seeded, tmp_path):
    with seeded.connection() as conn:
        r = build_report(conn, NOW - timedelta(days=7), NOW + timedelta(seconds=1))
    paths = write_charts(r, tmp_path / "charts")
    assert {p.name for p in paths} == {"outcomes.png", "daily_rates.png", "escalations.png", "csat.png"}
    for p in paths:
        with Image.open(p) as img:
            img.verify()
        with Image.open(p) as img:
            assert img.format == "PNG" and img.size[0] > 300 and img.size[1] > 200
            # not a blank canvas: a chart has many colours
            assert len(img.convert("RGB").getcolors(maxcolors=1 << 16) or range(1 << 16)) > 10
    assert json.loads((tmp_path / "charts" / "report.json").read_text())["transfer"]["sessions"] == 2


def test_empty_window_has_no_rates(pool, tmp_path):
    with pool.connection() as conn:
        r = build_report(conn, NOW - timedelta(days=1), NOW)
    assert r["volume"]["sessions"] == 0 and r["auto_resolution"]["rate"] is None and r["csat"]["average"] is None
    assert len(write_charts(r, tmp_path)) == 4   # charts still render, saying there is nothing


def test_cli_json_and_charts(seeded, dsn, tmp_path, monkeypatch):
    from router.cli import app

    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", dsn)
    monkeypatch.setenv("SWITCHBOARD_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    res = runner.invoke(app, ["report", "--since", "7d", "--json", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["auto_resolution"]["rate"] == 0.4 and data["csat"]["average"] == 3.5
    assert len(data["charts"]) == 4 and all((tmp_path / "out" / n).is_file() for n in ("csat.png", "report.json"))
    text = runner.invoke(app, ["report", "--since", "7d"])
    assert text.exit_code == 0 and "auto-resolution     40.0%" in text.stdout
    # the uncited answer ten days ago fails the check
    res = runner.invoke(app, ["report", "--since", "11d", "--check", "--json"])
    assert res.exit_code == 3 and json.loads(res.stdout)["l1_answers"]["without_citation"] == 1
    bad = runner.invoke(app, ["report", "--since", "yesterday", "--json"])
    assert bad.exit_code == 2 and "duration" in json.loads(bad.stdout)["error"]


def test_parse_since():
    now = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
    assert parse_since("7d", now=now) == now - timedelta(days=7)
    assert parse_since("24h", now=now) == now - timedelta(hours=24)
    assert parse_since("2w", now=now) == now - timedelta(weeks=2)
    assert parse_since("2026-11-01", now=now) == datetime(2026, 11, 1, tzinfo=timezone.utc)
    for bad in ("0d", "7x", "", "-1d"):
        with pytest.raises(ValueError):
            parse_since(bad, now=now)


def test_only_knowledge_base_answers_need_a_citation_and_a_clarification_is_not_a_resolution(pool):
    """Small talk, a workflow's reply and a clarification carry no citation and fail no check; a session
    whose only reply asked for an order number is clarified, not auto-resolved."""
    at = NOW - timedelta(hours=1)
    with pool.connection() as conn, conn.transaction():
        h = History(conn)
        h.turn(h.conversation("hi"), at, tier="L1", reply={"text": "Hello!"}, outcome="resolved",
               explanation={"served": "reply greeting"})
        h.turn(h.conversation("flow"), at, tier="L1", reply={"text": "Refunded 30 to order 100234."},
               outcome="resolved", explanation={"workflow": {"workflow": "refund", "status": "completed"}},
               transitions=L1_OK, state="l1_resolved")
        h.turn(h.conversation("ask"), at, tier="L1", reply={"text": "What is your order number?"},
               outcome="clarified", explanation={"served": "workflow order_status", "missing": ["order_number"]})
        h.turn(h.conversation("what"), at, tier=None, reply={"text": "I can help with orders, refunds..."},
               outcome="clarified", explanation={"clarify": True})
        h.turn(h.conversation("kb"), at, tier="L1", reply=CITED, outcome="resolved", transitions=L1_OK,
               state="l1_resolved")
    with pool.connection() as conn:
        r = build_report(conn, NOW - timedelta(days=1), NOW + timedelta(seconds=1))
    assert r["l1_answers"] == {"total": 1, "without_citation": 0, "examples_without_citation": []}
    assert r["checks"]["l1_answers_cited"] is True
    assert r["volume"]["routed_sessions"] == 5
    assert r["auto_resolution"] == {"sessions": 3, "rate": 0.6}     # the greeting, the refund, the KB answer
    assert r["clarified"] == {"sessions": 2, "rate": 0.4}           # the order-number question, "what can you do"
    assert "clarified only      40.0% (2)" in render_text(r) and "MUST BE 0" not in render_text(r)
    # a knowledge-base answer without a citation is still caught
    with pool.connection() as conn, conn.transaction():
        h = History(conn)
        h.n = 100   # message ids of their own
        bad = h.turn(h.conversation("bad"), at, tier="L1", reply={"text": "uncited", "citations": []},
                     outcome="resolved")
    with pool.connection() as conn:
        r = build_report(conn, NOW - timedelta(days=1), NOW + timedelta(seconds=1))
    assert r["l1_answers"]["without_citation"] == 1 and r["l1_answers"]["examples_without_citation"] == [bad]
    assert "MUST BE 0" in render_text(r)
