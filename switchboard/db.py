"""Engine, sessions and migrations for SQLite (embedded default) and PostgreSQL (production).

Every write goes through ``Database.write()`` (an ORM session) or ``Database.writing()`` (a Core
connection, for the hot paths that issue their own statements).

On SQLite the process has one writer connection, and writes take turns on it behind an
``asyncio.Lock``: a request waits in the event loop for its turn instead of sleeping in SQLite's
busy handler while other connections of the same process hold the database's write lock. Each write
still opens with ``BEGIN IMMEDIATE``, so against another process (a CLI command) it waits for the
lock up front instead of failing on upgrade from a read lock. Reads have connections of their own
(WAL lets them run beside the writer), opened with ``PRAGMA query_only``, so a write that strays
into ``read()`` fails at once instead of queueing behind the writer unseen.

On PostgreSQL reads run in autocommit (a statement is its own snapshot under READ COMMITTED
either way), so a read costs its statements' round trips and no BEGIN or ROLLBACK.

On PostgreSQL both are the one pool (row locks and ``SKIP LOCKED`` do the work there). A pooled
connection is not pinged before use (``pool_pre_ping`` costs three round trips per checkout with
asyncpg); one whose socket the server closed is replaced on checkout instead (asyncpg notices the
close), and one that fails mid-statement invalidates the pool, so the next checkout reconnects.

A ``write()`` inside another ``write()`` of the same task would wait forever for the writer it
holds itself (SQLite), so it raises ``NestedWrite`` at once on both engines.

The two verbs every agent calls once per todo (``claim_next``, ``complete``) skip SQLAlchemy's
execution machinery: their Core statements are compiled once per engine (``Prepared``) and run on
the driver's own connection (``run_sqlite``: the whole write transaction in one hand-off to the
SQLite writer's thread; ``run_postgresql``: asyncpg's prepared statements on one pooled
connection). Same SQL, same type processing, same writer turn; a fraction of the per-statement cost.
The reads every request makes run the same way on a read connection (``read_steps``).

The engines themselves (pools, connection settings, the checkout check) are ``engines``'s.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
)
from sqlalchemy.sql import ClauseElement
from sqlalchemy.util import greenlet_spawn

from switchboard.direct import Combiner, Outcome, Prepared, Steps, drive, drive_async

# The runners' types, exported here too: callers of run_sqlite/run_postgresql name them with db.
from switchboard.direct import PostgreSQLRun as PostgreSQLRun
from switchboard.direct import SQLiteRun as SQLiteRun
from switchboard.engines import open_engines


def utcnow() -> datetime:
    return datetime.now(UTC)


def rfc3339(value: datetime | None) -> str | None:
    """A stored time as every surface writes it (API, MCP, web, CLI): RFC 3339 in UTC with
    milliseconds and a ``Z``, e.g. ``2026-01-02T03:04:05.678Z``; None stays None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class DatabaseUnavailable(Exception):
    """The database cannot be reached."""


class NestedWrite(RuntimeError):
    """``write()`` was entered inside another ``write()`` of the same task: on SQLite it would wait
    forever for the writer it holds itself. A programming error, never an outage."""


# Driver exceptions (by class name, so neither driver has to be importable) that mean the server
# cannot be reached, is starting or stopping, or dropped the connection mid-statement.
_DRIVER_OUTAGES = frozenset(
    {
        "CannotConnectNowError",  # asyncpg: "the database system is starting up / shutting down"
        "ConnectionDoesNotExistError",  # asyncpg: the connection was closed mid-statement
        "ConnectionFailureError",
        "ConnectionRejectionError",
        "InterfaceError",
        "InternalClientError",
        "PostgresConnectionError",
        "AdminShutdownError",  # the server was stopped under us
        "CrashShutdownError",
        "TooManyConnectionsError",
        "OperationalError",  # sqlite3: locked, read-only, disk I/O, cannot open
    }
)


