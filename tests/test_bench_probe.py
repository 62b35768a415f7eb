"""``bench/probe.py`` (the machine's speed at a run's start and end): it measures, ``bench.all``
always runs it around whatever it runs, and the tables' header shows each probe side by side."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fixtures.bench_kit import run_bench

from bench.all import plan
from bench.render import probe_line, render


def _probe(*argv: str) -> subprocess.CompletedProcess[str]:
    return run_bench("probe", *argv, timeout=120)


def test_it_measures_python_and_the_socket_without_a_database(tmp_path: Path) -> None:
    out = tmp_path / "probe.jsonl"
    done = _probe("--db", "sqlite", "--label", "start", "--json", str(out))
    assert done.returncode == 0, done.stderr
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["benchmark"] == "probe" and row["probe"] == "start"
    # Microseconds: something, and far less than a second.
    assert 0 < row["python_us"] < 1_000_000 and 0 < row["socket_us"] < 1_000_000
    assert "postgresql_us" not in row


def test_a_bad_label_is_a_usage_error() -> None:
    done = _probe("--db", "sqlite", "--label", "x" * 41)
    assert done.returncode == 2
    assert "--label must be 1 to 40 characters" in done.stderr and "Traceback" not in done.stderr


def test_every_run_of_bench_all_is_between_two_probes() -> None:
    for quick in (False, True):
        for only in ([], ["ingest"], ["crash", "reply"]):
            names = [name for name, _ in plan(quick, only)]
            assert names[0] == names[-1] == "probe" and names.count("probe") == 2
            assert set(names) - {"probe"} == (set(only) if only else set(names) - {"probe"})
            assert len(names) > 2


def test_the_header_shows_each_probe_side_by_side() -> None:
    machine = {
        "cpu": "Test CPU",
        "cores": 2,
        "memory_gib": 1.0,
        "python": "3.11",
        "sqlite": "3.40",
        "date": "2026-12-05 07:00 UTC",
        "loadavg_1m": 0.5,
    }
    probes = [
        {"benchmark": "probe", "probe": "start", "python_us": 42.5, "socket_us": 4.5, "postgresql_us": 60.0},
        {"benchmark": "probe", "probe": "end", "python_us": 43.0, "socket_us": 4.6, "postgresql_us": 130.2},
    ]
    [_, line] = probe_line(probes)
    assert line.startswith("Speed probes (start → end;")
    assert "42.5 → 43 µs" in line and "4.5 → 4.6 µs" in line and "`SELECT 1` 60 → 130.2 µs" in line
    # A probe without PostgreSQL (``--db sqlite``) leaves that part out rather than failing.
    [_, partial] = probe_line(
        [{**probes[0], "postgresql_us": 1.0}, {"probe": "end", "python_us": 1.0, "socket_us": 1.0}]
    )
    assert "SELECT 1" not in partial and "Python" in partial
    assert probe_line([]) == []
    text = render([{**p, "machine": machine} for p in probes])
    assert text.splitlines()[0].startswith("Machine: Test CPU") and "Speed probes" in text
