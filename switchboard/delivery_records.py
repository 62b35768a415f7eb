"""The deliveries of a known webhook that store no event, recorded as small rows (``DeliveryRecord``)
so that its operator sees them in the webhook's delivery log: refusals (401, 408, 413, 429, 503,
400) and duplicates of a delivery stored before.

Off the hot path: ingest hands a note to the process's ``DeliveryRecorder`` (no await, no database
work), which writes what accumulated about once a second in one transaction. Bounded: per webhook,
at most ``PER_MINUTE`` deliveries a minute are recorded one by one; the rest of that minute are
counted in memory and written as one row per (disposition, status, reason) with ``count``, so a 429
flood costs a dictionary update per request and a handful of rows a minute. The buffer itself is
capped (``MAX_BUFFER``); past it notes are dropped and the drop is logged. A note that cannot be
written (the database is down, the webhook was deleted meanwhile) is dropped: the record is an
operator's aid, never part of an answer. The retention job prunes rows older than
``RECORD_RETENTION``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from aiohttp import web
from sqlalchemy import Table, delete, insert, select

from switchboard.db import is_unavailable, utcnow
from switchboard.ids import new_id
from switchboard.models import DeliveryRecord, Webhook
from switchboard.sanitize import clean_line
from switchboard.services import Services

log = logging.getLogger("switchboard.ingest")

PER_MINUTE = 20
WINDOW_SECONDS = 60.0
FLUSH_SECONDS = 1.0
MAX_BUFFER = 5000
MAX_WINDOWS = 10_000
RECORD_RETENTION = timedelta(days=3)
RETENTION_BATCH = 1000

RECORDS = cast(Table, DeliveryRecord.__table__)


@dataclass
class _Overflow:
    """The deliveries of one kind past the bound in one webhook's minute."""

    received_at: datetime
    detail: str
    count: int = 0


@dataclass
class _Window:
    started: float
    recorded: int = 0
    overflow: dict[tuple[str, int, str], _Overflow] = field(default_factory=dict)


