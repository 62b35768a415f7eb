"""Claim cycles: ``claim_next`` + ``complete`` per second with 1, 4 and 16 concurrent claimers.

Switchboard is driven through its public lifecycle functions (``switchboard.todos.claim_next`` and
``complete``), in one process, the claimers being concurrent asyncio tasks sharing the service's
connection pool, exactly as the MCP handlers call them. Beside it, on the same private PostgreSQL
database, the baseline: PgQueuer (PyPI), each claimer on its own asyncpg connection doing the
equivalent dequeue + ack (``Queries.dequeue(batch_size=1)`` then ``Queries.log_jobs``), one job at a
time. A second baseline row lets PgQueuer dequeue and ack in batches of 10, as its own worker does.

With ``--mcp``, the same cycles also run over MCP: one official SDK client session per claimer on a
server process, calling the ``claim_next`` and ``complete`` tools.

Each round gets a fresh backlog of ``--cycles`` todos/jobs and stops when it is drained or at
``--seconds``.

    .venv/bin/python -m bench.claim --db both --claimers 1,4,16 --cycles 3000 --mcp
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BenchDatabase,
    Latencies,
    Report,
    analyze,
    bulk_pending,
    engines_of,
    heading,
    machine,
    make_services,
    mcp_client,
    new_key,
    parser,
    positive_ints,
    private_database,
    provision,
    run,
    server_process,
    tool,
)
from switchboard import todos


async def switchboard_rounds(
    bench_db: BenchDatabase, claimers: list[int], cycles: int, seconds: float, report: Report
) -> None:
    services = make_services(bench_db, new_key())
    db = services.db
    try:
        tenant = await provision(services, source=None, families=())
        endpoint = tenant.endpoint
        first = 0
        for n in claimers:
            await bulk_pending(db, endpoint.id, tenant.queue, cycles, first=first)
            first += cycles
            if not db.is_sqlite:
                await analyze(db)
            latencies = Latencies()
            done = 0
            deadline = time.monotonic() + seconds

            async def claimer(deadline: float, latencies: Latencies) -> None:
                nonlocal done
                while time.monotonic() < deadline:
                    started = time.perf_counter()
                    todo = await todos.claim_next(db, endpoint)
                    if todo is None:
                        return
                    await todos.complete(db, endpoint, todo["id"], result={"ok": True})
                    latencies.add(time.perf_counter() - started)
                    done += 1

            started = time.perf_counter()
            await asyncio.gather(*(claimer(deadline, latencies) for _ in range(n)))
            wall = time.perf_counter() - started
            report.add(
                engine=bench_db.engine,
                queue="switchboard",
                claimers=n,
                cycles=done,
                seconds=round(wall, 2),
                cycles_per_second=round(done / wall, 1),
                **{f"cycle_{k}": v for k, v in latencies.summary().items() if k != "n"},
            )
    finally:
        await db.dispose()


async def mcp_rounds(
    bench_db: BenchDatabase, claimers: list[int], cycles: int, seconds: float, report: Report
) -> None:
    """The agent's path: each claimer an SDK client session on a server process, calling the
    ``claim_next`` and ``complete`` tools (MCP framing, auth and JSON included)."""
    key = new_key()
    services = make_services(bench_db, key)
    try:
        tenant = await provision(services, handle="mcp", source=None, families=())
    finally:
        await services.db.dispose()
    endpoint = tenant.endpoint
    first = 10_000_000
    async with server_process(bench_db, key) as server:
        for n in claimers:
            loader = make_services(bench_db, key)
            try:
                await bulk_pending(loader.db, endpoint.id, tenant.queue, cycles, first=first)
                if not loader.db.is_sqlite:
                    await analyze(loader.db)
            finally:
                await loader.db.dispose()
            first += cycles
            latencies = Latencies()
            done = 0

            async def claimer(latencies: Latencies, ready: asyncio.Barrier) -> None:
                nonlocal done
                async with mcp_client(server.base_url, tenant.endpoint_token) as client:
                    await ready.wait()
                    deadline = time.monotonic() + seconds
                    while time.monotonic() < deadline:
                        started = time.perf_counter()
                        got = await tool(client, "claim_next")
                        if got.get("empty"):
                            return
                        await tool(client, "complete", todo_id=got["todo"]["id"], result={"ok": True})
                        latencies.add(time.perf_counter() - started)
                        done += 1

            # Sessions are opened first (not timed); the clock starts when all are ready.
            ready = asyncio.Barrier(n + 1)
            tasks = [asyncio.create_task(claimer(latencies, ready)) for _ in range(n)]
            opening = asyncio.create_task(ready.wait())
            await asyncio.wait([opening, *tasks], timeout=60, return_when=asyncio.FIRST_COMPLETED)
            if not opening.done():
                # A session failed to open (its task ended early) or none opened within a minute.
                for task in [opening, *tasks]:
                    task.cancel()
                failures = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception()]
                raise RuntimeError(f"MCP sessions did not open: {failures[:1] or 'timed out'}")
            started = time.perf_counter()
            await asyncio.gather(*tasks)
            wall = time.perf_counter() - started
            report.add(
                engine=bench_db.engine,
                queue="switchboard over MCP",
                claimers=n,
                cycles=done,
                seconds=round(wall, 2),
                cycles_per_second=round(done / wall, 1),
                **{f"cycle_{k}": v for k, v in latencies.summary().items() if k != "n"},
            )


async def pgqueuer_rounds(
    bench_db: BenchDatabase, claimers: list[int], cycles: int, seconds: float, report: Report, batch: int
) -> None:
    import asyncpg
    from pgqueuer.queries import EntrypointExecutionParameter, Queries

    admin = await asyncpg.connect(bench_db.asyncpg_dsn)
    try:
        queries = Queries.from_asyncpg_connection(admin)
        if not await queries.schema_is_installed():
            await queries.install()
        entrypoints = {"bench": EntrypointExecutionParameter(concurrency_limit=0)}
        for n in claimers:
            for lo in range(0, cycles, 5000):
                k = min(5000, cycles - lo)
                await queries.enqueue(["bench"] * k, [b"{}"] * k, [0] * k)
            await admin.execute("ANALYZE")
            latencies = Latencies()
            done = 0
            deadline = time.monotonic() + seconds

            async def claimer(deadline: float, latencies: Latencies) -> None:
                nonlocal done
                conn = await asyncpg.connect(bench_db.asyncpg_dsn)
                try:
                    q = Queries.from_asyncpg_connection(conn)
                    manager = uuid.uuid4()
                    while time.monotonic() < deadline:
                        started = time.perf_counter()
                        jobs = await q.dequeue(
                            batch_size=batch,
                            entrypoints=entrypoints,  # type: ignore[arg-type]
                            queue_manager_id=manager,  # type: ignore[arg-type]
                            global_concurrency_limit=None,
                            heartbeat_timeout=timedelta(seconds=300),
                        )
                        if not jobs:
                            return
                        await q.log_jobs([(job, "successful", None) for job in jobs])
                        elapsed = time.perf_counter() - started
                        latencies.extend([elapsed / len(jobs)] * len(jobs))
                        done += len(jobs)
                finally:
                    await conn.close()

            started = time.perf_counter()
            await asyncio.gather(*(claimer(deadline, latencies) for _ in range(n)))
            wall = time.perf_counter() - started
            row: dict[str, Any] = {
                "engine": bench_db.engine,
                "queue": "pgqueuer" if batch == 1 else f"pgqueuer (batch {batch})",
                "claimers": n,
                "cycles": done,
                "seconds": round(wall, 2),
                "cycles_per_second": round(done / wall, 1),
            }
            row.update({f"cycle_{k}": v for k, v in latencies.summary().items() if k != "n"})
            report.add(**row)
            # Whatever a round left queued (it stopped at --seconds) must not feed the next one.
            await queries.clear_queue("bench")
    finally:
        await admin.close()


async def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--claimers", type=positive_ints, default=[1, 4, 16])
    p.add_argument("--cycles", type=int, default=3000, help="backlog per round (bound)")
    p.add_argument("--seconds", type=float, default=30.0, help="time cap per round")
    p.add_argument("--no-baseline", action="store_true", help="skip PgQueuer on PostgreSQL")
    p.add_argument("--mcp", action="store_true", help="also drive the tools over MCP (a server process)")
    args = p.parse_args()
    if args.cycles < 1 or args.seconds <= 0:
        p.error("--cycles and --seconds must be positive")
    print(machine())
    report = Report("claim_cycles", args.json_path)
    for engine in engines_of(args.db):
        heading(f"claim_next + complete on {engine}, claimers {args.claimers}")
        async with private_database(engine) as bench_db:
            await switchboard_rounds(bench_db, args.claimers, args.cycles, args.seconds, report)
            if args.mcp:
                heading(f"the same over MCP on {engine}: one SDK client session per claimer")
                await mcp_rounds(bench_db, args.claimers, args.cycles, args.seconds, report)
            if engine == "postgresql" and not args.no_baseline:
                heading("baseline: PgQueuer dequeue + ack on the same database")
                await pgqueuer_rounds(bench_db, args.claimers, args.cycles, args.seconds, report, batch=1)
                await pgqueuer_rounds(bench_db, args.claimers, args.cycles, args.seconds, report, batch=10)


if __name__ == "__main__":
    run(main)
