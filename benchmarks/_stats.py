"""Percentiles for the benchmarks' figures: one definition, so "p95" means the same in every report.

Nearest rank on the sorted samples (a value some request really had), as load-testing tools report it.
A module of its own (leading underscore: benchmarks/run_all.py does not run it).
"""

from __future__ import annotations

from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, by nearest rank."""
    if not values:
        raise ValueError("no samples")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def ms(seconds: Sequence[float], q: float, digits: int = 3) -> float:
    """The ``q``-th percentile of durations in seconds, in milliseconds."""
    return round(percentile(seconds, q) * 1000, digits)
