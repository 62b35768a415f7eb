"""Admission (SPEC §4 step 1): the flood guard that refuses a delivery before anything is read or
stored."""

from __future__ import annotations

import math
import time


class RateLimiter:
    """A token bucket per client IP, in memory (per process). Generous by default: it is there to
    stop one sender from flooding the database, not to shape normal traffic."""

    def __init__(self, rate: float = 50.0, burst: float = 500.0, max_clients: int = 50_000) -> None:
        self.rate = rate
        self.burst = burst
        self.max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}

    def configure(self, *, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self._buckets.clear()

    def take(self, client: str) -> float:
        """Spend one token; 0 when allowed, else the seconds until a token is available."""
        now = time.monotonic()
        tokens, last = self._buckets.get(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if len(self._buckets) >= self.max_clients and client not in self._buckets:
            self._prune(now)
        if tokens >= 1:
            self._buckets[client] = (tokens - 1, now)
            return 0.0
        self._buckets[client] = (tokens, now)
        return (1 - tokens) / self.rate if self.rate > 0 else 3600.0

    def _prune(self, now: float) -> None:
        # A bucket that has refilled completely carries no state worth keeping.
        full_after = self.burst / self.rate if self.rate > 0 else math.inf
        for client, (_, last) in list(self._buckets.items()):
            if now - last >= full_after:
                del self._buckets[client]
        if len(self._buckets) >= self.max_clients:
            # Still full (an address spray): forget the stalest half rather than grow without bound.
            stale = sorted(self._buckets.items(), key=lambda item: item[1][1])
            for client, _ in stale[: len(stale) // 2]:
                del self._buckets[client]
