"""Claim cycles: ``claim_next`` + ``complete`` per second with 1, 4 and 16 concurrent claimers.

Switchboard is driven through its public lifecycle functions (``switchboard.todos.claim_next`` and
``complete``), in one process, the claimers being concurrent asyncio tasks sharing the service's
connection pool, exactly as the MCP handlers call them. Beside it, on the same private PostgreSQL
database, the baseline: PgQueuer (PyPI), each claimer on its own asyncpg connection doing the
equivalent dequeue + ack (``Queries.dequeue(batch_size=1)`` then ``Queries.log_jobs``), one job at a
time. A second baseline row lets PgQueuer dequeue and ack in batches of 10, as its own worker does.

With ``--mcp``, the same cycles also run over MCP: one official SDK client session per claimer on a
server process, calling the ``claim_next`` and ``complete`` tools; and, in the same invocation, the
same claimers against ``bench/bare_mcp.py`` (the same SDK serving two no-op tools of those names in
its own process: the protocol's floor). ``--clients sdk,lean`` (the default) runs every over-MCP
row twice: with the SDK client, and with ``bench/lean_mcp.py``, which sends the same requests at a
fraction of the SDK client's CPU (the load generator's share of the two cores, as wrk is for
ingest), so that its rows show what the server, not the client, can do.

``max 10`` rows: ``claim_next`` asked for up to 10 todos at once, then each completed one by one
(a cycle is still one todo; its time is the batch's time over the todos it brought). Switchboard's
rows appear only where the verb supports it (``max`` in ``todos.claim_next``'s signature for the
store-level row, in the tool's input schema for the MCP row); otherwise they read "n/a (not yet
supported)". The bare floor always has one.

Each round gets a fresh backlog of ``--cycles`` todos/jobs and stops when it is drained, at
``--cycles`` cycles or at ``--seconds``.

    .venv/bin/python -m bench.claim --db both --claimers 1,4,16 --cycles 3000 --mcp
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bulk import analyze, bulk_pending
from bench.common import (
    BenchDatabase,
    Latencies,
    Report,
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
from bench.cpu import CpuMeter
from bench.lean_mcp import lean_session
from switchboard import todos

BATCH = 10
Call = Callable[..., Awaitable[dict[str, Any]]]
# Untimed cycles before the over-MCP rounds (Switchboard's and the floor's alike).
WARM_UP = 20
NOT_SUPPORTED = "n/a (not yet supported)"
# The MCP clients a claimer can be: the official SDK client, or the lean load generator.
CLIENTS = ("sdk", "lean")


def claimed_todos(got: Any) -> list[dict[str, Any]]:
    """The todos a ``claim_next`` answer holds, whatever its shape: ``None``/``{"empty": true}``
    (none), one todo, ``{"todo": …}``, ``{"todos": […]}`` or a list."""
    if got is None:
        return []
    if isinstance(got, list):
        return got
    if isinstance(got.get("todos"), list):
        return list(got["todos"])
    if isinstance(got.get("todo"), dict):
        return [got["todo"]]
    return [got] if "id" in got else []


def store_supports_max() -> bool:
    return "max" in inspect.signature(todos.claim_next).parameters


def label(queue: str, batch: int, client: str = "sdk") -> str:
    queue = queue if client == "sdk" else f"{queue}, lean client"
    return queue if batch == 1 else f"{queue} (max {batch})"


@asynccontextmanager
async def agent(base_url: str, token: str, client: str) -> AsyncIterator[Call]:
    """An open MCP session of ``client``'s kind; yields its ``call(tool, **arguments)``."""
    if client == "lean":
        async with lean_session(base_url, token) as session:
            yield session.call
    else:
        async with mcp_client(base_url, token) as sdk:
            yield functools.partial(tool, sdk)


def report_round(
    report: Report,
    engine: str,
    queue: str,
    n: int,
    done: int,
    wall: float,
    latencies: Latencies,
    cpu: dict[str, float] | None = None,
) -> None:
    report.add(
        engine=engine,
        queue=queue,
        claimers=n,
        cycles=done,
        seconds=round(wall, 2),
        cycles_per_second=round(done / wall, 1) if wall > 0 else 0.0,
        **{f"cycle_{k}": v for k, v in latencies.summary().items() if k != "n"},
        **(cpu or {}),
    )


def report_unsupported(report: Report, engine: str, queue: str, claimers: list[int]) -> None:
    for n in claimers:
        report.add(
            engine=engine, queue=queue, claimers=n, cycles=0, cycles_per_second=None, note=NOT_SUPPORTED
        )


