"""``bench/knockout.py`` (a step's cost, measured by leaving it out of a loaded server): every
knock-out still finds what it replaces, the costs are the full server's CPU less the variant's,
it runs end to end on SQLite, and a bad argument is a usage line, not a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.bench_kit import ROOT, run_bench

from bench.knockout import ENV, KNOCKOUTS, costs


def test_every_knock_out_finds_what_it_replaces() -> None:
    """Applied together in a fresh interpreter, as ``bench.serve`` applies them: a renamed class or
    function fails here instead of in a benchmark run."""
    done = subprocess.run(
        [sys.executable, "-c", "from bench.knockout import apply_from_environment; apply_from_environment()"],
        cwd=ROOT,
        env={**os.environ, ENV: ",".join(KNOCKOUTS)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_an_unknown_knock_out_in_the_environment_stops_the_server_with_its_name() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from bench.knockout import apply_from_environment; apply_from_environment()"],
        cwd=ROOT,
        env={**os.environ, ENV: "access_line,nope"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "no knock-out named 'nope'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_cost_is_the_full_servers_median_less_the_variants() -> None:
    rows = {"full": [0.30, 0.32, 0.31], "store": [0.25, 0.24, 0.26], "metrics": [0.315, 0.30, 0.31]}
    assert costs(rows) == {"store": 60.0, "metrics": 0.0}


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--knockouts", "nope"], "--knockouts: unknown nope"),
        (["--knockouts", ","], "--knockouts: unknown (none given)"),
        (["--rounds", "0"], "--rounds must be positive"),
    ],
)
def test_a_bad_argument_is_a_usage_error(argv: list[str], said: str) -> None:
    done = run_bench("knockout", *argv, timeout=60)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr


def test_it_measures_a_knock_out_against_the_full_server_on_sqlite(tmp_path: Path) -> None:
    out = tmp_path / "knockout.jsonl"
    done = run_bench(
        "knockout",
        *("--db", "sqlite", "--driver", "python", "--senders", "8", "--deliveries", "400"),
        *("--rounds", "1", "--knockouts", "decide", "--json", str(out)),
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    measured = {r["variant"]: r for r in rows if "round" in r}
    summary = {r["variant"]: r for r in rows if "round" not in r}
    assert set(measured) == set(summary) == {"full", "decide"}
    # Every delivery answered 202 by both servers.
    assert all(r["other_statuses"] is None for r in measured.values())
    # Leaving out everything after the body's read takes most of a delivery's CPU away.
    full, decide = (summary[v]["median_server_cpu_ms"] for v in ("full", "decide"))
    assert 0 < decide < full
    assert summary["decide"]["cost_us_a_delivery"] == round((full - decide) * 1000, 1)