def is_unavailable(exc: BaseException) -> bool:
    """The one definition of "the database is unavailable" that every surface uses (ingest, MCP,
    the API, the UI, the CLI, background passes): the answer is then 503 / ``unavailable`` / one
    CLI line and a warning, never a 500. An integrity error (a constraint said no) is not an outage.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, IntegrityError | NestedWrite):
            return False
        if isinstance(
            current, DatabaseUnavailable | OSError | PoolTimeout | OperationalError | InterfaceError
        ):
            return True
        if type(current).__name__ in _DRIVER_OUTAGES:
            return True
        if isinstance(current, DBAPIError) and current.connection_invalidated:
            return True
        nxt = getattr(current, "orig", None) if isinstance(current, DBAPIError) else None
        current = nxt if isinstance(nxt, BaseException) else (current.__cause__ or current.__context__)
    return False


class _Hold:
    """One open write, as the task that opened it sees it (through ``_WRITING``)."""

    __slots__ = ("db", "open")

    def __init__(self, db: Database) -> None:
        self.db, self.open = db, True


# The write this task (or the task that spawned it) has open. A context variable, not the current
# task, so a write awaited through a child task (``wait_for``, ``gather``) is caught too; a task
# spawned inside a write that outlives it sees a closed hold and writes normally.
_WRITING: ContextVar[_Hold | None] = ContextVar("switchboard_db_writing", default=None)

T = TypeVar("T")


class Database:
    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = url
        # SQLite: the writer's ``wal_autocheckpoint`` and the database file (None in memory); both
        # for ``checkpoints``, which copies the WAL's pages on a connection of its own.
        self.sqlite_wal_bound = 1000
        engines = open_engines(url, echo=echo, wal_bound=lambda: self.sqlite_wal_bound)
        self.is_sqlite, self.sqlite_file = engines.is_sqlite, engines.sqlite_file
        # Reads (and, on PostgreSQL, every statement), SQLite's one writer, and PostgreSQL's
        # connections that keep plans (``run_postgresql``'s ``generic_plans``).
        self.engine, self._writer, self._keyed = engines.engine, engines.writer, engines.keyed
        self._write_engine = self._writer.execution_options(sqlite_begin="BEGIN IMMEDIATE")
        # PostgreSQL: a single statement is a transaction by itself; no BEGIN or COMMIT round trip.
        self._one_statement_engine = (
            self._write_engine
            if self.is_sqlite
            else self._writer.execution_options(isolation_level="AUTOCOMMIT")
        )
        # PostgreSQL reads run in autocommit: under READ COMMITTED every statement takes its own
        # snapshot anyway, so a read transaction only added a BEGIN and a ROLLBACK round trip to
        # each read (an MCP request's token lookup paid three round trips for one SELECT).
        read_engine = (
            self.engine if self.is_sqlite else self.engine.execution_options(isolation_level="AUTOCOMMIT")
        )
        self._read = async_sessionmaker(read_engine, expire_on_commit=False)
        self._write = async_sessionmaker(self._write_engine, expire_on_commit=False)
        # SQLite's writer takes turns behind this lock (made on first use, in the running loop).
        self._turn: asyncio.Lock | None = None
        self._turn_loop: asyncio.AbstractEventLoop | None = None
        # Direct statements (``run_sqlite``, ``run_postgresql``), each compiled once for this engine.
        self._prepared: dict[ClauseElement, Prepared] = {}
        # Called with (SQL, arguments) before each direct statement runs, e.g. to EXPLAIN one.
        self.statement_taps: list[Callable[[str, Sequence[Any]], None]] = []
        # SQLite: called after each turn of the writer (``checkpoints`` hears of new WAL pages).
        self.write_taps: list[Callable[[], None]] = []
        # SQLite: the writer's aiosqlite connection, once a direct write has looked it up. Forgotten
        # whenever the pool closes, invalidates or detaches a connection, so a disposed or replaced
        # writer is looked up again instead of used.
        self._sqlite_driver: Any = None
        # SQLite: direct writes, combined while the writer is busy (run_sqlite).
        self._direct: Combiner[None, Callable[[SQLiteRun], Any]] = Combiner(self._sqlite_writes)
        if self.is_sqlite:
            for pool_event in ("close", "invalidate", "soft_invalidate", "detach", "close_detached"):
                event.listen(self._writer.sync_engine, pool_event, self._forget_sqlite_driver)

    @property
    def dialect(self) -> str:
        return "sqlite" if self.is_sqlite else "postgresql"

    @property
    def write_engine(self) -> AsyncEngine:
        """The engine writes run on: SQLite's single writer connection, PostgreSQL's one pool.
        (For instrumentation, e.g. a listener catching the statements a write issues.)"""
        return self._writer

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """A session for reads, never for writes: on SQLite it cannot write at all (``PRAGMA
        query_only``); on PostgreSQL it runs in autocommit (one round trip per statement)."""
        async with self._read() as session:
            yield session

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A write transaction: committed on success, rolled back on any exception."""
        async with self._writer_turn(), self._write() as session, session.begin():
            yield session

    @asynccontextmanager
    async def writing(self, *, one_statement: bool = False) -> AsyncIterator[AsyncConnection]:
        """A Core connection for writes, in a transaction committed on success (the SQLite writer
        under ``BEGIN IMMEDIATE``, as ``write()``).

        ``one_statement``: the caller issues exactly one statement, which is then atomic by itself.
        PostgreSQL runs it in autocommit, so the write costs one round trip instead of three
        (BEGIN, the statement, COMMIT). SQLite has no such round trips and keeps the transaction.
        """
        engine = self._one_statement_engine if one_statement else self._write_engine
        async with self._writer_turn(), engine.connect() as conn:
            if one_statement and not self.is_sqlite:
                yield conn
            else:
                async with conn.begin():
                    yield conn

    def refuse_nested_write(self) -> None:
        """Raise ``NestedWrite`` if this task (or the one that spawned it) has a write open."""
        hold = _WRITING.get()
        if hold is not None and hold.open and hold.db is self:
            raise NestedWrite("db.write() inside another db.write() of the same task would deadlock")

    @asynccontextmanager
    async def _writer_turn(self) -> AsyncIterator[None]:
        self.refuse_nested_write()
        mine = _Hold(self)
        reset = _WRITING.set(mine)
        try:
            if self.is_sqlite:
                async with self._lock():
                    yield
                self._tap_writes()
            else:
                yield
        finally:
            mine.open = False
            _WRITING.reset(reset)

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._turn is None or self._turn_loop is not loop:
            # A lock belongs to one event loop; a Database reused under another loop (a CLI
            # command's asyncio.run after an earlier one) needs a fresh one. Nobody waits on the
            # old lock then: its loop is gone.
            self._turn, self._turn_loop = asyncio.Lock(), loop
        return self._turn

    # -----------------------------------------------------------------------------------------
    # Direct statements

    def _prepare(self, statement: ClauseElement) -> Prepared:
        prepared = self._prepared.get(statement)
        if prepared is None:
            prepared = self._prepared[statement] = Prepared(statement, self._writer.dialect)
        return prepared

    def _forget_sqlite_driver(self, *_args: Any) -> None:
        self._sqlite_driver = None

    async def run_sqlite(self, work: Callable[[SQLiteRun], T]) -> T:
        """SQLite: one write, run whole on the writer connection's own thread.

        ``work`` is called there inside a write transaction, with a ``SQLiteRun`` for its
        statements, and its result is returned once that transaction is committed. Its writes are
        atomic: if it raises, they are rolled back and the exception is raised here. ``work`` runs
        off the event loop: it must only run statements and compute, never await or block.

        Direct writes are combined: the ones that queued while the writer was busy run one after
        another in one ``BEGIN IMMEDIATE`` … ``COMMIT``, each under its own savepoint (rolled back
        alone if it raises), in one hand-off to aiosqlite's thread and back. Through SQLAlchemy a
        write costs a hand-off per statement, cursor, fetch, BEGIN, COMMIT and the pool's reset,
        and with many writers each one also a wake-up of that thread and of the event loop. The
        writer's turn is the same lock ``write()`` takes, so other writes keep their place in line.
        Driver errors come out as SQLAlchemy's (``OperationalError`` …), as from ``writing()``; a
        failed ``BEGIN`` or ``COMMIT`` fails every write of its batch.

        Once its batch has been handed to the thread, a write runs to its end even if the caller
        is cancelled (as a statement the server already received does): its result is dropped.
        """
        if not self.is_sqlite:
            raise RuntimeError("run_sqlite needs a SQLite database")
        self.refuse_nested_write()
        result: T = await self._direct.submit(None, work)
        return result

    async def _sqlite_writes(self, _key: None, works: list[Callable[[SQLiteRun], Any]]) -> list[Outcome]:
        """One batch of direct writes, in one turn of the writer (the lock ``write()`` takes)."""
        outcomes: list[Outcome] = await self.on_sqlite_writer(
            functools.partial(self._sqlite_batch, works=works)
        )
        self._tap_writes()
        return outcomes

    def _tap_writes(self) -> None:
        """A turn of the SQLite writer has ended: tell ``write_taps`` (new pages in the WAL)."""
        for tap in self.write_taps:
            tap()

    async def on_sqlite_writer(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """SQLite: ``work(connection)`` on the writer connection's thread, in the writer's turn,
        outside any transaction (``work`` opens its own, or runs what cannot run inside one, such
        as a checkpoint). Its result, or its exception, comes back here."""
        async with self._lock():
            if self._sqlite_driver is None:
                # A checkout opens the writer if the pool has none yet (with its pragmas). Nobody
                # else uses that connection outside the writer's turn, which this batch holds.
                async with self._writer.connect() as conn:
                    self._sqlite_driver = (await conn.get_raw_connection()).driver_connection
            driver = self._sqlite_driver
            try:
                # aiosqlite's own queue to its thread (SQLAlchemy's aiosqlite dialect uses it the
                # same way to set the isolation level): one callable run there, its result back.
                done: T = await driver._execute(work, driver._conn)
            except ValueError as exc:
                if str(exc).lower() not in ("no active connection", "connection closed"):
                    raise
                # aiosqlite's "the connection is closed": unavailable, as SQLAlchemy answers it.
                self._sqlite_driver = None
                raise OperationalError("BEGIN IMMEDIATE", (), exc) from exc
            return done

    def _sqlite_batch(
        self, conn: sqlite3.Connection, works: list[Callable[[SQLiteRun], Any]]
    ) -> list[Outcome]:
        """On the writer's thread: each work under its own savepoint, all in one transaction."""
        run = self._sqlite_runner(conn)
        outcomes: list[Outcome] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for work in works:
                conn.execute("SAVEPOINT direct_write")
                try:
                    outcomes.append((True, work(run)))
                except Exception as exc:
                    conn.execute("ROLLBACK TO direct_write")
                    outcomes.append((False, exc))
                conn.execute("RELEASE direct_write")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise DBAPIError.instance("BEGIN IMMEDIATE … COMMIT", (), exc, sqlite3.Error) from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return outcomes

    async def run_postgresql(
        self,
        work: Callable[[PostgreSQLRun], Awaitable[T]],
        *,
        transaction: bool = False,
        generic_plans: bool = False,
    ) -> T:
        """PostgreSQL: ``work``'s statements run on one pooled connection's asyncpg connection, each
        in autocommit (a single statement is atomic by itself: one round trip, no BEGIN or COMMIT).
        asyncpg prepares each SQL text once per connection and keeps it. The pool, its checkout
        check and the nested-write guard are ``writing()``'s. Driver errors come out wrapped in
        SQLAlchemy's ``DBAPIError`` (the driver's own as ``.orig``, which ``is_unavailable`` reads).

        ``transaction``: the statements share one transaction instead (committed when ``work``
        returns, rolled back if it raises), for a write whose row locks must last from one statement
        to the next (``reply`` locks its todo, then inserts its pending row).

        ``generic_plans``: on a connection of the pool where PostgreSQL may keep a generic plan, for
        statements whose every plan walks an index by its condition, whatever the statistics: they
        find their rows by key, or, as a claim's pick, by an index no other condition can stand in
        for (tests/test_kept_plans.py checks each one). Left False (custom plans, planned per call)
        for any other statement: a generic plan made while a table was small, or had no statistics,
        keeps its shape as the table grows.
        """
        if self.is_sqlite:
            raise RuntimeError("run_postgresql needs a PostgreSQL database")
        engine = self._keyed if generic_plans else self._writer
        async with self._writer_turn():
            # The pool's own connection record, without the Connection/AsyncConnection pair around
            # it that ``engine.connect()`` builds (a third of this call's cost, measured).
            pooled = await engine.raw_connection()
            # Any: asyncpg ships no type information (pyproject's mypy section).
            driver: Any = pooled.driver_connection
            run = self._asyncpg_runner(driver)
            unusable = False
            try:
                if not transaction:
                    return await work(run)
                async with driver.transaction():
                    return await work(run)
            except BaseException as exc:
                # A dropped connection, or one whose statement was interrupted (cancelled), is in
                # no known state: the pool must not hand it out again (SQLAlchemy does the same).
                unusable = not isinstance(exc, Exception) or bool(driver.is_closed())
                raise
            finally:
                # The pool's check-in is synchronous code that may await the driver (closing an
                # overflow connection), so it runs under greenlet_spawn, as AsyncConnection's does.
                await greenlet_spawn(pooled.invalidate if unusable else pooled.close)

    def _sqlite_runner(self, conn: sqlite3.Connection) -> SQLiteRun:
        """Direct statements on a sqlite3 connection (on its aiosqlite thread)."""
        taps = self.statement_taps

        def run(statement: ClauseElement, values: Mapping[str, Any]) -> list[Any]:
            prepared = self._prepare(statement)
            args = prepared.args(values)
            for tap in taps:
                tap(prepared.sql, args)
            try:
                return prepared.rows(conn.execute(prepared.sql, args).fetchall())
            except sqlite3.Error as exc:
                raise DBAPIError.instance(prepared.sql, args, exc, sqlite3.Error) from exc

        return run

    def _asyncpg_runner(self, driver: Any) -> PostgreSQLRun:
        """Direct statements on an asyncpg connection, each in autocommit unless in a transaction."""
        taps = self.statement_taps

        async def run(statement: ClauseElement, values: Mapping[str, Any]) -> list[Any]:
            prepared = self._prepare(statement)
            args = prepared.args(values)
            for tap in taps:
                tap(prepared.sql, args)
            try:
                fetched = await driver.fetch(prepared.sql, *args)
            except Exception as exc:
                closed = bool(driver.is_closed())
                raise DBAPIError.instance(
                    prepared.sql, args, exc, Exception, connection_invalidated=closed
                ) from exc
            return prepared.rows(fetched)

        return run

    async def read_steps(self, steps: Steps[T]) -> T:
        """Run ``steps`` (reads only) on a read connection's driver directly: on SQLite all of them
        in one hand-off to that connection's thread (which ``PRAGMA query_only`` keeps from
        writing), on PostgreSQL each in autocommit on one pooled asyncpg connection, as ``read()``.

        For the reads that requests make on every call (an MCP request's endpoint, ingest's echo
        check): through a session, one single-row read cost the event loop 1.1-1.5 ms of CPU on
        SQLite (a hand-off to the thread for the cursor, the statement, the fetch and the cursor's
        close) and 0.5-0.6 ms on PostgreSQL; this way 0.2 and 0.15 (bench/HISTORY.md)."""
        pooled = await self.engine.raw_connection()
        # Any: aiosqlite's or asyncpg's connection, neither typed for this use.
        driver: Any = pooled.driver_connection
        unusable = False
        try:
            if not self.is_sqlite:
                return await drive_async(self._asyncpg_runner(driver), steps)
            try:
                # aiosqlite's own queue to its thread, as ``_sqlite_writes``.
                work = functools.partial(self._sqlite_read, steps=steps)
                done: T = await driver._execute(work, driver._conn)
            except ValueError as exc:
                if str(exc).lower() not in ("no active connection", "connection closed"):
                    raise
                unusable = True
                raise OperationalError("SELECT", (), exc) from exc
            return done
        except BaseException as exc:
            # As ``run_postgresql``: an asyncpg statement interrupted or a closed connection leaves
            # it in no known state. (A SQLite read cancelled here still ends on its thread.)
            if not self.is_sqlite:
                unusable = unusable or not isinstance(exc, Exception) or bool(driver.is_closed())
            raise
        finally:
            await greenlet_spawn(pooled.invalidate if unusable else pooled.close)

    def _sqlite_read(self, conn: sqlite3.Connection, steps: Steps[T]) -> T:
        return drive(self._sqlite_runner(conn), steps)

    async def run_steps(self, steps: Steps[T], *, transaction: bool, generic_plans: bool = False) -> T:
        """Run ``steps`` (``switchboard.direct.Steps``) as one write on the driver directly: on
        SQLite the whole transaction in one hand-off to the writer's thread (``run_sqlite``), on
        PostgreSQL its statements on one asyncpg connection (``run_postgresql``, with its
        ``generic_plans``), in one transaction when ``transaction``, each in autocommit otherwise."""
        if self.is_sqlite:
            return await self.run_sqlite(functools.partial(drive, steps=steps))
        return await self.run_postgresql(
            functools.partial(drive_async, steps=steps), transaction=transaction, generic_plans=generic_plans
        )

    async def ping(self, timeout: float = 2.0) -> None:
        try:
            async with asyncio.timeout(timeout), self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception as exc:
            raise DatabaseUnavailable(type(exc).__name__) from None

    async def dispose(self) -> None:
        await self.engine.dispose()
        if self._writer is not self.engine:
            await self._writer.dispose()
        if not self.is_sqlite:
            await self._keyed.dispose()
