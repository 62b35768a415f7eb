"""Group commit for ingest: one writer per process stores the deliveries of many requests at once.

A request does everything that needs no database itself (verify, keys, address, echo clues, the
rows), hands the writer its rows and awaits the answer. The writer commits whatever accumulated
while its previous commit ran (at most ``MAX_BATCH`` deliveries) in one transaction, one batch at a
time. Two processes' writers (or a redelivery's batch and a webhook's) may hold the same delivery:
they are told apart by its unique keys. The batch's transaction, and the statements each engine
runs it in, are ``ingest_statements``.

Then the doorbell hears of the new todos (once per batch; never of a held one) and every request
is answered. A batch whose transaction fails for a reason other than an outage is split in halves
and each half retried, so one poison delivery (a row a constraint refuses) is answered ``failed``
and stores nothing while its neighbours are stored. When the database is unavailable every
delivery of the batch is answered ``unavailable``. Nothing is answered ``stored`` before its
transaction has committed.

A request that is cancelled (the sender hung up) only loses its answer: if its rows were already
taken into a batch they are stored, and the sender's retry is then answered as a duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from switchboard import ingest_statements as statements
from switchboard.db import is_unavailable
from switchboard.ingest_statements import Rows, Status
from switchboard.services import Services

log = logging.getLogger("switchboard.ingest")

MAX_BATCH = 256

# The group commit as /metrics shows it (described in ``metrics.standard``).
TRANSACTIONS_METRIC = "switchboard_ingest_transactions_total"
BATCH_METRIC = "switchboard_ingest_batch_deliveries"
COMMIT_METRIC = "switchboard_ingest_commit_seconds"


@dataclass(frozen=True)
class Result:
    status: Status
    # The database error behind ``failed`` or ``unavailable``, for the log line.
    error: BaseException | None = None
    # ``once`` todos not stored: their id -> the open todo holding their key (None: it ended
    # between the conflict and the read).
    folded: dict[str, str | None] = field(default_factory=dict)


@dataclass(eq=False)
class _Pending:
    rows: Rows
    future: asyncio.Future[Result]
    result: Result | None = field(default=None)


class IngestWriter:
    """The process's ingest writer. ``submit`` starts it on first use; ``close`` drains it."""

    def __init__(self, services: Services, max_batch: int = MAX_BATCH) -> None:
        self.services = services
        self.max_batch = max_batch
        self._queue: deque[_Pending] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        # For tests and the log: how many transactions and deliveries went through.
        self.batches = 0
        self.deliveries = 0

    @property
    def waiting(self) -> int:
        """Deliveries handed in and not yet taken into a batch."""
        return len(self._queue)

    async def submit(self, rows: Rows) -> Result:
        """Store one delivery; the answer comes once its batch has committed (or failed)."""
        if self._closing:
            return Result("unavailable", RuntimeError("the ingest writer is shutting down"))
        # Asked once: each asking costs a getpid() system call (asyncio checks for a fork).
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="switchboard:ingest-writer")
        pending = _Pending(rows, loop.create_future())
        self._queue.append(pending)
        self._wake.set()
        return await pending.future

    async def close(self) -> None:
        """Store what was handed in, then stop (requests still waiting are answered first)."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            # A batch is whatever accumulated while the previous one was being stored.
            batch: list[_Pending] = []
            while self._queue and len(batch) < self.max_batch:
                pending = self._queue.popleft()
                # A request that was cancelled before its batch began needs nothing stored.
                if not pending.future.done():
                    batch.append(pending)
            if not batch:
                continue
            # One transaction at a time, in a task of its own so that a batch taken is stored and
            # answered even if this loop is cancelled. Two at once (the next batch sent while the
            # previous one committed) paid while a batch took six round trips on PostgreSQL; since
            # it takes one, two only made the batches smaller: one costs 9-13% less server CPU per
            # delivery, side by side (bench/HISTORY.md).
            await asyncio.wait(
                {asyncio.get_running_loop().create_task(self._commit(batch), name="switchboard:ingest-batch")}
            )

    async def _commit(self, batch: list[_Pending]) -> None:
        """Store ``batch`` and answer each of its requests, whatever happens."""
        try:
            await self._store(batch)
        except Exception as exc:  # a bug here must not stop the writer or strand a request
            log.exception("ingest writer: storing a batch failed")
            for pending in batch:
                pending.result = pending.result or Result("failed", exc)
        finally:
            self._answer(batch)

    async def _store(self, batch: list[_Pending]) -> None:
        """Commit ``batch``, splitting it on a failure that is not an outage; then ring."""
        metrics = self.services.metrics
        started = time.perf_counter()
        rows = [p.rows for p in batch]
        try:
            statuses, folded = await self._transaction(rows)
        except Exception as exc:
            outage = is_unavailable(exc)
            metrics.inc(TRANSACTIONS_METRIC, outcome="unavailable" if outage else "failed")
            if outage:
                for pending in batch:
                    pending.result = Result("unavailable", exc)
            elif len(batch) == 1:
                log.error(
                    "ingest: a delivery on webhook %s could not be stored (%s); answered 503",
                    batch[0].rows.config.id,
                    type(exc).__name__,
                )
                batch[0].result = Result("failed", exc)
            else:
                half = len(batch) // 2
                await self._store(batch[:half])
                await self._store(batch[half:])
            return
        self.batches += 1
        self.deliveries += len(batch)
        # Per transaction, not per delivery: what an operator watches the group commit by.
        metrics.inc(TRANSACTIONS_METRIC, outcome="committed")
        metrics.observe(BATCH_METRIC, len(batch))
        metrics.observe(COMMIT_METRIC, time.perf_counter() - started)
        for pending, status in zip(batch, statuses, strict=True):
            mine = {str(t["id"]): folded[str(t["id"])] for t in pending.rows.todos if str(t["id"]) in folded}
            pending.result = Result(status, folded=mine)
        stored = [p.rows for p, s in zip(batch, statuses, strict=True) if s == "stored"]
        # The usual batch's own statement told the other processes of its todos (todo_notices).
        await self._ring(stored, folded, published=self._one_statement(rows))

    def _one_statement(self, batch: Sequence[Rows]) -> bool:
        """Whether ``batch`` is stored by ``statements.pg_batch``'s one statement: PostgreSQL, no
        ``once`` todos (the usual batch)."""
        return not self.services.db.is_sqlite and not any(
            t.get("once_key") is not None for rows in batch for t in rows.todos
        )

    async def _transaction(self, batch: Sequence[Rows]) -> tuple[list[Status], dict[str, str | None]]:
        # One write on the driver directly: on SQLite the whole transaction in one hand-off to the
        # writer's thread; on PostgreSQL one asyncpg transaction of a few statements.
        db = self.services.db
        # Every statement finds its rows by key: kept generic plans serve them (Database.run_postgresql).
        if self._one_statement(batch):
            # The usual batch on PostgreSQL: one statement, a transaction by itself (no BEGIN or
            # COMMIT round trips), which also notifies the other processes of its todos.
            return await db.run_steps(statements.pg_batch(batch), transaction=False, generic_plans=True)
        return await db.run_steps(
            statements.transaction(batch, db.dialect), transaction=True, generic_plans=True
        )

    async def _ring(self, stored: list[Rows], folded: dict[str, str | None], *, published: bool) -> None:
        """After the commit: count the new todos and ring the doorbell for them, once per batch
        (``published``: the other processes were told by the batch's statement). A held todo
        (quarantined) and a ``once`` todo that was not stored ring nothing."""
        ids: list[str] = []
        for rows in stored:
            made = [
                str(t["id"]) for t in rows.todos if t.get("state") != "held" and str(t["id"]) not in folded
            ]
            if made:
                self.services.metrics.inc(
                    "switchboard_todos_created_total", float(len(made)), source=rows.source
                )
                ids += made
        if ids:
            await self.services.todos_created(ids, published=published)

    @staticmethod
    def _answer(batch: list[_Pending]) -> None:
        for pending in batch:
            if not pending.future.done():
                pending.future.set_result(pending.result or Result("failed"))