async def switchboard_rounds(
    bench_db: BenchDatabase, claimers: list[int], cycles: int, seconds: float, report: Report, batch: int
) -> None:
    queue = label("switchboard", batch)
    if batch > 1 and not store_supports_max():
        report_unsupported(report, bench_db.engine, queue, claimers)
        return
    services = make_services(bench_db, new_key())
    db = services.db
    try:
        tenant = await provision(services, handle=f"store{batch}", source=None, families=())
        endpoint = tenant.endpoint
        # Each round's backlog has its own id range (the rounds share a database).
        first = batch * 1_000_000
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
                while time.monotonic() < deadline and done < cycles:
                    started = time.perf_counter()
                    if batch == 1:
                        got = claimed_todos(await todos.claim_next(db, endpoint))
                    else:
                        got = claimed_todos(await todos.claim_next(db, endpoint, max=batch))
                    if not got:
                        return
                    for todo in got:
                        await todos.complete(db, endpoint, todo["id"], result={"ok": True})
                    elapsed = time.perf_counter() - started
                    latencies.extend([elapsed / len(got)] * len(got))
                    done += len(got)

            started = time.perf_counter()
            await asyncio.gather(*(claimer(deadline, latencies) for _ in range(n)))
            report_round(report, bench_db.engine, queue, n, done, time.perf_counter() - started, latencies)
    finally:
        await db.dispose()


async def tool_has_max(client: Any) -> bool:
    """Does the server's ``claim_next`` tool take ``max``? (Its input schema says.)"""
    listed = await client.list_tools()
    for t in listed.tools:
        if t.name == "claim_next":
            return "max" in ((t.input_schema or {}).get("properties") or {})
    return False


async def mcp_round(
    base_url: str,
    token: str,
    n: int,
    cycles: int,
    seconds: float,
    batch: int,
    meter: CpuMeter | None = None,
    client: str = "sdk",
) -> tuple[int, float, Latencies, dict[str, float]]:
    """``n`` client sessions (``client``: ``sdk`` or ``lean``) claiming and completing until the
    backlog is empty, ``cycles`` cycles are done or ``seconds`` have passed; returns (cycles, wall
    seconds, latencies, and ``meter``'s CPU per cycle over the timed part)."""
    latencies = Latencies()
    done = 0

    async def claimer(ready: asyncio.Barrier) -> None:
        nonlocal done
        async with agent(base_url, token, client) as call:
            await ready.wait()
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and done < cycles:
                started = time.perf_counter()
                arguments = {} if batch == 1 else {"max": batch}
                got = claimed_todos(await call("claim_next", **arguments))
                if not got:
                    return
                for todo in got:
                    await call("complete", todo_id=todo["id"], result={"ok": True})
                elapsed = time.perf_counter() - started
                latencies.extend([elapsed / len(got)] * len(got))
                done += len(got)

    # Sessions are opened first (not timed); the clock starts when all are ready.
    ready = asyncio.Barrier(n + 1)
    tasks = [asyncio.create_task(claimer(ready)) for _ in range(n)]
    opening = asyncio.create_task(ready.wait())
    await asyncio.wait([opening, *tasks], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if not opening.done():
        # A session failed to open (its task ended early) or none opened within a minute.
        for task in [opening, *tasks]:
            task.cancel()
        failures = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception()]
        raise RuntimeError(f"MCP sessions did not open: {failures[:1] or 'timed out'}")
    if meter is not None:
        meter.start()
    started = time.perf_counter()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - started
    return done, wall, latencies, meter.per(done, "cycle") if meter is not None else {}


async def mcp_rounds(
    bench_db: BenchDatabase,
    claimers: list[int],
    cycles: int,
    seconds: float,
    report: Report,
    clients: tuple[str, ...] = ("sdk",),
) -> None:
    """The agent's path: each claimer a client session (one round per client of ``clients``) on a
    server process, calling the ``claim_next`` and ``complete`` tools (MCP framing, auth and JSON
    included)."""
    key = new_key()
    services = make_services(bench_db, key)
    try:
        tenant = await provision(services, handle="mcp", source=None, families=())
    finally:
        await services.db.dispose()
    endpoint = tenant.endpoint
    # Above every store-level round's range (batch * 1_000_000 + cycles per claimer count, batch <= 10):
    # the rounds share the database, so overlapping ranges collide on the todos' primary key.
    first = 100_000_000
    async with server_process(bench_db, key) as server:
        async with mcp_client(server.base_url, tenant.endpoint_token) as probe:
            has_max = await tool_has_max(probe)
        # Warm-up, untimed (as the floor gets): first requests, statement caches, pools.
        loader = make_services(bench_db, key)
        try:
            await bulk_pending(loader.db, endpoint.id, tenant.queue, WARM_UP, first=first - WARM_UP)
        finally:
            await loader.db.dispose()
        await mcp_round(server.base_url, tenant.endpoint_token, 1, WARM_UP, 30, 1)
        for client, batch in [(c, b) for c in clients for b in (1, BATCH)]:
            queue = label("switchboard over MCP", batch, client)
            if batch > 1 and not has_max:
                report_unsupported(report, bench_db.engine, queue, claimers)
                continue
            for n in claimers:
                loader = make_services(bench_db, key)
                try:
                    await bulk_pending(loader.db, endpoint.id, tenant.queue, cycles, first=first)
                    if not loader.db.is_sqlite:
                        await analyze(loader.db)
                finally:
                    await loader.db.dispose()
                first += cycles
                meter = CpuMeter(server.process.pid, database=bench_db.engine == "postgresql")
                done, wall, latencies, cpu = await mcp_round(
                    server.base_url, tenant.endpoint_token, n, cycles, seconds, batch, meter, client
                )
                report_round(report, bench_db.engine, queue, n, done, wall, latencies, cpu)


