"""Properties of the queue over generated inputs (hypothesis), on the real Postgres."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handoff.models import PRIORITIES
from handoff.service import HandoffService
from handoff_testkit import make_config

_team_ids = itertools.count()
SLA_CHOICES = {"fast": {"urgent": 60, "high": 120, "normal": 180, "low": 240},
               "slow": {"urgent": 600, "high": 1200, "normal": 1800, "low": 2400}}

tickets_strategy = st.lists(
    st.tuples(st.sampled_from(PRIORITIES), st.sampled_from(sorted(SLA_CHOICES))), min_size=1, max_size=12)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=tickets_strategy, page=st.integers(min_value=1, max_value=5))
def test_claims_and_pages_follow_queue_order(pool, port, make_agent, specs, page):
    team = f"t{next(_team_ids)}"
    services = {name: HandoffService(pool, port, make_config(sla_seconds=sla)) for name, sla in SLA_CHOICES.items()}
    opened = []
    for i, (priority, sla) in enumerate(specs):
        with pool.connection() as conn, conn.transaction():
            opened.append(services[sla].open_ticket(
                conn, kind="handoff", conversation_id=f"{team}-{i}", channel="web", customer_id="u",
                reason="asks_for_human", priority=priority, team=team, context={}))
    expected = [t["id"] for t in sorted(opened, key=lambda t: (PRIORITIES.index(t["priority"]), t["sla_due_at"],
                                                               t["created_at"], t["id"]))]
    agent, _ = make_agent(f"a{team}", teams=(team,))
    svc = services["fast"]

    paged, cursor = [], None
    while True:
        items, cursor = svc.list_tickets(agent, limit=page, cursor=cursor)
        paged += [t["id"] for t in items]
        if cursor is None:
            break
    assert paged == expected

    claimed = []
    while (t := svc.claim_next(agent)) is not None:
        claimed.append(t["id"])
    assert claimed == expected


@settings(max_examples=200, deadline=None)
@given(amount=st.decimals(min_value=0, max_value=100000, places=2))
def test_approval_level_is_the_lowest_tier_covering_the_amount(amount):
    config = make_config()
    level = config.required_level(amount)
    limits = {"auto": 50, "supervisor": 500, "manager": 2000}
    covering = [lvl for lvl, top in limits.items() if amount <= top]
    assert level == (covering[0] if covering else "director")
