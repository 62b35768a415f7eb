"""SQLite's WAL checkpoints beside the writer (``switchboard.checkpoints``): the log is copied back
into the file off the writer's turn, still starts over under writes that never pause, and a
checkpointer that fails or stops leaves the writer checkpointing by itself."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import sys
import time
import types
from pathlib import Path

import pytest
from fixtures.ingest_kit import fixture_bytes
from sqlalchemy import text

from switchboard import checkpoints
from switchboard.checkpoints import Checkpointer
from switchboard.db import Database
from switchboard.services import Services
from switchboard.testing import github_headers, make_webhook, post

ROW_BYTES = 16_000  # four pages and a bit: enough to grow the log quickly
# SQLite's own ``wal_autocheckpoint``: the writer's bound without a checkpointer, and after one stops.
SQLITE_DEFAULT_BOUND = 1000


@pytest.fixture
def sqlite_db(db: Database) -> Database:
    # The checkpointer is SQLite's alone (PostgreSQL keeps its own log): on PostgreSQL these tests
    # have nothing to run against.
    if db.sqlite_file is None:
        pytest.skip("SQLite's write-ahead log")
    return db


async def _scratch(db: Database) -> None:
    async with db.writing() as conn:
        await conn.execute(text("CREATE TABLE IF NOT EXISTS scratch (b BLOB)"))


async def _write_rows(db: Database, count: int) -> None:
    for _ in range(count):
        async with db.writing() as conn:
            await conn.execute(text("INSERT INTO scratch VALUES (:b)"), {"b": os.urandom(ROW_BYTES)})


def _log_state(path: str) -> tuple[int, int]:
    """(pages in the log, pages of it copied into the file), read without checkpointing: the
    WAL-index header's ``mxFrame`` and its checkpoint information's ``nBackfill``, at the offsets
    https://www.sqlite.org/walformat.html gives (native byte order)."""
    header = Path(path + "-shm").read_bytes()[:136]
    return int.from_bytes(header[16:20], sys.byteorder), int.from_bytes(header[96:100], sys.byteorder)


async def _writer_bound(db: Database) -> int:
    def read(conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])

    return await db.on_sqlite_writer(read)


def _wal_bytes(path: str) -> int:
    return Path(path + "-wal").stat().st_size


