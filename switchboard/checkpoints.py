"""SQLite's WAL checkpoints, off the writer's path (issue 12).

In WAL mode a commit appends its pages to the ``-wal`` file, and a checkpoint copies them back into
the database file so that the log can start over. By default the connection that commits does that
itself once the log passes 1,000 pages (``wal_autocheckpoint``): inside the writer's turn, so every
write queued behind it waits for the copy and its two fsyncs. A delivery is about 14 pages (its body
and its payload); with 32 senders the writer's thread spent a quarter of its time in checkpoints,
and ingest stored 1,230 deliveries/s with them against 1,560 with none; with this module, 26-34%
more than before side by side (bench/HISTORY.md).

``Checkpointer`` copies the pages from a connection of its own, on a thread, while the writer goes
on committing: SQLite lets a checkpoint run beside a writer, and never blocks a reader for one.

A log starts over only when a write begins with every page of it copied, which a checkpoint beside a
writer that never pauses does not achieve. So once a pass leaves the log longer than
``restart_pages``, the last pages (those committed while the pass ran) are copied in the writer's
own turn, between two writes (``Database.on_sqlite_writer``), and the next write starts the log
over. While the checkpointer runs, the writer's own bound is ``WRITER_BOUND_PAGES`` rather than
1,000 (``Database.sqlite_wal_bound``, which a writer connection opened after an outage gets too; the
bound it had is put back when the checkpointer stops): if the checkpointer falls behind or fails,
the writer checkpoints itself as before. That costs speed, never the bound on the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from urllib.request import pathname2url

from switchboard.db import Database

log = logging.getLogger(__name__)

# The writer's bound while a checkpointer runs: it checkpoints itself only if the log outgrows this
# (160 MB of 4 KiB pages), which a running checkpointer keeps it from.
WRITER_BOUND_PAGES = 40_000
# A log longer than this after a pass has its last pages copied in the writer's turn (16 MB).
RESTART_PAGES = 4_000
# After the first write of a quiet spell, a pass waits this long for others to join it.
PAUSE_SECONDS = 0.05
# After a pass that failed (the file unreadable, the disk full), the next one waits this long.
RETRY_SECONDS = 5.0


class Checkpointer:
    """The background checkpoints of one SQLite file database (``start``, then ``close``)."""

    def __init__(
        self,
        db: Database,
        *,
        restart_pages: int = RESTART_PAGES,
        writer_bound_pages: int = WRITER_BOUND_PAGES,
        pause: float = PAUSE_SECONDS,
    ) -> None:
        if db.sqlite_file is None:
            raise ValueError("background checkpoints need a SQLite file database")
        self.db, self.path = db, db.sqlite_file
        self.restart_pages, self.writer_bound_pages, self.pause = restart_pages, writer_bound_pages, pause
        # Passes made, and how many of them ended with the writer's turn that restarts the log.
        self.passes = self.restarts = 0
        self._wrote = asyncio.Event()
        self._stop = asyncio.Event()
        self._conn: sqlite3.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._warned_at = float("-inf")
        # The writer's bound before ``start`` raised it (SQLite's default), for ``close`` to put back.
        self._bound_before = db.sqlite_wal_bound

    def start(self) -> None:
        # A writer connection opened from now on starts with the raised bound (``Database``'s
        # connect hook); the one already open gets it at the first pass.
        self.db.sqlite_wal_bound = self.writer_bound_pages
        self.db.write_taps.append(self._wrote.set)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="switchboard:checkpoints")

    async def close(self) -> None:
        """Stop after the pass in progress, and give the writer its own checkpoints back."""
        if self._task is None:
            return
        self.db.write_taps.remove(self._wrote.set)
        self.db.sqlite_wal_bound = self._bound_before
        self._stop.set()
        self._wrote.set()
        await self._task
        self._task = None
        try:
            await self.db.on_sqlite_writer(_bound(self._bound_before))
        except Exception as exc:
            # The writer is gone or the file unreachable: a writer opened later starts at the default.
            log.debug("checkpoints: the writer's bound was not put back (%s)", type(exc).__name__)
        if self._conn is not None:
            await asyncio.to_thread(self._conn.close)
            self._conn = None

    async def _run(self) -> None:
        bound_set = False
        while True:
            await self._wrote.wait()
            # Let the writes of a burst gather: one pass then copies them all.
            await self._nap(self.pause)
            if self._stop.is_set():
                return
            self._wrote.clear()
            try:
                if not bound_set:
                    await self.db.on_sqlite_writer(_bound(self.writer_bound_pages))
                    bound_set = True
                await self.run_pass()
            except Exception as exc:  # sqlite3's, the OS's, or the writer's (unavailable)
                self._warn(exc)
                await self._nap(RETRY_SECONDS)

    async def _nap(self, seconds: float) -> None:
        """Sleep, but wake as soon as ``close`` is called."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def run_pass(self) -> tuple[int, int]:
        """One pass: copy what the log holds from this connection; if the log is still longer than
        ``restart_pages``, copy its last pages in the writer's turn. The log's pages and how many of
        them are copied, as the last checkpoint reported them."""
        busy, pages, copied = await asyncio.to_thread(self._checkpoint)
        self.passes += 1
        if not busy and pages > self.restart_pages:
            busy, pages, copied = await self.db.on_sqlite_writer(_passive_checkpoint)
            self.restarts += 1
        return pages, copied

    def _checkpoint(self) -> tuple[int, int, int]:
        # On a thread. PASSIVE never waits: a checkpoint already running (the writer's own, another
        # process's) makes it report busy, and the next pass tries again.
        if self._conn is None:
            # ``mode=rw``: a database file that has gone is an error here, never created anew.
            where = f"file:{pathname2url(os.path.abspath(self.path))}?mode=rw"
            self._conn = sqlite3.connect(where, uri=True, isolation_level=None, check_same_thread=False)
        return _passive_checkpoint(self._conn)

    def _warn(self, exc: BaseException) -> None:
        # One warning a minute at most: a file that stays unreadable would otherwise fill the log.
        now = time.monotonic()
        if now - self._warned_at >= 60:
            self._warned_at = now
            log.warning(
                "checkpoints: a background pass failed (%s); meanwhile the writer checkpoints by itself"
                " once its log passes %d pages",
                type(exc).__name__,
                self.writer_bound_pages,
            )


def _bound(pages: int) -> Callable[[sqlite3.Connection], None]:
    def set_bound(conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA wal_autocheckpoint={int(pages)}").fetchall()

    return set_bound


def _passive_checkpoint(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """(busy, the log's pages, how many of them are copied), as SQLite reports them. On the
    checkpointer's connection, or on the writer's between two writes, where it copies the pages the
    pass left so that the next write starts the log over."""
    busy, pages, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(busy), int(pages), int(copied)
