"""Re-running a transaction that lost a race with a concurrent one.

Postgres aborts one of two transactions that deadlock (or fail to serialise); the loser rolled back
whole, so running it again from the start is safe and usually wins at once. Every writer that can
meet such a race retries through here, with the same notion of what a lost race is.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg

T = TypeVar("T")

LOST_RACE = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


def pause(attempt: int, low: float, high: float) -> None:
    """Sleep a random moment that grows with the attempt (1-based), so the two racers part ways."""
    time.sleep(random.uniform(low, high) * attempt)


def retry_lost_races(fn: Callable[[], T], *, attempts: int, low: float, high: float,
                     on_retry: Callable[[int], None] | None = None) -> T:
    """``fn()``, run again (up to ``attempts`` runs in all) while it loses a race; the last loss is raised.

    ``on_retry(n)`` is called before run ``n`` (2, 3, ...), e.g. to log or count the retry.
    """
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except LOST_RACE:
            if attempt == attempts:
                raise
            if on_retry is not None:
                on_retry(attempt + 1)
            pause(attempt, low, high)
    raise AssertionError("unreachable")  # pragma: no cover