async def _settled(checkpointer: Checkpointer, passes: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while checkpointer.passes < passes:
        assert time.monotonic() < deadline, "no background pass ran"
        await asyncio.sleep(0.01)


async def _all_copied(path: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pages, copied = _log_state(path)
        if pages > 0 and copied == pages:
            return
        assert time.monotonic() < deadline, f"{copied} of {pages} pages copied"
        await asyncio.sleep(0.02)


async def test_the_log_is_copied_into_the_file_beside_the_writer(sqlite_db: Database) -> None:
    db = sqlite_db
    assert db.sqlite_file is not None
    await _scratch(db)
    assert await _writer_bound(db) == SQLITE_DEFAULT_BOUND
    checkpointer = Checkpointer(db, pause=0.01)
    checkpointer.start()
    try:
        await _write_rows(db, 20)
        await _settled(checkpointer, 1)
        # The writer checkpoints only past its raised bound, which 20 rows are far from.
        assert await _writer_bound(db) == checkpoints.WRITER_BOUND_PAGES
        await _write_rows(db, 5)
        # Everything the writer committed reaches the file, though the writer never checkpointed
        # (a pass that began during the last writes leaves them to the next).
        await _all_copied(db.sqlite_file)
        async with db.read() as s:
            assert await s.scalar(text("SELECT count(*) FROM scratch")) == 25
    finally:
        await checkpointer.close()
    # Stopped: the writer checkpoints by itself again, at SQLite's default.
    assert await _writer_bound(db) == SQLITE_DEFAULT_BOUND
    assert db.sqlite_wal_bound == SQLITE_DEFAULT_BOUND and not db.write_taps


async def test_the_log_starts_over_under_writes_that_never_pause(sqlite_db: Database) -> None:
    db = sqlite_db
    assert db.sqlite_file is not None
    await _scratch(db)
    checkpointer = Checkpointer(db, restart_pages=60, pause=0.0)
    checkpointer.start()
    try:
        # 300 rows are about 1,200 pages (4.8 MB). Without a restart the log would hold them all.
        await _write_rows(db, 300)
        assert checkpointer.restarts >= 1
        assert _wal_bytes(db.sqlite_file) < 2_000_000
    finally:
        await checkpointer.close()


async def test_without_a_checkpointer_the_raised_bound_lets_the_log_grow(sqlite_db: Database) -> None:
    # The other side of the test above: the writer's raised bound alone keeps every page in the log,
    # so it is the checkpointer's restarts that bound it.
    db = sqlite_db
    assert db.sqlite_file is not None
    await _scratch(db)
    db.sqlite_wal_bound = checkpoints.WRITER_BOUND_PAGES
    await db.on_sqlite_writer(
        lambda conn: conn.execute(f"PRAGMA wal_autocheckpoint={checkpoints.WRITER_BOUND_PAGES}").fetchall()
    )
    await _write_rows(db, 300)
    assert _wal_bytes(db.sqlite_file) > 4_000_000


async def test_a_failing_pass_warns_once_and_the_writer_keeps_its_own_checkpoints(
    sqlite_db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db = sqlite_db
    await _scratch(db)

    def broken(path: str, *args: object, **kwargs: object) -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    # The checkpointer's own connection only: the writer and the readers open theirs as before.
    monkeypatch.setattr(checkpoints, "sqlite3", types.SimpleNamespace(connect=broken))
    caplog.set_level(logging.WARNING, logger="switchboard.checkpoints")
    checkpointer = Checkpointer(db, pause=0.0)
    checkpointer.start()
    try:
        await _write_rows(db, 5)
        deadline = time.monotonic() + 10
        while not caplog.records:
            assert time.monotonic() < deadline, "the failed pass was not reported"
            await asyncio.sleep(0.01)
        await _write_rows(db, 5)  # writes go on
    finally:
        started = time.monotonic()
        await checkpointer.close()
    # close() does not sit out the retry pause.
    assert time.monotonic() - started < checkpoints.RETRY_SECONDS / 2
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "OperationalError" in messages[0] and "checkpoints by itself" in messages[0]
    assert await _writer_bound(db) == SQLITE_DEFAULT_BOUND
    async with db.read() as s:
        assert await s.scalar(text("SELECT count(*) FROM scratch")) == 10


def test_an_in_memory_database_has_no_checkpointer() -> None:
    with pytest.raises(ValueError, match="SQLite file"):
        Checkpointer(Database("sqlite+aiosqlite:///:memory:"))
    # A ``file:`` URI names its file in SQLite's URI syntax: left to the writer's own checkpoints.
    assert Database("sqlite+aiosqlite:///file:/tmp/x.db?uri=true").sqlite_file is None


async def test_a_pass_never_creates_a_database_file_that_has_gone(tmp_path: Path) -> None:
    gone = tmp_path / "gone.db"
    db = Database(f"sqlite+aiosqlite:///{gone}")
    try:
        with pytest.raises(sqlite3.OperationalError):
            await Checkpointer(db).run_pass()
        assert not gone.exists()
    finally:
        await db.dispose()


async def test_the_server_copies_a_delivery_into_the_file_in_the_background(
    services: Services, sqlite_db: Database, base_url: str
) -> None:
    db = sqlite_db
    assert db.sqlite_file is not None
    token, secret, _ = await make_webhook(services, "github")
    body = fixture_bytes("github/issues/opened.payload.json")
    status, answer, _ = await post(base_url, token, body, github_headers(secret, body, "issues"))
    assert status == 202, answer
    # The server's writer no longer checkpoints at 1,000 pages; its checkpointer copies the log.
    assert await _writer_bound(db) == checkpoints.WRITER_BOUND_PAGES
    await _all_copied(db.sqlite_file)
