"""Group commit for ingest: one writer per process stores the deliveries of many requests at once.

A request does everything that needs no database itself (verify, keys, address, echo clues, the
rows), hands the writer its rows and awaits the answer. The writer commits whatever accumulated
while its previous commit ran (at most ``MAX_BATCH`` deliveries) in one transaction:

1. the batch's webhook configurations, read again (share-locked on PostgreSQL): a delivery decided
   on a configuration that has changed since is answered ``stale`` and decided again;
2. every event in one ``INSERT … ON CONFLICT DO NOTHING RETURNING id``: an event that hits a unique
   key (a delivery already stored, by this batch or before) is a ``duplicate``;
3. the todos of the events that went in, in one multi-row ``INSERT``.

Then the doorbell hears of the new todos (once per batch) and every request is answered. A batch
whose transaction fails for a reason other than an outage is split in halves and each half retried,
so one poison delivery (a row a constraint refuses) is answered ``failed`` and stores nothing while
its neighbours are stored. When the database is unavailable every delivery of the batch is answered
``unavailable``. Nothing is answered ``stored`` before its transaction has committed.

A request that is cancelled (the sender hung up) only loses its answer: if its rows were already
taken into a batch they are stored, and the sender's retry is then answered as a duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from sqlalchemy import Insert, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from switchboard.db import is_unavailable, utcnow
from switchboard.ingest_config import WebhookConfig, current_stamps
from switchboard.models import Event, Todo
from switchboard.services import Services

log = logging.getLogger("switchboard.ingest")

MAX_BATCH = 256

Status = Literal["stored", "duplicate", "stale", "failed", "unavailable"]

EVENTS = cast(Table, Event.__table__)
TODOS = cast(Table, Todo.__table__)
# Built once: an event that hits a unique key is skipped, and only the ids that went in come back.
_SQLITE_NEW_EVENTS = sqlite.insert(EVENTS).on_conflict_do_nothing().returning(EVENTS.c.id)
_PG_NEW_EVENTS = postgresql.insert(EVENTS).on_conflict_do_nothing().returning(EVENTS.c.id)
_SQLITE_INSERTS = {TODOS.name: sqlite.insert(TODOS)}
_PG_INSERTS = {TODOS.name: postgresql.insert(TODOS)}


@dataclass(frozen=True)
class Rows:
    """One delivery as the writer stores it: the event row, its todo rows (empty unless routed),
    and what they were decided on (the configuration and the endpoint ids of its live targets)."""

    config: WebhookConfig
    target_ids: tuple[str, ...]
    event: dict[str, Any]
    todos: list[dict[str, Any]]
    source: str

    @property
    def sort_key(self) -> tuple[str, str]:
        # Every writer inserts in this order, so two processes storing overlapping batches take
        # their unique-key locks in the same order (PostgreSQL) instead of deadlocking.
        return (self.config.id, str(self.event["delivery_key"]))


@dataclass(frozen=True)
class Result:
    status: Status
    # The database error behind ``failed`` or ``unavailable``, for the log line.
    error: BaseException | None = None


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
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="switchboard:ingest-writer")
        pending = _Pending(rows, asyncio.get_running_loop().create_future())
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
            batch: list[_Pending] = []
            while self._queue and len(batch) < self.max_batch:
                pending = self._queue.popleft()
                # A request that was cancelled before its batch began needs nothing stored.
                if not pending.future.done():
                    batch.append(pending)
            if not batch:
                continue
            try:
                await self._store(batch)
            except Exception as exc:  # a bug here must not stop the writer or strand a request
                log.exception("ingest writer: storing a batch failed")
                for pending in batch:
                    pending.result = pending.result or Result("failed", exc)
            self._answer(batch)

    async def _store(self, batch: list[_Pending]) -> None:
        """Commit ``batch``, splitting it on a failure that is not an outage; then ring."""
        try:
            statuses = await self._transaction([p.rows for p in batch])
        except Exception as exc:
            if is_unavailable(exc):
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
        for pending, status in zip(batch, statuses, strict=True):
            pending.result = Result(status)
        await self._ring([p.rows for p, s in zip(batch, statuses, strict=True) if s == "stored"])

    async def _transaction(self, batch: Sequence[Rows]) -> list[Status]:
        statuses: list[Status] = ["stale"] * len(batch)
        async with self.services.db.write() as session:
            now = utcnow()
            current = await current_stamps(session, (rows.config.id for rows in batch))
            keep: list[int] = []
            for n, rows in enumerate(batch):
                if current.get(rows.config.id) != rows.config.stamp:
                    continue
                # The same rows: their live targets now (an endpoint may have expired since).
                if tuple(t.endpoint_id for t in rows.config.targets(now)) != rows.target_ids:
                    continue
                keep.append(n)
            if not keep:
                return statuses
            keep.sort(key=lambda n: batch[n].sort_key)
            conn = await session.connection()
            inserted = await self._insert_events(conn, [batch[n].event for n in keep])
            todos = [todo for n in keep if batch[n].event["id"] in inserted for todo in batch[n].todos]
            if todos:
                await conn.execute(self._insert(TODOS), todos)
            for n in keep:
                statuses[n] = "stored" if batch[n].event["id"] in inserted else "duplicate"
        return statuses

    def _insert(self, table: Table) -> Insert:
        return (_SQLITE_INSERTS if self.services.db.is_sqlite else _PG_INSERTS)[table.name]

    async def _insert_events(self, conn: AsyncConnection, events: list[dict[str, Any]]) -> set[str]:
        """Insert the events, skipping any that hit a unique key; the ids that went in."""
        statement = _SQLITE_NEW_EVENTS if self.services.db.is_sqlite else _PG_NEW_EVENTS
        return {str(event_id) for event_id in (await conn.execute(statement, events)).scalars()}

    async def _ring(self, stored: list[Rows]) -> None:
        """After the commit: count the new todos and ring the doorbell for them, once per batch."""
        ids: list[str] = []
        for rows in stored:
            if rows.todos:
                self.services.metrics.inc(
                    "switchboard_todos_created_total", float(len(rows.todos)), source=rows.source
                )
                ids += [str(todo["id"]) for todo in rows.todos]
        if ids:
            await self.services.todos_created(ids)

    @staticmethod
    def _answer(batch: list[_Pending]) -> None:
        for pending in batch:
            if not pending.future.done():
                pending.future.set_result(pending.result or Result("failed"))
