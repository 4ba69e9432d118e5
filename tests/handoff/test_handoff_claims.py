"""Claims on the real Postgres: queue order, teams and skills, concurrency, leases, sweeps, state."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import psycopg
import pytest

from handoff.errors import Conflict, Forbidden, Invalid
from handoff.service import SWEEP_LOCK_KEY, HandoffService
from handoff_testkit import TablePort, conversation_state, events_of, make_config, port_calls


def test_claim_next_takes_priority_then_sla_then_age(pool, port, hs, open_ticket, make_agent):
    agent, _ = make_agent("ana")
    low = open_ticket(priority="low")
    normal_old = open_ticket(priority="normal")
    normal_new = open_ticket(priority="normal")
    urgent = open_ticket(priority="urgent")
    high = open_ticket(priority="high")
    # same priority, younger, but an earlier SLA deadline (tighter policy on another pod): it goes first
    tight = HandoffService(pool, port, make_config(sla_seconds={"normal": 60}))
    normal_tight = open_ticket(service=tight, priority="normal")
    order = [hs.claim_next(agent)["id"] for _ in range(6)]
    assert order == [urgent["id"], high["id"], normal_tight["id"], normal_old["id"], normal_new["id"], low["id"]]
    assert hs.claim_next(agent) is None


def test_agents_get_only_their_teams_skills_and_kinds(hs, open_ticket, make_agent):
    billing, _ = make_agent("bill", teams=("billing",))
    zh_care, _ = make_agent("zhou", teams=("care",), skills=("zh",))
    sup, _ = make_agent("sue", role="supervisor", teams=("general",))
    care_zh = open_ticket(team="care", skills=["zh"], priority="urgent")
    care_assist = open_ticket(team="care", kind="assist", draft={"text": "d"})
    bill = open_ticket(team="billing")
    with pytest.raises(Forbidden):
        hs.claim_next(billing, team="care")
    assert hs.claim_next(billing)["id"] == bill["id"]
    assert hs.claim_next(billing) is None
    assert hs.claim_next(zh_care, kind="assist")["id"] == care_assist["id"]
    assert hs.claim_next(zh_care)["id"] == care_zh["id"]
    other = open_ticket(team="care", skills=["fr"])
    assert hs.claim_next(zh_care) is None                    # lacks the skill
    with pytest.raises(Forbidden):
        hs.claim(zh_care, other["id"])
    assert hs.claim_next(sup)["id"] == other["id"]          # supervisors work across teams


def test_concurrent_claimers_never_share_and_lose_nothing(dsn, port, open_ticket, make_agent):
    from router.db import open_pool

    n_tickets, n_claimers = 300, 16
    with open_pool(dsn, min_size=4, max_size=n_claimers) as pool16:
        svc = HandoffService(pool16, port, make_config())
        with pool16.connection() as conn, conn.transaction():
            for i in range(n_tickets):
                svc.open_ticket(conn, kind="handoff", conversation_id=f"conv-{i}", channel="web",
                                customer_id=f"u{i}", reason="asks_for_human", context={},
                                priority=("urgent", "high", "normal", "low")[i % 4])
        agents = [make_agent(f"a{i}")[0] for i in range(n_claimers)]
        got: dict[str, list[str]] = {a.name: [] for a in agents}
        barrier = threading.Barrier(n_claimers)
        errors: list[BaseException] = []

        def work(agent):
            try:
                barrier.wait()
                while (t := svc.claim_next(agent)) is not None:
                    got[agent.name].append(t["id"])
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(a,)) for a in agents]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert not errors
        claimed = [tid for ids in got.values() for tid in ids]
        assert len(claimed) == n_tickets                      # none lost
        assert len(set(claimed)) == n_tickets                 # none claimed twice
        assert sum(1 for ids in got.values() if ids) > 1      # really concurrent
        with pool16.connection() as conn:
            rows = conn.execute("SELECT status, count(*) AS n FROM tickets GROUP BY status").fetchall()
            assert {r["status"]: r["n"] for r in rows} == {"claimed": n_tickets}
            per_ticket = conn.execute(
                "SELECT ticket_id, count(*) AS n FROM ticket_events WHERE action = 'claimed' GROUP BY ticket_id"
            ).fetchall()
            assert len(per_ticket) == n_tickets and {r["n"] for r in per_ticket} == {1}
            holders = conn.execute("SELECT id::text AS id, claimed_by::text AS agent FROM tickets").fetchall()
        by_name = {a.id: a.name for a in agents}
        assert all(r["id"] in got[by_name[r["agent"]]] for r in holders)


def test_claim_given_heartbeat_and_conflicts(pool, hs, open_ticket, make_agent):
    ana, _ = make_agent("ana")
    ben, _ = make_agent("ben")
    t = open_ticket()
    first = hs.claim(ana, t["id"])
    assert first["status"] == "claimed" and first["claimed_by"] == ana.id
    again = hs.claim(ana, t["id"])                          # a retry renews the lease
    assert again["lease_expires_at"] >= first["lease_expires_at"]
    with pytest.raises(Conflict):
        hs.claim(ben, t["id"])
    hb = hs.heartbeat(ana, t["id"])
    assert hb["lease_expires_at"] >= again["lease_expires_at"]
    with pytest.raises(Conflict):
        hs.heartbeat(ben, t["id"])
    assert [e["action"] for e in events_of(pool, t["id"])] == ["opened", "claimed"]


def test_expired_lease_goes_back_to_the_queue_with_an_event(pool, port, open_ticket, make_agent, conversation):
    svc = HandoffService(pool, port, make_config(lease_seconds=0.4))
    ana, _ = make_agent("ana")
    ben, _ = make_agent("ben")
    conv = conversation()
    t = open_ticket(service=svc, conversation_id=conv)
    svc.claim(ana, t["id"])
    assert conversation_state(pool, conv) == "l3_connected"
    assert svc.run_sweeps()["requeued"] == 0                 # not yet expired
    time.sleep(0.6)
    result = svc.run_sweeps()
    assert result["leader"] and result["requeued_ids"] == [t["id"]]
    ev = events_of(pool, t["id"])[-1]
    assert ev["action"] == "lease_expired" and ev["actor"] == "system:lease-sweeper"
    assert ev["payload"]["previous_agent"] == ana.id
    assert conversation_state(pool, conv) == "l3_queuing"
    with pytest.raises(Conflict):
        svc.heartbeat(ana, t["id"])                          # the lease is lost, and ana is told so
    assert svc.claim_next(ben)["id"] == t["id"]              # nothing lost: the next agent gets it


def test_heartbeats_keep_a_lease_alive(pool, port, open_ticket, make_agent):
    svc = HandoffService(pool, port, make_config(lease_seconds=0.6))
    ana, _ = make_agent("ana")
    t = open_ticket(service=svc)
    svc.claim(ana, t["id"])
    for _ in range(3):
        time.sleep(0.3)
        svc.heartbeat(ana, t["id"])
        assert svc.run_sweeps()["requeued"] == 0
    assert svc.get_ticket(ana, t["id"])["claimed_by"] == ana.id


def test_only_one_sweeper_at_a_time(dsn, hs):
    with psycopg.connect(dsn, autocommit=True) as other_pod:
        other_pod.execute("SELECT pg_advisory_lock(%s)", (SWEEP_LOCK_KEY,))
        assert hs.run_sweeps()["leader"] is False
        other_pod.execute("SELECT pg_advisory_unlock(%s)", (SWEEP_LOCK_KEY,))
    assert hs.run_sweeps()["leader"] is True


def test_overdue_tickets_rise_in_priority_and_breaches_are_counted(pool, port, open_ticket, make_agent):
    svc = HandoffService(pool, port, make_config(sla_seconds={"normal": 1, "high": 1, "urgent": 300}))
    sup, _ = make_agent("sue", role="supervisor")
    t = open_ticket(service=svc, priority="normal")
    held = open_ticket(service=svc, priority="normal")
    svc.claim(sup, held["id"])                               # claimed in time: its SLA is met
    time.sleep(1.1)
    svc.run_sweeps()
    after = svc.get_ticket(sup, t["id"])
    assert after["priority"] == "high" and after["sla_breaches"] == 1
    assert after["sla_due_at"] > t["sla_due_at"]
    time.sleep(1.1)
    svc.run_sweeps()
    after = svc.get_ticket(sup, t["id"])
    assert after["priority"] == "urgent" and after["sla_breaches"] == 2
    assert svc.get_ticket(sup, held["id"])["sla_breaches"] == 0
    stats = svc.stats(sup)
    assert stats["sla_breaches_24h"] == 2 and stats["breached_open"] == 1
    assert stats["queued_by_priority"] == {"urgent": 1}
    breaches = [e for e in events_of(pool, t["id"]) if e["action"] == "sla_breached"]
    assert [e["payload"]["priority"] for e in breaches] == ["high", "urgent"]


def test_conversation_state_follows_the_ticket(pool, hs, open_ticket, make_agent, conversation):
    ana, _ = make_agent("ana")
    conv = conversation()
    t = open_ticket(conversation_id=conv)
    hs.claim(ana, t["id"])
    assert conversation_state(pool, conv) == "l3_connected"
    hs.release(ana, t["id"], reason="break")
    assert conversation_state(pool, conv) == "l3_queuing"
    hs.claim(ana, t["id"])
    hs.resolve(ana, t["id"], outcome="solved", note="refund issued")
    assert conversation_state(pool, conv) == "feedback_pending"
    assert port_calls(pool, t["id"]) == ["on_ticket_claimed", "on_ticket_requeued", "on_ticket_claimed",
                                         "on_ticket_resolved"]
    with pytest.raises(Conflict):
        hs.claim(ana, t["id"])                               # resolved stays resolved

    conv2 = conversation()
    t2 = open_ticket(conversation_id=conv2)
    hs.claim(ana, t2["id"])
    back = hs.return_to_bot(ana, t2["id"], note="bot can handle the tracking question")
    assert back["status"] == "returned_to_bot" and back["resolved_by"] == ana.id
    assert conversation_state(pool, conv2) == "idle"


def test_the_state_change_shares_the_ticket_transaction(pool, open_ticket, make_agent, conversation):
    class BrokenPort(TablePort):
        def on_ticket_claimed(self, conn, ticket):
            super().on_ticket_claimed(conn, ticket)
            raise RuntimeError("conversation side failed")

    svc = HandoffService(pool, BrokenPort(), make_config())
    ana, _ = make_agent("ana")
    conv = conversation()
    t = open_ticket(service=svc, conversation_id=conv)
    with pytest.raises(RuntimeError):
        svc.claim_next(ana)
    assert svc.get_ticket(ana, t["id"])["status"] == "queued"       # rolled back together
    assert conversation_state(pool, conv) == "l3_queuing"
    assert [e["action"] for e in events_of(pool, t["id"])] == ["opened"]


def test_transfer_to_team_and_to_agent(pool, hs, open_ticket, make_agent):
    ana, _ = make_agent("ana", teams=("general",))
    bill, _ = make_agent("bill", teams=("billing",))
    t = open_ticket()
    hs.claim(ana, t["id"])
    with pytest.raises(Invalid):
        hs.transfer(ana, t["id"], to_agent="bill")             # bill is not in the ticket's team
    moved = hs.transfer(ana, t["id"], team="billing", note="refund question")
    assert moved["status"] == "queued" and moved["team"] == "billing" and moved["requeues"] == 1
    with pytest.raises(Forbidden):
        hs.get_ticket(ana, t["id"])                          # ana no longer sees it
    assert hs.claim_next(bill)["id"] == t["id"]
    sup, _ = make_agent("sue", role="supervisor")
    handed = hs.transfer(bill, t["id"], to_agent="sue")
    assert handed["status"] == "claimed" and handed["claimed_by"] == sup.id
    actions = [(e["action"], e["actor"]) for e in events_of(pool, t["id"])]
    assert ("transferred", "agent:ana") in actions and ("transferred", "agent:bill") in actions


def test_disabling_an_agent_requeues_their_tickets(pool, port, hs, open_ticket, make_agent, conversation):
    from handoff import agents

    ana, token = make_agent("ana")
    conv = conversation()
    t = open_ticket(conversation_id=conv)
    hs.claim(ana, t["id"])
    assert conversation_state(pool, conv) == "l3_connected"
    with pool.connection() as conn:
        out = agents.disable_agent(conn, "ana", actor="cli:test", port=port)
    assert out["requeued"] == [t["id"]]
    assert conversation_state(pool, conv) == "l3_queuing"      # the customer waits in the queue again
    assert port_calls(pool, t["id"])[-1] == "on_ticket_requeued"
    assert hs.authenticate(token) is None
    ev = events_of(pool, t["id"])[-1]
    assert ev["action"] == "agent_disabled" and ev["actor"] == "cli:test"


def test_events_record_every_actor(pool, hs, open_ticket, make_agent):
    ana, _ = make_agent("ana")
    sup, _ = make_agent("sue", role="supervisor")
    t = open_ticket()
    hs.claim(ana, t["id"])
    hs.release(sup, t["id"], reason="rebalancing")              # supervisors may release others' tickets
    hs.claim(ana, t["id"])
    hs.resolve(sup, t["id"], outcome="duplicate")
    trail = [(e["action"], e["actor"]) for e in events_of(pool, t["id"])]
    assert trail == [("opened", "bot"), ("claimed", "agent:ana"), ("released", "agent:sue"),
                     ("claimed", "agent:ana"), ("resolved", "agent:sue")]
    counts = Counter(a for a, _ in trail)
    assert counts["claimed"] == 2


def test_agent_actions_and_router_turns_lock_in_the_same_order(pool, hs, open_ticket, make_agent, conversation,
                                                              caplog):
    """A turn holds the conversation and then touches its ticket; an agent acting on the ticket meanwhile
    waits for the conversation first instead of deadlocking with the turn."""
    caplog.set_level(logging.INFO, logger="handoff.service")
    ana, _ = make_agent("ana")
    conv = conversation()
    t = open_ticket(conversation_id=conv)
    turn_has_lock, results, errors = threading.Event(), [], []

    def router_turn():
        try:
            with pool.connection() as conn, conn.transaction():
                conn.execute("SELECT 1 FROM conversations WHERE id = %s FOR UPDATE", (conv,))
                turn_has_lock.set()
                time.sleep(0.4)                                     # the agent acts now
                hs.add_customer_message(conn, t["id"], "hello?")
                joined = hs.open_ticket(conn, kind="handoff", conversation_id=conv, channel="web",
                                        customer_id="u1", reason="complaint", context={})
                results.append(("turn", joined["id"]))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def agent():
        try:
            turn_has_lock.wait(5)
            results.append(("claim", hs.claim(ana, t["id"])["id"]))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=router_turn), threading.Thread(target=agent)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not errors
    assert results == [("turn", t["id"]), ("claim", t["id"])]    # the claim waited for the turn
    final = hs.get_ticket(ana, t["id"])
    assert final["status"] == "claimed" and final["priority"] == "high"
    assert [e["action"] for e in events_of(pool, t["id"])] == ["opened", "customer_message", "escalated", "claimed"]
    assert "deadlock" not in caplog.text                         # no retry was needed
