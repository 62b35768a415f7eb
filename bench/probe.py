"""How fast is the machine right now? Three small probes, for telling a slow phase from slow code.

These machines change speed during a day, and not evenly: on 2026-12-05 pure Python ran as fast at
07:45 as at 06:25 while everything that talked to PostgreSQL took half as long again
(bench/HISTORY.md). A ratio measured in such a phase is not comparable with one measured before it,
so ``bench.all`` runs this at its start and its end, and the tables' header shows both:

* **Python**: µs to read a 15 KB GitHub payload with orjson and walk the result in Python (what a
  delivery's decision is made of);
* **socket**: µs to send 40 KB (one delivery's rows) over a TCP connection on 127.0.0.1 and read it
  back (the system calls every benchmark makes);
* **PostgreSQL**: µs for one ``SELECT 1`` round trip through asyncpg, on the server in
  ``$SWITCHBOARD_BENCH_DATABASE_URL`` (skipped with ``--db sqlite``).

Each is the median of many repetitions, after a warm-up; the whole probe takes about a second.

    .venv/bin/python -m bench.probe
    .venv/bin/python -m bench.probe --label start --json /tmp/run.jsonl
"""

from __future__ import annotations

import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg
import orjson

from bench.common import FIXTURES, Report, asyncpg_dsn, machine, parser, pg_admin_url, run

PAYLOAD = FIXTURES / "github" / "issue_comment" / "created.payload.json"
SOCKET_BYTES = 40 * 1024
REPEATS = 400


def median_us(step: Callable[[], Any], repeats: int = REPEATS) -> float:
    """The median µs of ``step`` over ``repeats`` calls, after a tenth as many unmeasured."""
    for _ in range(max(1, repeats // 10)):
        step()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def _walk(value: Any) -> int:
    """Every value of a parsed JSON document, visited in Python: the interpreter's own speed."""
    count, stack = 0, [value]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def python_us() -> float:
    body = PAYLOAD.read_bytes()
    return median_us(lambda: _walk(orjson.loads(body)))


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of one TCP connection over 127.0.0.1, as the servers and PostgreSQL talk."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        left = socket.create_connection(listener.getsockname()[:2])
        right, _ = listener.accept()
    for end in (left, right):
        end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return left, right


def socket_us() -> float:
    data = b"x" * SOCKET_BYTES
    left, right = _tcp_pair()
    try:

        def step() -> None:
            left.sendall(data)
            got = 0
            while got < SOCKET_BYTES:
                got += len(right.recv(SOCKET_BYTES - got))

        return median_us(step)
    finally:
        left.close()
        right.close()


async def postgresql_us() -> float:
    conn = await asyncpg.connect(asyncpg_dsn(pg_admin_url()))
    try:
        for _ in range(REPEATS // 10):
            await conn.fetchval("SELECT 1")
        times = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            await conn.fetchval("SELECT 1")
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1e6
    finally:
        await conn.close()


async def measure(label: str, with_postgresql: bool, report: Report) -> None:
    row: dict[str, Any] = {
        "probe": label,
        "python_us": round(python_us(), 1),
        "socket_us": round(socket_us(), 1),
    }
    if with_postgresql:
        row["postgresql_us"] = round(await postgresql_us(), 1)
    report.add(**row)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--label", default="now", help="what to call this probe in the tables (default now)")
    args = p.parse_args()
    if not args.label.strip() or len(args.label) > 40:
        p.error("--label must be 1 to 40 characters")
    report = Report("probe", args.json_path)

    async def go() -> None:
        print(machine(), flush=True)
        await measure(args.label.strip(), args.db != "sqlite", report)

    run(go)


if __name__ == "__main__":
    main()
