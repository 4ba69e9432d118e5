"""Per-channel token buckets: the dispatcher claims no more rows than a channel may take now."""

from __future__ import annotations

import threading
import time


class TokenBucket:
    """``rate`` tokens per second, holding at most ``capacity`` (the burst; default one second's worth)."""

    def __init__(self, rate: float, capacity: float | None = None, clock=time.monotonic):
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = float(rate)
        self.capacity = float(capacity if capacity is not None else max(1.0, rate))
        self._clock = clock
        self._tokens = self.capacity
        self._at = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def available(self) -> int:
        with self._lock:
            self._refill()
            return int(self._tokens)

    def take(self, n: int = 1) -> bool:
        with self._lock:
            self._refill()
            if self._tokens + 1e-9 < n:
                return False
            self._tokens -= n
            return True


class ChannelLimits:
    """One bucket per channel; channels not configured get ``default_rate``."""

    def __init__(self, rates: dict[str, float], default_rate: float = 20.0, clock=time.monotonic):
        self._rates = dict(rates)
        self._default = default_rate
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()

    def bucket(self, channel: str) -> TokenBucket:
        with self._lock:
            if channel not in self._buckets:
                self._buckets[channel] = TokenBucket(self._rates.get(channel, self._default), clock=self._clock)
            return self._buckets[channel]

    def channels(self) -> set[str]:
        return set(self._rates)

    def any_exhausted(self) -> bool:
        with self._lock:
            buckets = list(self._buckets.values())
        return any(b.available() == 0 for b in buckets)

    def budgets(self, channels) -> dict[str, int]:
        return {ch: self.bucket(ch).available() for ch in channels}
