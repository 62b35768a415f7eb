"""Claim latency vs backlog: p50/p99 of ``claim_next`` with 10³ … 10⁶ pending todos.

The backlog grows in place (10³, then 9·10³ more, …) through the bulk fast path (PostgreSQL
``INSERT … SELECT generate_series``; SQLite batched ``executemany``), never through ingest. At each
size one claimer runs ``--claims`` ``claim_next`` calls, each timed alone; every claimed todo is then
completed (untimed) so the claimed set stays as small as in a healthy queue. The pick walks the
partial index ``ix_todos_claimable``, so the figures should stay flat as the backlog grows.

Building 10⁶ rows on SQLite costs tens of seconds on a 2-core machine; ``--max`` bounds the largest
size (and ``--build-seconds`` stops growing once a build step took longer than that).

    .venv/bin/python -m bench.backlog --db both --sizes 1000,10000,100000,1000000
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text

from bench.common import (
    Latencies,
    Report,
    analyze,
    bulk_pending,
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

DEFAULT_SIZES = [1_000, 10_000, 100_000, 1_000_000]


async def plan_of(db: Database, endpoint_id: str, queue: str) -> str:
    """How the database picks the next todo (to show the partial index is what it walks)."""
    pick = (
        "SELECT id FROM todos WHERE endpoint_id = :e AND state = 'pending' AND queue = :q "
        "ORDER BY created_at LIMIT 1"
    )
    async with db.read() as s:
        if db.is_sqlite:
            rows = await s.execute(text("EXPLAIN QUERY PLAN " + pick), {"e": endpoint_id, "q": queue})
            return "; ".join(str(r[-1]) for r in rows)
        rows = await s.execute(text("EXPLAIN " + pick), {"e": endpoint_id, "q": queue})
        return "; ".join(str(r[0]).strip() for r in rows)


async def measure(
    engine: str, sizes: list[int], claims: int, build_seconds: float, history: int, report: Report
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
                if not db.is_sqlite:
                    await analyze(db)
                latencies = Latencies()
                claimed: list[str] = []
                for _ in range(claims):
                    started = time.perf_counter()
                    todo = await todos.claim_next(db, endpoint)
                    latencies.add(time.perf_counter() - started)
                    if todo is None:
                        break
                    claimed.append(todo["id"])
                for todo_id in claimed:
                    await todos.complete(db, endpoint, todo_id)
                pending -= len(claimed)
                report.add(
                    engine=engine,
                    backlog=size,
                    history=history,
                    build_seconds=round(took, 1),
                    rows_per_second=round(grow / took) if took > 0 else None,
                    **{f"claim_{k}": v for k, v in latencies.summary().items()},
                    plan=await plan_of(db, endpoint.id, tenant.queue),
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
        "--build-seconds", type=float, default=300.0, help="stop growing after a slower build step"
    )
    args = p.parse_args()
    if args.claims < 1 or args.build_seconds <= 0 or args.history < 0:
        p.error("--claims and --build-seconds must be positive, --history not negative")
    print(machine())
    report = Report("claim_backlog", args.json_path)
    for engine in engines_of(args.db):
        await measure(engine, args.sizes, args.claims, args.build_seconds, args.history, report)


if __name__ == "__main__":
    run(main)
