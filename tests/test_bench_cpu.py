"""``bench/cpu.py``'s machine-wide reading: the ingest rows say how busy the whole machine was, so a
reader can tell a server bound by its own CPU from a machine with no core left to give."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

from bench.cpu import MachineSampler, machine_busy_seconds
from bench.render import ingest_section

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _spin(seconds: float) -> None:
    """Keep this process's core busy for ``seconds``: a busy-wait on purpose, the CPU it burns is
    what the tests read."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


async def test_a_loaded_server_shows_in_the_machines_busy_share() -> None:
    """A child process keeps one core busy for a second (the "server"), after a quiet half second
    (a sender's preparation): the share is read over the loaded intervals only."""
    spinner = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import time\ntime.sleep(0.5)\nend = time.monotonic() + 1.0\nwhile time.monotonic() < end: pass",
    )
    sampler = MachineSampler((spinner.pid,), interval=0.1)
    sampler.start()
    await spinner.wait()
    figures = await sampler.stop()
    cores = os.cpu_count() or 1
    # One core of ``cores`` at least (others may add), never more than all of them.
    assert 0.8 * 100 / cores <= figures["machine_busy_pct"] <= 100.5


async def test_no_samples_no_figure() -> None:
    sampler = MachineSampler((os.getpid(),), interval=10)
    assert await sampler.stop() == {}


def test_the_busy_seconds_only_grow() -> None:
    before = machine_busy_seconds()
    _spin(0.1)
    after = machine_busy_seconds()
    assert before is not None and after is not None and after > before


def test_the_ingest_table_shows_the_machine_columns() -> None:
    row = {
        "benchmark": "ingest",
        "engine": "postgresql",
        "server": "switchboard",
        "senders": 32,
        "driver": "wrk",
        "acked": 100,
        "per_second": 1857.5,
        "server_cpu_ms_per_request": 0.526,
        "database_cpu_ms_per_request": 0.242,
        "machine_cpu_ms_per_request": 0.881,
        "machine_busy_pct": 81.8,
        "server_peak_rss_mib": 134.5,
    }
    text = "\n".join(ingest_section([row]))
    header = next(line for line in text.splitlines() if "server CPU ms/request" in line)
    assert "machine CPU ms/request" in header and "machine busy" in header
    line = next(line for line in text.splitlines() if "1,857.5" in line)
    assert "| 0.88 | 81.8% |" in line
