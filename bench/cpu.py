"""CPU time of the processes a benchmark runs, read from ``/proc`` (Linux; None elsewhere).

Throughput on a small machine is a share of its cores among the sender, the server and the
database, all on the same cores: a ratio of rates then mixes their costs. CPU time per request,
per process, does not, so the ingest and claim rows report it next to their rates.
"""

from __future__ import annotations

import contextlib
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
