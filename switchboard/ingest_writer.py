"""Group commit for ingest: one writer per process stores the deliveries of many requests at once.

A request does everything that needs no database itself (verify, keys, address, echo clues, the
rows), hands the writer its rows and awaits the answer. The writer commits whatever accumulated
while its previous commit ran (at most ``MAX_BATCH`` deliveries) in one transaction:

1. the batch's webhook configurations, read again (share-locked on PostgreSQL): a delivery decided
   on a configuration that has changed since is answered ``stale`` and decided again;
2. every event in one ``INSERT … ON CONFLICT DO NOTHING RETURNING id``: an event that hits a unique
   key (a delivery already stored, by this batch or before) is a ``duplicate``;
3. the todos of the events that went in, in one multi-row ``INSERT``; those with a ``once`` key
   (docs/routing.md, "Actions") in a second one that skips a todo whose endpoint, queue and key an
   open todo already holds (``uq_todos_once``): that delivery's event trace is updated, in the same
   transaction, to name the open todo it was folded into.

Then the doorbell hears of the new todos (once per batch; never of a held one) and every request
is answered. A batch
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

from sqlalchemy import Insert, Table, and_, or_, select, text, update
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
# ``once`` todos: skipped when an open todo holds the same (endpoint, queue, key); the partial
# unique index is named by its columns and predicate, the only way ON CONFLICT can infer it.
_ONCE_COLUMNS = [TODOS.c.endpoint_id, TODOS.c.queue, TODOS.c.once_key]
_ONCE_WHERE = text("once_key IS NOT NULL AND state IN ('pending', 'claimed')")
_SQLITE_ONCE = (
    sqlite.insert(TODOS)
    .on_conflict_do_nothing(index_elements=_ONCE_COLUMNS, index_where=_ONCE_WHERE)
    .returning(TODOS.c.id)
)
_PG_ONCE = (
    postgresql.insert(TODOS)
    .on_conflict_do_nothing(index_elements=_ONCE_COLUMNS, index_where=_ONCE_WHERE)
    .returning(TODOS.c.id)
)


@dataclass(frozen=True)
class Rows:
    """One delivery as the writer stores it: the event row, its todo rows (empty unless routed),
    and what they were decided on: the configuration and the endpoint ids of *all* its live
    targets (``config.targets``), whichever of them intake chose, so that a delivery whose rules
    chose some of them is not found changed on every attempt."""

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
            statuses, folded = await self._transaction([p.rows for p in batch])
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
            mine = {str(t["id"]): folded[str(t["id"])] for t in pending.rows.todos if str(t["id"]) in folded}
            pending.result = Result(status, folded=mine)
        await self._ring([p.rows for p, s in zip(batch, statuses, strict=True) if s == "stored"], folded)

    async def _transaction(self, batch: Sequence[Rows]) -> tuple[list[Status], dict[str, str | None]]:
        statuses: list[Status] = ["stale"] * len(batch)
        folded: dict[str, str | None] = {}
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
                return statuses, folded
            keep.sort(key=lambda n: batch[n].sort_key)
            conn = await session.connection()
            inserted = await self._insert_events(conn, [batch[n].event for n in keep])
            todos = [todo for n in keep if batch[n].event["id"] in inserted for todo in batch[n].todos]
            plain = [todo for todo in todos if todo.get("once_key") is None]
            if plain:
                await conn.execute(self._insert(TODOS), plain)
            once = [todo for todo in todos if todo.get("once_key") is not None]
            if once:
                folded = await self._insert_once(conn, once, [batch[n] for n in keep])
            for n in keep:
                statuses[n] = "stored" if batch[n].event["id"] in inserted else "duplicate"
        return statuses, folded

    def _insert(self, table: Table) -> Insert:
        return (_SQLITE_INSERTS if self.services.db.is_sqlite else _PG_INSERTS)[table.name]

    async def _insert_events(self, conn: AsyncConnection, events: list[dict[str, Any]]) -> set[str]:
        """Insert the events, skipping any that hit a unique key; the ids that went in."""
        statement = _SQLITE_NEW_EVENTS if self.services.db.is_sqlite else _PG_NEW_EVENTS
        return {str(event_id) for event_id in (await conn.execute(statement, events)).scalars()}

    async def _insert_once(
        self, conn: AsyncConnection, once: list[dict[str, Any]], kept: list[Rows]
    ) -> dict[str, str | None]:
        """Insert the ``once`` todos, skipping those an open todo already holds the key of; for
        each skipped one, the open todo's id (by the skipped todo's id), also written into its
        event's routing trace (docs/routing.md, "The routing trace")."""
        statement = _SQLITE_ONCE if self.services.db.is_sqlite else _PG_ONCE
        went = {str(todo_id) for todo_id in (await conn.execute(statement, once)).scalars()}
        skipped = [todo for todo in once if str(todo["id"]) not in went]
        if not skipped:
            return {}
        keys = [(t["endpoint_id"], t["queue"], t["once_key"]) for t in skipped]
        open_now = await conn.execute(
            select(TODOS.c.id, TODOS.c.endpoint_id, TODOS.c.queue, TODOS.c.once_key).where(
                TODOS.c.state.in_(("pending", "claimed")),
                or_(*(and_(*(c == v for c, v in zip(_ONCE_COLUMNS, key, strict=True))) for key in keys)),
            )
        )
        holder = {(row.endpoint_id, row.queue, row.once_key): str(row.id) for row in open_now}
        folded = {str(t["id"]): holder.get((t["endpoint_id"], t["queue"], t["once_key"])) for t in skipped}
        for rows in kept:
            trace = _folded_trace(rows, folded)
            if trace is not None:
                await conn.execute(
                    update(EVENTS).where(EVENTS.c.id == rows.event["id"]).values(routing=trace)
                )
        return folded

    async def _ring(self, stored: list[Rows], folded: dict[str, str | None]) -> None:
        """After the commit: count the new todos and ring the doorbell for them, once per batch.
        A held todo (quarantined) and a ``once`` todo that was not stored ring nothing."""
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
            await self.services.todos_created(ids)

    @staticmethod
    def _answer(batch: list[_Pending]) -> None:
        for pending in batch:
            if not pending.future.done():
                pending.future.set_result(pending.result or Result("failed"))


def _folded_trace(rows: Rows, folded: dict[str, str | None]) -> dict[str, Any] | None:
    """``rows``' event trace with each folded todo's target marked ``once`` and the open todo named;
    None when none of its todos was folded."""
    mine = [t for t in rows.todos if str(t["id"]) in folded]
    trace = rows.event.get("routing")
    if not mine or not isinstance(trace, dict):
        return None
    config = rows.config
    slugs = {e.id: e.slug for e in (config.owner, *config.routed)}
    targets = [dict(o) for o in trace.get("targets") or []]
    notes = []
    for todo in mine:
        into = folded[str(todo["id"])]
        slug = slugs.get(todo["endpoint_id"], todo["endpoint_id"])
        for outcome in targets:
            if outcome.get("endpoint") == slug and outcome.get("queue") == todo["queue"]:
                outcome.update(outcome="once", open=into)
        notes.append(
            f"once: open todo {into} exists on {slug}" if into else f"once: an open todo existed on {slug}"
        )
    return {**trace, "targets": targets, "why": "; ".join([str(trace.get("why", "")), *notes])}
