"""The in-process Prometheus registry (``switchboard.metrics``): a series is its label set
whatever order the labels are given in, and the label sets it remembers are bounded."""

from __future__ import annotations

import pytest

from switchboard import metrics
from switchboard.metrics import Metrics


def test_a_series_is_its_labels_in_any_order_counted_and_observed() -> None:
    registry = Metrics()
    registry.describe("t_seconds", "histogram", "a histogram", buckets=(0.1, 1.0))
    for _ in range(3):
        registry.inc("t_total", source="github", status="202")
        registry.inc("t_total", status="202", source="github")
    registry.inc("t_total", 2.5, source="slack", status="202")
    assert registry.value("t_total", status="202", source="github") == 6
    assert registry.value("t_total", source="slack", status="202") == 2.5
    registry.observe("t_seconds", 0.05, source="github")
    registry.observe("t_seconds", 0.5, source="github")
    text = registry.render()
    assert 't_total{source="github",status="202"} 6' in text
    assert 't_seconds_bucket{source="github",le="0.1"} 1' in text
    assert 't_seconds_bucket{source="github",le="1"} 2' in text
    assert 't_seconds_count{source="github"} 2' in text


def test_label_sets_past_the_remembered_number_still_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Label sets are remembered up to ``SERIES_KEYS_KEPT`` (a per-webhook series can be many);
    past that each is sorted on every call, and counts the same."""
    monkeypatch.setattr(metrics, "SERIES_KEYS_KEPT", 3)
    registry = Metrics()
    for n in range(10):
        registry.inc("t_total", webhook=f"wh_{n}", reason="rate_limited")
        registry.inc("t_total", reason="rate_limited", webhook=f"wh_{n}")
    assert len(registry._keys) == 3
    assert all(registry.value("t_total", webhook=f"wh_{n}", reason="rate_limited") == 2 for n in range(10))