async def bare_mcp_rounds(
    claimers: list[int],
    cycles: int,
    seconds: float,
    report: Report,
    log_dir: Path,
    clients: tuple[str, ...] = ("sdk",),
) -> None:
    """The floor: the same claimers against ``bench/bare_mcp.py`` (no store, nothing to drain, so
    each round stops at ``cycles`` or ``seconds``)."""
    async with server_process(None, None, module="bench.bare_mcp", log_dir=log_dir) as server:
        await mcp_round(server.base_url, "bare", 1, WARM_UP, 30, 1)
        for client, batch in [(c, b) for c in clients for b in (1, BATCH)]:
            for n in claimers:
                meter = CpuMeter(server.process.pid)
                done, wall, latencies, cpu = await mcp_round(
                    server.base_url, "bare", n, cycles, seconds, batch, meter, client
                )
                queue = label("bare MCP SDK", batch, client)
                report_round(report, "none", queue, n, done, wall, latencies, cpu)


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
            queue = "pgqueuer" if batch == 1 else f"pgqueuer (batch {batch})"
            report_round(report, bench_db.engine, queue, n, done, time.perf_counter() - started, latencies)
            # Whatever a round left queued (it stopped at --seconds) must not feed the next one.
            await queries.clear_queue("bench")
    finally:
        await admin.close()


def mcp_clients(text: str) -> tuple[str, ...]:
    """``--clients``: a comma-separated subset of CLIENTS."""
    chosen = tuple(c.strip() for c in text.split(",") if c.strip())
    if not chosen or any(c not in CLIENTS for c in chosen):
        raise argparse.ArgumentTypeError(f"choose from {', '.join(CLIENTS)}, comma-separated")
    return chosen


async def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--claimers", type=positive_ints, default=[1, 4, 16])
    p.add_argument("--cycles", type=int, default=3000, help="backlog per round (bound)")
    p.add_argument("--seconds", type=float, default=30.0, help="time cap per round")
    p.add_argument("--no-baseline", action="store_true", help="skip PgQueuer on PostgreSQL")
    p.add_argument("--mcp", action="store_true", help="also drive the tools over MCP, and the bare SDK floor")
    p.add_argument(
        "--clients",
        type=mcp_clients,
        default=CLIENTS,
        help="MCP clients for the over-MCP rows: sdk, lean or sdk,lean (default)",
    )
    p.add_argument("--quick", action="store_true", help="claimers 1,4, 200 cycles, 10 s, with --mcp")
    args = p.parse_args()
    if args.quick:
        args.claimers, args.cycles, args.seconds, args.mcp = [1, 4], 200, 10.0, True
    if args.cycles < 1 or args.seconds <= 0:
        p.error("--cycles and --seconds must be positive")
    if "postgresql" in engines_of(args.db) and not args.no_baseline:
        try:
            import pgqueuer  # noqa: F401
        except ImportError:
            # Said before any row runs, not as a traceback halfway through the run.
            p.error(
                "the PgQueuer baseline needs pgqueuer: .venv/bin/pip install -r bench/requirements.txt "
                "(or pass --no-baseline)"
            )
    print(machine())
    report = Report("claim_cycles", args.json_path)
    for engine in engines_of(args.db):
        heading(f"claim_next + complete on {engine}, claimers {args.claimers}")
        async with private_database(engine) as bench_db:
            for batch in (1, BATCH):
                await switchboard_rounds(bench_db, args.claimers, args.cycles, args.seconds, report, batch)
            if args.mcp:
                clients = ", ".join(args.clients)
                heading(f"the same over MCP on {engine}: one client session per claimer ({clients})")
                await mcp_rounds(bench_db, args.claimers, args.cycles, args.seconds, report, args.clients)
            if engine == "postgresql" and not args.no_baseline:
                heading("baseline: PgQueuer dequeue + ack on the same database")
                await pgqueuer_rounds(bench_db, args.claimers, args.cycles, args.seconds, report, batch=1)
                await pgqueuer_rounds(bench_db, args.claimers, args.cycles, args.seconds, report, batch=BATCH)
    if args.mcp:
        heading("floor: the bare mcp SDK server (two no-op tools), the same claimers")
        with tempfile.TemporaryDirectory(prefix="sbbench-") as log_dir:
            await bare_mcp_rounds(
                args.claimers, args.cycles, args.seconds, report, Path(log_dir), args.clients
            )


if __name__ == "__main__":
    run(main)
