"""The live event stream, over a real uvicorn server on 127.0.0.1 (SSE needs a real connection)."""

from __future__ import annotations

import json
import queue
import threading
import time

import httpx
import pytest

from handoff.service import HandoffService
from handoff_testkit import bearer, make_config
from serving_testkit import served


@pytest.fixture
def live(services, port):
    """The gateway app served by uvicorn in a thread; yields its base URL."""
    from router.app.factory import create_app

    services.handoff = HandoffService(services.pool, port, make_config())
    with served(create_app(services=services), start_timeout=20) as base:
        yield base, services.handoff


class Stream:
    """Reads an SSE stream in a thread; events land in a queue as (event, id, data)."""

    def __init__(self, url: str, token: str, headers: dict[str, str] | None = None):
        self.events: queue.Queue = queue.Queue()
        self._client = httpx.Client(timeout=httpx.Timeout(30.0, read=60.0))
        self._resp = None
        self._thread = threading.Thread(target=self._read, args=(url, {**bearer(token), **(headers or {})}),
                                        daemon=True)
        self._thread.start()

    def _read(self, url, headers):
        try:
            with self._client.stream("GET", url, headers=headers) as resp:
                self._resp = resp
                self.events.put(("status", None, resp.status_code))
                event, eid, data = None, None, []
                for line in resp.iter_lines():
                    if line == "":
                        if event or data:
                            self.events.put((event or "message", eid, json.loads("\n".join(data)) if data else None))
                        event, eid, data = None, None, []
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("id:"):
                        eid = line[3:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].strip())
        except (httpx.HTTPError, RuntimeError):
            pass

    def next(self, timeout: float = 15.0):
        return self.events.get(timeout=timeout)

    def until(self, predicate, timeout: float = 15.0) -> list:
        seen, deadline = [], time.monotonic() + timeout
        while True:
            item = self.next(max(0.01, deadline - time.monotonic()))
            seen.append(item)
            if predicate(item):
                return seen

    def close(self):
        self._client.close()


def test_stream_delivers_queue_changes_for_your_teams_and_replays(live, hs, open_ticket, make_agent):
    bill_agent, bill = make_agent("bill", teams=("billing",))
    url = f"{live[0]}/v1/handoff/events"
    s = Stream(url, bill)
    try:
        assert s.next() == ("status", None, 200)
        kind, _, ready = s.next()
        assert kind == "ready" and ready["teams"] == ["billing"]
        care = open_ticket(team="care")                      # not bill's team: never shown to him
        t = open_ticket(team="billing", priority="urgent")
        hs.claim(bill_agent, t["id"])
        got = s.until(lambda e: e[0] == "ticket" and e[2]["action"] == "claimed")
        ids = [eid for kind, eid, _ in got if kind == "ticket"]
        tickets = [data for kind, _, data in got if kind == "ticket"]
        assert [(x["ticket_id"], x["action"]) for x in tickets] == [(t["id"], "opened"), (t["id"], "claimed")]
        assert tickets[1]["claimed_by"] == bill_agent.id and tickets[1]["status"] == "claimed"
        assert tickets[0]["priority"] == "urgent" and tickets[0]["team"] == "billing"
        assert care["id"] not in {x["ticket_id"] for x in tickets}
        assert [int(i) for i in ids] == [x["id"] for x in tickets]
        first_id = ids[0]
    finally:
        s.close()

    # a screen that reconnects with Last-Event-ID gets what happened after that event
    hs.release(bill_agent, t["id"], reason="lunch")
    again = Stream(url, bill, headers={"Last-Event-ID": first_id})
    try:
        assert again.next()[2] == 200
        assert again.next()[0] == "ready"
        replayed = again.until(lambda e: e[0] == "ticket" and e[2]["action"] == "released")
        actions = [e[2]["action"] for e in replayed if e[0] == "ticket"]
        assert actions == ["claimed", "released"]
        assert all(e[2].get("replayed") for e in replayed if e[0] == "ticket")
    finally:
        again.close()


def test_many_screens_share_one_listener(live, hs, open_ticket, make_agent):
    url, service = live
    _, sue = make_agent("sue", role="supervisor")
    streams = [Stream(f"{url}/v1/handoff/events", sue) for _ in range(3)]
    try:
        for s in streams:
            assert s.next()[2] == 200 and s.next()[0] == "ready"
        t = open_ticket(team="anything")
        for s in streams:
            kind, eid, data = s.next()
            assert kind == "ticket" and data["ticket_id"] == t["id"] and data["action"] == "opened" and eid
        assert service.hub.subscribers == 3
    finally:
        for s in streams:
            s.close()


def test_stream_needs_a_token(live):
    r = httpx.get(f"{live[0]}/v1/handoff/events", timeout=10)
    assert r.status_code == 401 and r.headers["content-type"].startswith("application/problem+json")
    r = httpx.get(f"{live[0]}/v1/handoff/events", headers={"Authorization": "Bearer sbt_x", "Last-Event-ID": "x"},
                  timeout=10)
    assert r.status_code == 401


def test_a_ticket_transferred_away_is_announced_to_the_team_it_left(live, hs, open_ticket, make_agent):
    _, bill = make_agent("bill", teams=("billing",))
    sue, _ = make_agent("sue", role="supervisor")
    make_agent("cy", teams=("care",))                 # a transfer goes only to a team someone works in
    s = Stream(f"{live[0]}/v1/handoff/events", bill)
    try:
        assert s.next()[2] == 200 and s.next()[0] == "ready"
        t = open_ticket(team="billing")
        hs.transfer(sue, t["id"], team="care", note="not a billing question")
        later = open_ticket(team="billing")
        got = s.until(lambda e: e[0] == "ticket" and e[2]["ticket_id"] == later["id"])
        seen = [(d["ticket_id"], d["action"], d["team"], d["from_team"]) for k, _, d in got if k == "ticket"]
        assert seen == [(t["id"], "opened", "billing", None), (t["id"], "transferred", "care", "billing"),
                        (later["id"], "opened", "billing", None)]
    finally:
        s.close()
