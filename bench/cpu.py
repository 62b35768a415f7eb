"""CPU time of the processes a benchmark runs, read from ``/proc`` (Linux; None elsewhere).

Throughput on a small machine is a share of its cores among the sender, the server and the
database, all on the same cores: a ratio of rates then mixes their costs. CPU time per request,
per process, does not, so the ingest and claim rows report it next to their rates.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path

# Clock ticks per second of /proc/<pid>/stat's times.
TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int | str) -> list[str] | None:
    try:
        # The fields after the command name, which is in parentheses and may hold spaces.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def own_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time so far of process ``pid`` (all its threads)."""
    fields = _stat_fields(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / TICKS


def _children(pid: int) -> list[int]:
    found: list[int] = []
    # The process, or a thread of it, may end while being read: what was found so far stands.
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time so far of process ``pid`` and of its live child processes (a
    server's routing-rule workers), or None off Linux."""
    own = own_cpu_seconds(pid)
    if own is None:
        return None
    return own + sum(own_cpu_seconds(child) or 0.0 for child in _children(pid))


def postgres_cpu_seconds() -> float | None:
    """CPU time so far of every ``postgres`` process on this machine (the server the benchmark's
    database is on, when it is local: its backends, WAL writer and checkpointer), or None when
    there is none to read."""
    total, found = 0.0, False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            fields = _stat_fields(entry.name)
            if fields is not None:
                total += (int(fields[11]) + int(fields[12])) / TICKS
                found = True
    return total if found else None


def machine_busy_seconds() -> float | None:
    """CPU time so far that the machine's cores spent on anything but waiting (``/proc/stat``'s
    first line: user, nice, system, irq, softirq and steal, not idle or iowait), summed over its
    cores; None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / TICKS


@dataclass
class CpuMeter:
    """CPU used between ``start()`` and ``per(n)`` by a server process, by this process (the
    benchmark's clients; ``client=False`` when the load comes from elsewhere, such as wrk) and by
    the local PostgreSQL (``database``), in milliseconds per unit of work."""

    server_pid: int | None = None
    database: bool = False
    client: bool = True
    # More server processes whose CPU counts as the server's (several serving one database).
    other_pids: tuple[int, ...] = ()
    _start: dict[str, float | None] | None = None

    def _server(self) -> float | None:
        if self.server_pid is None:
            return None
        times = [cpu_seconds(pid) for pid in (self.server_pid, *self.other_pids)]
        return None if any(t is None for t in times) else sum(t or 0.0 for t in times)

    def _read(self) -> dict[str, float | None]:
        return {
            "server": self._server(),
            "client": time.process_time() if self.client else None,
            "database": postgres_cpu_seconds() if self.database else None,
        }

    def start(self) -> None:
        self._start = self._read()

    def per(self, units: int, unit: str) -> dict[str, float]:
        """``{"<who>_cpu_ms_per_<unit>": …}`` for each process read at both ends."""
        if self._start is None or units <= 0:
            return {}
        end = self._read()
        out = {}
        for who, before in self._start.items():
            after = end[who]
            if before is not None and after is not None:
                out[f"{who}_cpu_ms_per_{unit}"] = round((after - before) * 1000 / units, 3)
        return out


class MachineSampler:
    """How busy the whole machine's cores were while a load ran (``machine_busy_pct``, 100 = every
    core busy all the time): the sender, the server, the database and the kernel together.

    On a machine whose cores they share, a rate is bound by that share as much as by the server's
    own CPU: what is idle is all a faster server could still take. A meter over the whole row would
    also count the sender's preparation (wrk reads its bodies before the first request), so this
    samples ``/proc/stat`` and the server's CPU every ``interval`` seconds and keeps the intervals
    in which the server was loaded: at least half as busy as in its busiest interval."""

    def __init__(self, server_pids: tuple[int, ...], interval: float = 0.2) -> None:
        self.server_pids, self.interval = server_pids, interval
        self._samples: list[tuple[float, float, float]] = []
        self._task: asyncio.Task[None] | None = None

    def _sample(self) -> tuple[float, float, float] | None:
        busy = machine_busy_seconds()
        server = [cpu_seconds(pid) for pid in self.server_pids]
        if busy is None or any(s is None for s in server):
            return None
        return time.monotonic(), busy, sum(s or 0.0 for s in server)

    async def _run(self) -> None:
        while True:
            sample = self._sample()
            if sample is not None:
                self._samples.append(sample)
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._samples.clear()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> dict[str, float]:
        """``{"machine_busy_pct": …}`` over the loaded intervals, or ``{}`` when none was seen."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        last = self._sample()
        samples = self._samples + ([last] if last is not None else [])
        steps = [(b[0] - a[0], b[1] - a[1], b[2] - a[2]) for a, b in itertools.pairwise(samples)]
        steps = [step for step in steps if step[0] > 0]
        if not steps:
            return {}
        peak = max(server / wall for wall, _, server in steps)
        loaded = [step for step in steps if peak > 0 and step[2] / step[0] >= peak / 2]
        wall = sum(step[0] for step in loaded)
        if wall <= 0:
            return {}
        busy = sum(step[1] for step in loaded)
        return {"machine_busy_pct": round(100 * busy / (wall * (os.cpu_count() or 1)), 1)}
