"""Admission (docs/architecture.md, "Ingest, step by step", step 1): the flood guard that refuses a
delivery before its body is read or anything is stored, and the client address that the log names.

The guard is a token bucket per webhook (``SWITCHBOARD_INGEST_RATE`` per second, bursts of
``SWITCHBOARD_INGEST_BURST``; either 0 turns it off), in memory, per process. It is keyed by webhook,
not by client address: behind a TLS proxy every sender shares the proxy's address, and a forge does
not retry a 429, so a per-address limit would refuse real deliveries of unrelated tenants. A
webhook's URL is its sender's secret; one webhook flooded is that webhook's problem alone.

Every refusal of a known webhook is counted per webhook and reason
(``switchboard_ingest_refused_total{webhook,reason}``, never a token in a label), so an operator
sees which webhook is refused and why; 429s are also logged, at most once a minute per webhook.

``X-Forwarded-For`` is believed only from a peer in ``SWITCHBOARD_TRUSTED_PROXIES``: the client is
then the right-most address in the header that is not itself a trusted proxy (the left part of the
header is whatever the client chose to send). It names the client in the log; nothing is decided by
it.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections.abc import Iterable, Mapping

from switchboard.metrics import Metrics

log = logging.getLogger("switchboard.ingest")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

REFUSED_METRIC = "switchboard_ingest_refused_total"
# The 429 warning for one webhook is logged at most this often (with the count since the last).
RATE_LOG_SECONDS = 60.0


class RateLimiter:
    """A token bucket per key (the webhook id), in memory (per process). Generous by default: it
    is there to stop one sender from flooding the database, not to shape normal traffic. A rate or
    a burst of 0 turns it off."""

    def __init__(self, rate: float = 50.0, burst: float = 500.0, max_clients: int = 50_000) -> None:
        self.rate = rate
        self.burst = burst
        self.max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}

    @property
    def off(self) -> bool:
        return self.rate <= 0 or self.burst <= 0

    def configure(self, *, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self._buckets.clear()

    def take(self, client: str) -> float:
        """Spend one token; 0 when allowed, else the seconds until a token is available."""
        if self.off:
            return 0.0
        now = time.monotonic()
        tokens, last = self._buckets.get(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if len(self._buckets) >= self.max_clients and client not in self._buckets:
            self._prune(now)
        if tokens >= 1:
            self._buckets[client] = (tokens - 1, now)
            return 0.0
        self._buckets[client] = (tokens, now)
        return (1 - tokens) / self.rate

    def _prune(self, now: float) -> None:
        # A bucket that has refilled completely carries no state worth keeping.
        full_after = self.burst / self.rate if self.rate > 0 else math.inf
        for client, (_, last) in list(self._buckets.items()):
            if now - last >= full_after:
                del self._buckets[client]
        if len(self._buckets) >= self.max_clients:
            # Still full (a spray of keys): forget the stalest half rather than grow without bound.
            stale = sorted(self._buckets.items(), key=lambda item: item[1][1])
            for client, _ in stale[: len(stale) // 2]:
                del self._buckets[client]


class RefusalLog:
    """Counts every refusal of a known webhook, and logs its 429s without flooding the log."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        metrics.describe(REFUSED_METRIC, "counter", "Deliveries refused, by webhook and reason.")
        # webhook id -> (when the last 429 line was logged, 429s not logged since)
        self._quiet: dict[str, tuple[float, int]] = {}

    def refused(self, webhook_id: str, reason: str, client: str) -> None:
        self.metrics.inc(REFUSED_METRIC, webhook=webhook_id, reason=reason)
        if reason != "rate_limited":
            return
        now = time.monotonic()
        last, unlogged = self._quiet.get(webhook_id, (-math.inf, 0))
        if now - last < RATE_LOG_SECONDS:
            self._quiet[webhook_id] = (last, unlogged + 1)
            return
        if len(self._quiet) > 10_000:
            self._quiet.clear()
        self._quiet[webhook_id] = (now, 0)
        more = f" (and {unlogged} more since the last line)" if unlogged else ""
        log.warning("ingest refused: webhook=%s client=%s reason=rate_limited%s", webhook_id, client, more)


def _address(text: str) -> Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # "[2001:db8::1]:443"
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # "192.0.2.1:5000"
        text = text.partition(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address: Address, trusted: tuple[Network, ...]) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in trusted)


def client_address(peer: str | None, headers: Mapping[str, str], trusted: tuple[Network, ...]) -> str:
    """The client's address: the socket peer, unless the peer is a trusted proxy, then the
    right-most ``X-Forwarded-For`` hop that is not one (the first trusted proxy's own view)."""
    client = peer or "unknown"
    peer_address = _address(client)
    if not trusted or peer_address is None or not _trusted(peer_address, trusted):
        return client
    getall = getattr(headers, "getall", None)
    values = getall("X-Forwarded-For", []) if callable(getall) else [headers.get("X-Forwarded-For", "")]
    hops = [hop for value in values for hop in str(value).split(",")]
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            # Not an address: what lies left of it cannot be trusted either.
            return client
        client = str(address)
        if not _trusted(address, trusted):
            return client
    return client


class Admission:
    """What ingest admits a delivery with, besides the limiter (``INGEST_LIMITER``, which tests and
    the benchmarks reconfigure): the trusted proxies and the refusal counter."""

    def __init__(self, metrics: Metrics, trusted_proxies: Iterable[Network]) -> None:
        self.trusted = tuple(trusted_proxies)
        self.refusals = RefusalLog(metrics)

    def client(self, peer: str | None, headers: Mapping[str, str]) -> str:
        return client_address(peer, headers, self.trusted)
