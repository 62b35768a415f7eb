"""``bench/decide.py`` (ingest's two halves in process) runs end to end on a private SQLite database,
stores every delivery it decides, and refuses a bad argument with a usage line, not a traceback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fixtures.bench_kit import run_bench


def _decide(*argv: str) -> subprocess.CompletedProcess[str]:
    return run_bench("decide", *argv, timeout=300)


def test_it_measures_both_halves_on_sqlite(tmp_path: Path) -> None:
    out = tmp_path / "decide.jsonl"
    done = _decide(
        "--db", "sqlite", "--rounds", "2", "--deliveries", "12", "--concurrency", "5", "--json", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["benchmark"] == "decide" and row["engine"] == "sqlite"
    assert (row["rounds"], row["deliveries"], row["concurrency"]) == (2, 12, 5)
    # CPU a delivery: something, and less than a second (12 deliveries take well under one).
    for half in ("decide", "store"):
        assert 0 < row[f"{half}_min_us"] <= row[f"{half}_us"] < 1_000_000
    assert row["machine"]["cores"] >= 1


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--rounds", "0"], "--rounds must be positive"),
        (["--deliveries", "-1"], "--deliveries must be positive"),
        (["--concurrency", "300"], "--concurrency must be at most 256"),
        (["--db", "oracle"], "invalid choice"),
    ],
)
def test_a_bad_argument_is_a_usage_error(argv: list[str], said: str) -> None:
    done = _decide(*argv)
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr
