"""Another gateway process's write makes this process's kept session memory of that customer stale: the notice
comes through Postgres at the write's commit (never for a rolled-back pass) and the listener drops the copy."""

from __future__ import annotations

import time

import psycopg

from automation.workflows import memory, store
from router.app.stale_memory import StaleMemoryListener


class _Gateway:
    """Stands in for a tool gateway as the cache's key (the cache keys kept memory by gateway object)."""


def _gone(tools, key, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if memory.CUSTOMERS.get(tools, key) is None:
            return True
        time.sleep(0.02)
    return False


def test_a_write_committed_elsewhere_drops_the_kept_copy_of_that_customer_only(dsn):
    tools, c4, c5 = _Gateway(), ("web", "c4", None, 1), ("web", "c5", None, 1)
    listener = StaleMemoryListener(dsn, wait_seconds=0.1).start()
    try:
        assert listener.listening.wait(10)
        for key in (c4, c5):
            memory.CUSTOMERS.put(tools, key, {"orders": [{"order_id": "100261", "status": "paid"}]})
        with psycopg.connect(dsn) as conn:          # another worker: the notice waits for its commit
            store.tell_stale(conn, [("web", "c4")])
            time.sleep(0.3)
            assert memory.CUSTOMERS.get(tools, c4) is not None
            conn.commit()
        assert _gone(tools, c4), "the committed notice did not drop the customer's kept memory"
        with psycopg.connect(dsn) as conn:          # a pass rolled back tells nobody
            store.tell_stale(conn, [("web", "c5")])
            conn.rollback()
        assert not _gone(tools, c5, seconds=1.0) and listener.heard == 1
        assert memory.stale_elsewhere("not json") is False
    finally:
        listener.stop()
        memory.CUSTOMERS.clear()


def test_stopping_wakes_the_listener_and_drops_nothing_anywhere(dsn):
    """A shutdown does not wait out the listener's wait (30 s here): an empty notice wakes it, and every other
    process's listener hears that notice without dropping anything it keeps."""
    tools, c4 = _Gateway(), ("web", "c4", None, 1)
    other = StaleMemoryListener(dsn, wait_seconds=30).start()
    stopping = StaleMemoryListener(dsn, wait_seconds=30).start()
    try:
        assert other.listening.wait(10) and stopping.listening.wait(10)
        memory.CUSTOMERS.put(tools, c4, {"orders": [{"order_id": "100261", "status": "paid"}]})
        t0 = time.monotonic()
        stopping.stop(timeout=60)
        assert time.monotonic() - t0 < 20, "stop waited out the listener's 30 s wait"
        time.sleep(0.3)
        assert memory.CUSTOMERS.get(tools, c4) is not None and other.heard == 0
    finally:
        other.stop()
        memory.CUSTOMERS.clear()
