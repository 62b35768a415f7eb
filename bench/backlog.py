"""Claim latency vs backlog: p50/p99 of ``claim_next`` with 10³ … 10⁶ pending todos.

The backlog grows in place (10³, then 9·10³ more, …) through the bulk fast path (PostgreSQL
``INSERT … SELECT generate_series``; SQLite batched ``executemany``), never through ingest. At each
size one claimer runs ``--claims`` ``claim_next`` calls, each timed alone; every claimed todo is then
completed (each complete timed too) so the claimed set stays as small as in a healthy queue. The
pick walks the partial index ``ix_todos_claimable`` and a complete finds its todo by key, so the
figures should stay flat as the backlog grows.

Building 10⁶ rows on SQLite costs tens of seconds on a 2-core machine; ``--max`` bounds the largest
size (and ``--build-seconds`` stops growing once a build step took longer than that).

    .venv/bin/python -m bench.backlog --db both --sizes 1000,10000,100000,1000000
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bulk import analyze, bulk_pending, hold_statistics
from bench.common import (
    Latencies,
    Report,
    engines_of,
    heading,
    machine,
    make_services,
    new_key,
    parser,
    positive_ints,
    private_database,
    provision,
    run,
)
from switchboard import todos
from switchboard.db import Database
from switchboard.models import Endpoint

DEFAULT_SIZES = [1_000, 10_000, 100_000, 1_000_000]
# Bound on the timed claims at one size (a slow pick must not turn a run into an hour).
CLAIM_SECONDS = 30.0


def is_claim(statement: str) -> bool:
    """Is this the claim's pick-and-update? PostgreSQL runs it as one statement with CTEs
    (``WITH picked AS (… FOR UPDATE SKIP LOCKED) UPDATE todos …``), SQLite as ``UPDATE todos … FROM``."""
    head = statement.lstrip().upper()
    return head.startswith("UPDATE TODOS") or (head.startswith("WITH") and "UPDATE TODOS" in head)


async def claim_plan(db: Database, endpoint: Endpoint) -> str:
    """The plan of the statement ``claim_next`` really runs, with its real parameters.

    One (untimed) ``claim_next`` is made with a tap on the statements the database runs on the
    driver (``db.statement_taps``: the claim goes to SQLite's writer thread or PostgreSQL's asyncpg
    connection directly) catching the claim statement; that statement is then EXPLAINed (never
    executed) and the claimed todo completed.
    """
    caught: list[tuple[str, Any]] = []

    def grab(statement: str, parameters: Any) -> None:
        if not caught and is_claim(statement):
            caught.append((statement, tuple(parameters)))

    db.statement_taps.append(grab)
    try:
        todo = await todos.claim_next(db, endpoint)
    finally:
        db.statement_taps.remove(grab)
    if todo is not None:
        await todos.complete(db, endpoint, todo["id"])
    if not caught:
        return "(claim_next ran no claim statement)"
    statement, parameters = caught[0]
    async with db.read() as s:
        conn = await s.connection()
        if db.is_sqlite:
            rows = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)).all()
            return "; ".join(str(r[-1]) for r in rows)
        raw = await conn.get_raw_connection()
        # Any: asyncpg's connection (untyped); a live pooled connection always has one.
        driver: Any = raw.driver_connection
        lines = await driver.fetch("EXPLAIN " + statement, *parameters)
        return "; ".join(str(r[0]).strip() for r in lines)


_SCAN = re.compile(
    r"Index (?:Only )?Scan using (\S+)|Bitmap Index Scan on (\S+)|USING (?:COVERING )?INDEX (\S+)"
    r"|(Seq Scan)|(SCAN todos)"
)
# Where the pick starts in a plan: PostgreSQL's CTE (or an older InitPlan), SQLite's subquery or
# the FROM clause's materialised pick.
_PICK = ("CTE picked", "InitPlan", "SUBQUERY", "MATERIALIZE", "CO-ROUTINE")


def index_walked(plan: str) -> str:
    """The index the pick walks (the first scan inside the pick's part of the plan, else the first)."""
    parts = [p.strip() for p in plan.split(";")]
    starts = [i for i, part in enumerate(parts) if any(mark in part for mark in _PICK)]
    for i in [*starts[:1], -1]:
        for later in parts[i + 1 :]:
            found = _SCAN.search(later)
            if found:
                return next(g for g in found.groups() if g)
    return "?"


async def measure(
    engine: str,
    sizes: list[int],
    claims: int,
    build_seconds: float,
    history: int,
    analyze_after: bool,
    report: Report,
) -> None:
    heading(f"claim_next latency vs backlog on {engine}: sizes {sizes}, {history} done todos before them")
    async with private_database(engine) as bench_db:
        services = make_services(bench_db, new_key())
        db = services.db
        try:
            tenant = await provision(services, source=None, families=())
            endpoint = tenant.endpoint
            pending = 0
            inserted = 0
            if history:
                # Finished todos older than every pending one: a pick that walked the endpoint's
                # whole history instead of the claimable index would slow down with them.
                took = await bulk_pending(db, endpoint.id, tenant.queue, history, state="done", age_days=60)
                inserted = history
                print(f"  history: {history} done todos in {took:.1f}s")
            for size in sorted(sizes):
                # Top the pending backlog up to exactly `size`.
                grow = size - pending
                took = 0.0
                if grow > 0:
                    took = await bulk_pending(db, endpoint.id, tenant.queue, grow, first=inserted)
                    inserted += grow
                    pending += grow
                if not db.is_sqlite and (analyze_after or size == min(sizes)):
                    await analyze(db)
                    if not analyze_after:
                        # Stale statistics: those of the smallest size, held while the backlog grows
                        # (as when autovacuum has not caught up), so plans kept from then are tested.
                        await hold_statistics(db)
                plan = await claim_plan(db, endpoint)
                pending -= 1
                latencies = Latencies()
                claimed: list[str] = []
                stop_at = time.monotonic() + CLAIM_SECONDS
                for _ in range(claims):
                    if time.monotonic() > stop_at:
                        break
                    started = time.perf_counter()
                    todo = await todos.claim_next(db, endpoint)
                    latencies.add(time.perf_counter() - started)
                    if todo is None:
                        break
                    claimed.append(todo["id"])
                # The completes are timed too: they run where PostgreSQL may keep a plan made at the
                # first, smallest size (``generic_plans``), which must not scan the grown table.
                completes = Latencies()
                for todo_id in claimed:
                    started = time.perf_counter()
                    await todos.complete(db, endpoint, todo_id)
                    completes.add(time.perf_counter() - started)
                pending -= len(claimed)
                report.add(
                    engine=engine,
                    backlog=size,
                    history=history,
                    build_seconds=round(took, 1),
                    rows_per_second=round(grow / took) if took > 0 else None,
                    **{f"claim_{k}": v for k, v in latencies.summary().items()},
                    **{f"complete_{k}": v for k, v in completes.summary().items()},
                    analyzed=analyze_after or db.is_sqlite,
                    pick_index=index_walked(plan),
                    plan=plan,
                )
                if took > build_seconds:
                    print(f"  (stopping: this step took {took:.0f}s > --build-seconds {build_seconds:.0f})")
                    break
        finally:
            await db.dispose()


async def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", type=positive_ints, default=DEFAULT_SIZES)
    p.add_argument("--claims", type=int, default=300, help="timed claim_next calls per size")
    p.add_argument("--history", type=int, default=0, help="done todos older than the backlog")
    p.add_argument(
        "--no-analyze",
        action="store_true",
        help="PostgreSQL: statistics of the smallest size, held (autovacuum off for the run's tables),"
        " not a fresh ANALYZE at each size",
    )
    p.add_argument(
        "--build-seconds", type=float, default=300.0, help="stop growing after a slower build step"
    )
    args = p.parse_args()
    if args.claims < 1 or args.build_seconds <= 0 or args.history < 0:
        p.error("--claims and --build-seconds must be positive, --history not negative")
    print(machine())
    report = Report("claim_backlog", args.json_path)
    for engine in engines_of(args.db):
        await measure(
            engine, args.sizes, args.claims, args.build_seconds, args.history, not args.no_analyze, report
        )


if __name__ == "__main__":
    run(main)
