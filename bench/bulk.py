"""A backlog grown in bulk, for the claim benchmarks (``bench.backlog``, ``bench.claim``): the
fast path (PostgreSQL ``INSERT … SELECT generate_series``, SQLite batched ``executemany``), not the
ingest path, which is measured on its own; and the planner's statistics, made or held."""

from __future__ import annotations

import time
from datetime import timedelta

from sqlalchemy import text

from switchboard.db import Database, utcnow

SQLITE_BATCH = 20_000
# How SQLAlchemy stores a DateTime in SQLite (UTC, as the models write it).
SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


async def bulk_pending(
    db: Database,
    endpoint_id: str,
    queue: str,
    count: int,
    *,
    first: int = 0,
    state: str = "pending",
    age_days: int = 30,
) -> float:
    """Insert ``count`` todos numbered ``first…first+count-1``; returns the seconds taken.

    PostgreSQL: one ``INSERT … SELECT … FROM generate_series``. SQLite: batched ``executemany``
    under ``BEGIN IMMEDIATE``. The rows are ordinary todos (oldest first by number) with their
    doorbell already rung (``next_ring_at`` null), so the ring sweeper leaves them alone; ``state``
    ``done`` makes finished history instead of backlog, each todo with the attempt that finished it.
    """
    if state not in ("pending", "done"):
        raise ValueError(f"state must be pending or done, not {state!r}")
    started = time.perf_counter()
    # Older than anything a benchmark creates afterwards, in number order.
    base = utcnow() - timedelta(days=age_days)
    if not db.is_sqlite:
        async with db.write() as s:
            await s.execute(
                text(
                    """
                    INSERT INTO todos (id, endpoint_id, queue, source, kind, title, state, attempt,
                        max_attempts, dead_letter, payload, payload_size, ring_count, next_ring_at,
                        created_at, updated_at)
                    SELECT 'td_bench' || lpad(g::text, 12, '0'), :endpoint, :queue, 'bench', 'bench',
                        'bench todo ' || g, :state, 0, 5, false, '\\x7b7d'::bytea, 2, 0, NULL,
                        CAST(:base AS timestamptz) + g * interval '1 millisecond',
                        CAST(:base AS timestamptz) + g * interval '1 millisecond'
                    FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g
                    """
                ),
                {
                    "endpoint": endpoint_id,
                    "queue": queue,
                    "state": state,
                    "base": base,
                    "lo": first,
                    "hi": first + count - 1,
                },
            )
            if state == "done":
                # History as real history is: each finished todo with the attempt that finished it.
                await s.execute(
                    text(
                        """
                        INSERT INTO attempts (id, todo_id, number, endpoint_id, claimed_at,
                            lease_expires_at, heartbeats, outcome, ended_at)
                        SELECT 'at_bench' || lpad(g::text, 12, '0'),
                            'td_bench' || lpad(g::text, 12, '0'), 1, :endpoint, at, at, 0, 'completed', at
                        FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g,
                            LATERAL (
                                SELECT CAST(:base AS timestamptz) + g * interval '1 millisecond'
                            ) AS t(at)
                        """
                    ),
                    {"endpoint": endpoint_id, "base": base, "lo": first, "hi": first + count - 1},
                )
        return time.perf_counter() - started
    # The driver's executemany with the values already in SQLAlchemy's SQLite storage form (the
    # ORM's per-row type processing would triple the cost of a 10^6-row build).
    sql = (
        "INSERT INTO todos (id, endpoint_id, queue, source, kind, title, state, attempt, max_attempts,"
        " dead_letter, payload, payload_size, ring_count, next_ring_at, created_at, updated_at)"
        " VALUES (?, ?, ?, 'bench', 'bench', ?, ?, 0, 5, 0, X'7b7d', 2, 0, NULL, ?, ?)"
    )
    attempts_sql = (
        "INSERT INTO attempts (id, todo_id, number, endpoint_id, claimed_at, lease_expires_at,"
        " heartbeats, outcome, ended_at) VALUES (?, ?, 1, ?, ?, ?, 0, 'completed', ?)"
    )
    base_naive = base.replace(tzinfo=None)
    for lo in range(first, first + count, SQLITE_BATCH):
        hi = min(lo + SQLITE_BATCH, first + count)
        rows, attempts = [], []
        for g in range(lo, hi):
            at = (base_naive + timedelta(milliseconds=g)).strftime(SQLITE_TIME)
            rows.append((f"td_bench{g:012d}", endpoint_id, queue, f"bench todo {g}", state, at, at))
            if state == "done":
                attempts.append((f"at_bench{g:012d}", f"td_bench{g:012d}", endpoint_id, at, at, at))
        async with db.write() as s:
            conn = await s.connection()
            await conn.exec_driver_sql(sql, rows)
            if attempts:
                await conn.exec_driver_sql(attempts_sql, attempts)
    return time.perf_counter() - started


async def analyze(db: Database) -> None:
    """Refresh planner statistics after a bulk load, as autovacuum / a routine ANALYZE would."""
    async with db.write() as s:
        await s.execute(text("ANALYZE"))


async def hold_statistics(db: Database) -> None:
    """PostgreSQL: keep the planner statistics as they are now (no autovacuum ANALYZE of the todo
    tables for the rest of this private database's life)."""
    async with db.write() as s:
        for table in ("todos", "attempts", "replies"):
            await s.execute(text(f"ALTER TABLE {table} SET (autovacuum_enabled = off)"))