class DeliveryRecorder:
    """The process's recorder. ``refused``/``duplicate`` note a delivery; ``flush`` writes."""

    def __init__(self, services: Services, per_minute: int = PER_MINUTE) -> None:
        self.services = services
        self.per_minute = per_minute
        self._buffer: list[dict[str, Any]] = []
        self._windows: dict[str, _Window] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.dropped = 0

    def refused(self, webhook_id: str, status: int, reason: str, detail: str, client: str | None) -> None:
        self._note(webhook_id, "refused", status, reason, detail, client=client)

    def duplicate(
        self, webhook_id: str, key: str | None, original_id: str | None, client: str | None
    ) -> None:
        detail = "already stored: answered with the original's todos"
        self._note(webhook_id, "duplicate", 202, "", detail, key=key, original=original_id, client=client)

    def _note(
        self,
        webhook_id: str,
        disposition: str,
        status: int,
        reason: str,
        detail: str,
        *,
        key: str | None = None,
        original: str | None = None,
        client: str | None = None,
    ) -> None:
        now = time.monotonic()
        window = self._windows.get(webhook_id)
        if window is None or now - window.started >= WINDOW_SECONDS:
            if window is not None:
                self._close_window(webhook_id, window)
            if len(self._windows) >= MAX_WINDOWS:
                self._close_all()
            window = self._windows[webhook_id] = _Window(now)
        if window.recorded >= self.per_minute:
            kind = (disposition, status, reason)
            over = window.overflow.get(kind)
            if over is None:
                over = window.overflow[kind] = _Overflow(utcnow(), clean_line(detail, 120))
            over.count += 1
            self._start()
            return
        window.recorded += 1
        self._add(
            {
                "webhook_id": webhook_id,
                "received_at": utcnow(),
                "disposition": disposition,
                "status": status,
                "reason": reason[:40],
                "detail": clean_line(detail, 200),
                "delivery_key": key,
                "original_event_id": original,
                "count": 1,
                "client": clean_line(client, 100) if client else None,
            }
        )

    def _add(self, row: dict[str, Any]) -> None:
        if len(self._buffer) >= MAX_BUFFER:
            self.dropped += 1
            return
        self._buffer.append(row)
        self._start()

    def _close_window(self, webhook_id: str, window: _Window) -> None:
        """The rows counting a past minute's deliveries beyond the bound."""
        for (disposition, status, reason), over in window.overflow.items():
            self._add(
                {
                    "webhook_id": webhook_id,
                    "received_at": over.received_at,
                    "disposition": disposition,
                    "status": status,
                    "reason": reason,
                    "detail": clean_line(f"{over.count} more within a minute, counted: {over.detail}", 200),
                    "delivery_key": None,
                    "original_event_id": None,
                    "count": over.count,
                    "client": None,
                }
            )
        window.overflow = {}

    def _close_all(self, *, ended_only: bool = False) -> None:
        now = time.monotonic()
        for webhook_id, window in list(self._windows.items()):
            if ended_only and now - window.started < WINDOW_SECONDS:
                continue
            self._close_window(webhook_id, window)
            del self._windows[webhook_id]

    def _start(self) -> None:
        if self._closing or (self._task is not None and not self._task.done()):
            return
        with contextlib.suppress(RuntimeError):  # no running loop (a synchronous caller): flush() later
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="switchboard:delivery-records"
            )

    async def _run(self) -> None:
        while self._buffer or self._windows:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush(ended_only=True)

    async def flush(self, *, ended_only: bool = False) -> int:
        """Write what is buffered (and the counts of the minutes that ended; of all with
        ``ended_only=False``); returns how many rows went in."""
        self._close_all(ended_only=ended_only)
        rows, self._buffer = self._buffer, []
        if self.dropped:
            log.warning("delivery log: %d notes dropped (buffer full)", self.dropped)
            self.dropped = 0
        if not rows:
            return 0
        try:
            async with self.services.db.write() as s:
                ids = {str(r["webhook_id"]) for r in rows}
                # Held until the insert (``FOR KEY SHARE`` on PostgreSQL; SQLite's writes are serial
                # already): a webhook deleted in between would fail the insert's foreign key, and
                # with it every other webhook's rows.
                alive = select(Webhook.id).where(Webhook.id.in_(ids)).with_for_update(key_share=True)
                live = set((await s.scalars(alive)).all())
                rows = [r for r in rows if r["webhook_id"] in live]
                # Ids minted as the rows are written, not when they were noted (up to a second
                # before; a minute's count, up to a minute): the log pages by id, and a row landing
                # behind a cursor already handed out would never be seen by a client paging newer.
                for row in rows:
                    row["id"] = new_id("dr")
                if rows:
                    await s.execute(insert(RECORDS), rows)
        except Exception as exc:
            if not is_unavailable(exc):
                log.exception("delivery log: %d rows could not be written", len(rows))
            else:
                log.warning("delivery log: database unavailable; %d rows dropped", len(rows))
            return 0
        return len(rows)

    async def close(self) -> None:
        """Write everything, the minutes still open included, and stop."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()


DELIVERY_RECORDER = web.AppKey("delivery_recorder", DeliveryRecorder)


async def prune_records(services: Services, now: datetime | None = None) -> int:
    """Delete delivery records older than ``RECORD_RETENTION``, in batches; how many went."""
    cutoff = (now or utcnow()) - RECORD_RETENTION
    total = 0
    while True:
        async with services.db.write() as s:
            ids = list(
                (
                    await s.scalars(
                        select(DeliveryRecord.id)
                        .where(DeliveryRecord.received_at < cutoff)
                        .limit(RETENTION_BATCH)
                    )
                ).all()
            )
            if ids:
                await s.execute(delete(DeliveryRecord).where(DeliveryRecord.id.in_(ids)))
        total += len(ids)
        if len(ids) < RETENTION_BATCH:
            return total
