"""``bench.ingest --rounds``: the anchors and the rows measured in alternating rounds, each row's
share taken of its own round's ceiling, and the median of the rounds reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fixtures.bench_kit import run_bench

from bench.common import machine
from bench.ingest import CEILING, SHARES, shares_by_round
from bench.render import render


def _row(round_: int, server: str, per_second: float, **extra: Any) -> dict[str, Any]:
    return {
        "benchmark": "ingest",
        "round": round_,
        "server": server,
        "engine": "none" if server == CEILING else "postgresql",
        "processes": 1,
        "driver": "wrk",
        "senders": 32,
        "acked": 100,
        "per_second": per_second,
        "server_peak_rss_mib": 100.0,
        **({"rules": 0} if server == "switchboard" else {}),
        **extra,
    }


def test_each_round_is_a_share_of_its_own_ceiling_and_the_median_is_reported() -> None:
    rows = [
        _row(1, CEILING, 20_000),
        _row(1, "switchboard", 3_000),  # 15%
        _row(2, CEILING, 10_000),
        _row(2, "switchboard", 1_200),  # 12%: a slow phase slowed both
        _row(3, CEILING, 16_000),
        _row(3, "switchboard", 2_080),  # 13%
        # Another sender count has no ceiling of its own: no share is made up for it.
        _row(1, "switchboard", 500, senders=8),
    ]
    [summary] = shares_by_round(rows)
    assert summary["summary"] == SHARES
    assert (summary["engine"], summary["senders"], summary["driver"], summary["rules"]) == (
        "postgresql",
        32,
        "wrk",
        0,
    )
    assert summary["shares_pct"] == [15.0, 12.0, 13.0]
    assert summary["median_share_pct"] == 13.0
    # Pooled over the rounds instead (6,280 / 46,000) it would read 13.7%: the rounds are not mixed.


def test_one_round_makes_no_summary() -> None:
    rows = [
        {k: v for k, v in r.items() if k != "round"} for r in (_row(1, CEILING, 9), _row(1, "switchboard", 1))
    ]
    assert shares_by_round(rows) == []


def test_the_table_compares_each_row_with_its_own_rounds_ceiling() -> None:
    rows = [
        _row(1, CEILING, 20_000),
        _row(1, "switchboard", 3_000),
        _row(2, CEILING, 10_000),
        _row(2, "switchboard", 1_200),
    ]
    # As Report.add writes them: each row names its benchmark.
    summaries = [{"benchmark": "ingest", **summary} for summary in shares_by_round(rows)]
    text = render([{**r, "machine": machine()} for r in [*rows, *summaries]])
    lines = text.splitlines()
    assert any(line.startswith("| round | senders | server |") for line in lines)
    assert any(line.startswith("| 1 | 32 | switchboard |") and "| 15.0% |" in line for line in lines)
    assert any(line.startswith("| 2 | 32 | switchboard |") and "| 12.0% |" in line for line in lines)
    assert (
        "PostgreSQL, 0 rules, 32 senders (wrk), of its own round's ceiling: 15.0%, 12.0%; median **13.5%**."
        in text
    )


def test_a_run_of_two_rounds_alternates_the_anchor_and_the_rows(tmp_path: Path) -> None:
    out = tmp_path / "ingest.jsonl"
    done = run_bench(
        "ingest",
        *("--db", "sqlite", "--senders", "2", "--deliveries", "20", "--rules", "0", "--rounds", "2"),
        *("--driver", "python", "--ceiling-requests", "200", "--ceiling-seconds", "2", "--json", str(out)),
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # In order: round 1's ceiling, then its row; then round 2's.
    order = [
        (r["round"], r["server"])
        for r in rows
        if r.get("server") and "per_second" in r and r["driver"] == "python"
    ]
    assert order == [(1, CEILING), (1, "switchboard"), (2, CEILING), (2, "switchboard")]
    # Every acknowledged delivery of each round was stored.
    checks = [r for r in rows if r.get("check") == "acknowledged todos stored"]
    assert [c["round"] for c in checks] == [1, 2]
    assert all(c["acknowledged_not_stored"] == 0 and c["acknowledged"] > 0 for c in checks)
    [summary] = [r for r in rows if r.get("summary") == SHARES]
    assert "round" not in summary and len(summary["shares_pct"]) == 2
    assert all(0 < share < 100 for share in summary["shares_pct"])
    assert "median" in render(rows)


def test_no_rounds_is_a_usage_error() -> None:
    done = run_bench("ingest", "--db", "sqlite", "--rounds", "0")
    assert done.returncode == 2
    assert "--rounds must be at least 1" in done.stderr and "Traceback" not in done.stderr
