"""A small Prometheus registry: counters and histograms, rendered in the text exposition format.

Label values are ours (states, kinds, error classes), never payload text or secrets.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict

DEFAULT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# Deliveries per group-commit transaction: 1 when idle, up to the writer's 256 under load.
BATCH_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)

Labels = tuple[tuple[str, str], ...]


def _labels(labels: dict[str, str]) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


# Label sets remembered as given (``Metrics._series``): about as many as there are series.
SERIES_KEYS_KEPT = 4096


def _num(value: float) -> str:
    """A sample's value exactly: ``:g`` kept six significant digits, so a counter past a million
    moved in steps (1234567 and 1234568 both read 1.23457e+06) and ``rate()`` read nothing."""
    if value != value:
        return "NaN"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _fmt(labels: Labels, extra: tuple[tuple[str, str], ...] = ()) -> str:
    pairs = labels + extra
    if not pairs:
        return ""
    escaped = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for _, v in pairs)
    return "{" + ",".join(f'{k}="{v}"' for (k, _), v in zip(pairs, escaped, strict=True)) + "}"


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._help: dict[str, tuple[str, str]] = {}
        self._counters: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
        self._hist: dict[str, dict[Labels, list[float]]] = defaultdict(dict)
        self._hist_buckets: dict[str, tuple[float, ...]] = {}
        self._keys: dict[tuple[tuple[str, object], ...], Labels] = {}

    def _series(self, labels: dict[str, str]) -> Labels:
        """``labels`` as a series key (sorted by name, values as text), remembered by the set as a
        caller passes it: sorting them on every call was most of a counter's cost, and every
        ingested delivery counts two (issue 12)."""
        given = tuple(labels.items())
        try:
            key = self._keys.get(given)
        except TypeError:  # a value that cannot be a dictionary key: sorted on each call
            return _labels(labels)
        if key is None:
            key = _labels(labels)
            if len(self._keys) < SERIES_KEYS_KEPT:
                self._keys[given] = key
        return key

    def describe(self, name: str, kind: str, text: str, buckets: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        self._help[name] = (kind, text)
        if kind == "histogram":
            self._hist_buckets[name] = buckets

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        with self._lock:
            self._counters[name][self._series(labels)] += amount

    def observe(self, name: str, value: float, **labels: str) -> None:
        buckets = self._hist_buckets.get(name, DEFAULT_BUCKETS)
        with self._lock:
            # Per bucket counts, then +Inf count, then sum.
            series = self._hist[name].setdefault(self._series(labels), [0.0] * (len(buckets) + 2))
            series[bisect.bisect_left(buckets, value)] += 1
            series[-1] += value

    def value(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._counters.get(name, {}).get(self._series(labels), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for name in sorted(set(self._help) | set(self._counters) | set(self._hist)):
                kind, text = self._help.get(name, ("counter", name))
                lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
                for labels, value in sorted(self._counters.get(name, {}).items()):
                    lines.append(f"{name}{_fmt(labels)} {_num(value)}")
                buckets = self._hist_buckets.get(name, DEFAULT_BUCKETS)
                for labels, series in sorted(self._hist.get(name, {}).items()):
                    running = 0.0
                    for bound, count in zip(buckets, series, strict=False):
                        running += count
                        lines.append(f"{name}_bucket{_fmt(labels, (('le', f'{bound:g}'),))} {_num(running)}")
                    running += series[len(buckets)]
                    lines.append(f"{name}_bucket{_fmt(labels, (('le', '+Inf'),))} {_num(running)}")
                    lines.append(f"{name}_count{_fmt(labels)} {_num(running)}")
                    lines.append(f"{name}_sum{_fmt(labels)} {_num(series[-1])}")
        return "\n".join(lines) + "\n"


def standard() -> Metrics:
    """The registry with every metric Switchboard exports described up front."""
    m = Metrics()
    m.describe("switchboard_ingest_total", "counter", "Webhook deliveries by source, status and disposition.")
    m.describe("switchboard_ingest_seconds", "histogram", "Time from request to acknowledgement.")
    m.describe(
        "switchboard_ingest_transactions_total",
        "counter",
        "Ingest's group-commit transactions, by outcome (committed, unavailable, failed).",
    )
    m.describe(
        "switchboard_ingest_batch_deliveries",
        "histogram",
        "Deliveries stored by one committed group-commit transaction.",
        buckets=BATCH_BUCKETS,
    )
    m.describe(
        "switchboard_ingest_commit_seconds", "histogram", "Time one committed group-commit transaction took."
    )
    m.describe("switchboard_todos_created_total", "counter", "Todos minted, by source.")
    m.describe("switchboard_todo_transitions_total", "counter", "Todo verbs applied, by verb.")
    m.describe("switchboard_doorbells_total", "counter", "Doorbell rings, by outcome.")
    m.describe("switchboard_doorbell_seconds", "histogram", "Time from todo creation to its first ring.")
    m.describe("switchboard_replies_total", "counter", "Reply outcomes, by state and error class.")
    m.describe("switchboard_reply_refusals_total", "counter", "Replies refused before any dial, by code.")
    m.describe("switchboard_reply_seconds", "histogram", "Time spent dialling the provider for a reply.")
    m.describe(
        "switchboard_secret_blocks_total", "counter", "Replies refused for carrying a secret, by rule."
    )
    m.describe("switchboard_echo_drops_total", "counter", "Deliveries recognised as our own replies.")
    return m
