"""Ingest: throughput and acknowledgement latency of signed GitHub deliveries over real HTTP.

A server process (``bench/serve.py``, the app as ``switchboard serve`` builds it) on 127.0.0.1; N
concurrent senders POST real octokit payloads signed with the webhook's secret, each with a fresh
``X-GitHub-Delivery``. Latency is from the request leaving the sender to the 202 being read. After
the run the stored todos are counted against the acknowledged ones (an acknowledged delivery is
durable), and the server's peak RSS is read from ``/proc``.

    .venv/bin/python -m bench.ingest --db sqlite --senders 1,8,32 --deliveries 2000
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from sqlalchemy import func, select

from bench.common import (
    Latencies,
    Report,
    engines_of,
    github_bodies,
    github_headers,
    heading,
    machine,
    make_services,
    new_key,
    parser,
    positive_ints,
    private_database,
    provision,
    run,
    server_process,
)
from switchboard.db import Database
from switchboard.models import Todo


async def blast(
    http: aiohttp.ClientSession, url: str, secret: str, *, senders: int, total: int, seconds: float
) -> dict[str, Any]:
    """``total`` deliveries from ``senders`` concurrent senders, stopping early at ``seconds``."""
    bodies = github_bodies()
    tickets = itertools.count()
    latencies = Latencies()
    statuses: dict[int, int] = {}
    created = 0
    deadline = time.monotonic() + seconds

    async def sender() -> None:
        nonlocal created
        while time.monotonic() < deadline:
            ticket = next(tickets)
            if ticket >= total:
                return
            event, body = bodies[ticket % len(bodies)]
            headers = github_headers(secret, event, body)
            started = time.perf_counter()
            try:
                async with http.post(url, data=body, headers=headers) as response:
                    answer = await response.json(content_type=None)
                    status = response.status
            except (aiohttp.ClientError, ValueError):
                status = -1
                answer = {}
            elapsed = time.perf_counter() - started
            statuses[status] = statuses.get(status, 0) + 1
            if status == 202:
                latencies.add(elapsed)
                created += int(answer.get("created", 0))

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(senders)))
    wall = time.perf_counter() - started
    acked = statuses.get(202, 0)
    return {
        "sent": sum(statuses.values()),
        "acked": acked,
        "refused": sum(n for s, n in statuses.items() if s != 202),
        # Anything but 202 by status (-1: no answer), so a refusal is never silent.
        "other_statuses": {str(s): n for s, n in sorted(statuses.items()) if s != 202} or None,
        "todos_created": created,
        "seconds": round(wall, 2),
        "per_second": round(acked / wall, 1) if wall > 0 else 0.0,
        **latencies.summary(),
    }


async def measure(engine: str, senders: list[int], deliveries: int, seconds: float, report: Report) -> None:
    heading(f"ingest on {engine}: signed GitHub deliveries, senders {senders}")
    async with private_database(engine) as bench_db:
        key = new_key()
        services = make_services(bench_db, key)
        try:
            tenant = await provision(services)
        finally:
            await services.db.dispose()
        assert tenant.ingest_token is not None and tenant.webhook_secret is not None
        created_total = 0
        async with server_process(bench_db, key) as server:
            url = f"{server.base_url}/webhooks/{tenant.ingest_token}"
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as http:
                # Warm-up: connection pools, plugin imports, first-statement caches.
                warm = await blast(http, url, tenant.webhook_secret, senders=4, total=100, seconds=30)
                created_total += int(warm["todos_created"])
                for n in senders:
                    result = await blast(
                        http, url, tenant.webhook_secret, senders=n, total=deliveries, seconds=seconds
                    )
                    created_total += int(result["todos_created"])
                    report.add(
                        engine=engine,
                        senders=n,
                        **result,
                        server_rss_mib=round(server.rss_mib() or 0, 1),
                        server_peak_rss_mib=round(server.peak_rss_mib() or 0, 1),
                    )
        # Every acknowledged delivery is durable: count what the database holds.
        db = Database(bench_db.url)
        try:
            async with db.read() as s:
                stored = int(await s.scalar(select(func.count()).select_from(Todo)) or 0)
        finally:
            await db.dispose()
        report.add(
            engine=engine, check="acknowledged todos stored", acknowledged=created_total, stored=stored
        )


async def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--senders", type=positive_ints, default=[1, 8, 32], help="concurrent senders, e.g. 1,8,32"
    )
    p.add_argument("--deliveries", type=int, default=2000, help="deliveries per sender count (bound)")
    p.add_argument("--seconds", type=float, default=60.0, help="time cap per sender count")
    args = p.parse_args()
    if args.deliveries < 1 or args.seconds <= 0:
        p.error("--deliveries and --seconds must be positive")
    print(machine())
    report = Report("ingest", args.json_path)
    for engine in engines_of(args.db):
        await measure(engine, args.senders, args.deliveries, args.seconds, report)


if __name__ == "__main__":
    run(main)
