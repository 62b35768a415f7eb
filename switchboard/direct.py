"""What the hot paths' direct statements are made of (``Database.run_sqlite``, ``run_postgresql``).

``Prepared``: a SQLAlchemy Core statement compiled once for one engine, run on the driver's own
connection with SQLAlchemy's own type processing. ``Combiner``: calls that arrive while an equal
call is running wait, and then run together as one batch (one hand-off to SQLite's writer thread;
one statement for many claims on PostgreSQL). ``Steps``: the logic of one write written once, as a
generator of (statement, values) that receives each statement's rows, so the same code runs
synchronously on SQLite's writer thread (``drive``) and asynchronously on asyncpg (``drive_async``)
or a SQLAlchemy connection (``on``); ``Database.run_steps`` picks the runner.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import namedtuple
from collections.abc import Awaitable, Callable, Generator, Hashable, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import inspect
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import make_transient_to_detached
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler

K = TypeVar("K", bound=Hashable)
M = TypeVar("M")
R = TypeVar("R")
# A direct statement's runner, as ``run_sqlite`` / ``run_postgresql`` hand it to the work: a Core
# statement and its bind values in, its rows out (named tuples, read by attribute like a Row).
SQLiteRun = Callable[[ClauseElement, Mapping[str, Any]], list[Any]]
PostgreSQLRun = Callable[[ClauseElement, Mapping[str, Any]], Awaitable[list[Any]]]
# One call's outcome in a batch: (True, its result) or (False, the exception it raises).
Outcome = tuple[bool, Any]
T_ = TypeVar("T_")
# A statement and its values: what a write's logic yields for its engine's runner to execute.
Step = tuple[ClauseElement, dict[str, Any]]
# The rows a step answers, read by attribute (SQLAlchemy Rows, or a direct runner's named tuples).
Rows = Sequence[Any]
# The logic of one write, written once as a generator of statements and driven by a runner.
Steps = Generator[Step, Rows, T_]
AsyncRun = Callable[[ClauseElement, Mapping[str, Any]], Awaitable[Rows]]
# The namedtuple factory, typed loosely: a row's fields are known only once a statement is compiled.
_row_type: Callable[..., Any] = namedtuple


class Prepared:
    """One Core statement compiled for one engine's dialect: its SQL text, how a call's values
    become the driver's positional arguments, and how the driver's rows become named tuples with the
    same type processing SQLAlchemy applies (its own bind and result processors for that dialect:
    UTC datetimes, JSON, booleans). Built once per statement and engine, so a call pays neither
    for compiling nor for SQLAlchemy's per-execution bookkeeping."""

    __slots__ = ("_readers", "_row", "_slots", "sql")

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        if compiled.positiontup is None:
            raise ValueError(f"{dialect.name}: direct statements need a positional paramstyle")
        self.sql = str(compiled)
        # Per placeholder: (the call's value name, processor) or (None, the constant, processed).
        self._slots: list[tuple[str | None, Any, Any]] = []
        for name in compiled.positiontup:
            bind = compiled.binds[name]
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if bind.required:
                self._slots.append((name, process, None))
            else:
                value = bind.effective_value
                self._slots.append((None, None, process(value) if process else value))
        columns = list(getattr(statement, "exported_columns", ()))
        self._row = _row_type("Row", [str(getattr(c, "key", None) or "_") for c in columns], rename=True)
        self._readers = [
            (i, reader)
            for i, c in enumerate(columns)
            if (reader := c.type.dialect_impl(dialect).result_processor(dialect, None)) is not None
        ]

    def args(self, values: Mapping[str, Any]) -> list[Any]:
        out: list[Any] = []
        for name, process, constant in self._slots:
            if name is None:
                out.append(constant)
            else:
                value = values[name]
                out.append(process(value) if process is not None else value)
        return out

    def rows(self, fetched: Any) -> list[Any]:
        """``fetched``: the driver's rows (sqlite3 tuples, asyncpg Records)."""
        readers, make = self._readers, self._row._make
        out = []
        for raw in fetched:
            values = list(raw)
            for i, reader in readers:
                values[i] = reader(values[i])
            out.append(make(values))
        return out


class Combiner(Generic[K, R]):
    """Runs calls in batches: per key, one batch at a time, and the calls that arrived while it ran
    make up the next one. A call alone runs at once (one loop iteration later), so nothing waits
    for company; under load, a batch costs one hand-off or one statement for all of its calls.

    ``run_batch(key, requests)`` returns one ``Outcome`` per request, in order; if it raises, every
    request of that batch raises it, unless ``alone_after(exc)`` says the failure may be one
    request's doing (bad input the database refused, not an outage): then each request of the batch
    runs again alone, so a poison request fails by itself and its neighbours go on.

    A caller cancelled while waiting is dropped from the batch if that has not started; once it
    has, the work is done and only the answer is dropped (as with a statement the server already
    received).
    """

    def __init__(
        self,
        run_batch: Callable[[K, list[R]], Awaitable[list[Outcome]]],
        alone_after: Callable[[Exception], bool] | None = None,
    ) -> None:
        self._run_batch = run_batch
        self._alone_after = alone_after
        self._queued: dict[K, list[tuple[R, asyncio.Future[Any]]]] = {}
        self._running: dict[K, asyncio.Task[None]] = {}

    async def submit(self, key: K, request: R) -> Any:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        self._queued.setdefault(key, []).append((request, answer))
        task = self._running.get(key)
        # A task of a loop that is gone (a CLI command's earlier asyncio.run) never ends: replace it.
        if task is None or task.done() or task.get_loop() is not loop:
            # A context of its own: the batch must not run in the context of whichever caller
            # happened to start it (its open write, for one).
            self._running[key] = loop.create_task(self._drain(key, loop), context=contextvars.Context())
        return await answer

    async def _drain(self, key: K, loop: asyncio.AbstractEventLoop) -> None:
        try:
            await self._drain_queue(key, loop)
        finally:
            if self._running.get(key) is asyncio.current_task():
                del self._running[key]

    async def _drain_queue(self, key: K, loop: asyncio.AbstractEventLoop) -> None:
        while queued := self._queued.pop(key, None):
            batch = [(r, f) for r, f in queued if not f.done() and f.get_loop() is loop]
            if not batch:
                continue
            try:
                try:
                    outcomes = await self._run_batch(key, [r for r, _ in batch])
                except Exception as exc:
                    if len(batch) == 1 or self._alone_after is None or not self._alone_after(exc):
                        self._fail(batch, exc)
                        continue
                    outcomes = [await self._alone(key, request) for request, _ in batch]
            except BaseException as exc:
                self._fail(batch, exc)
                raise
            for (_, answer), (ok, value) in zip(batch, outcomes, strict=True):
                if not answer.done():
                    if ok:
                        answer.set_result(value)
                    else:
                        answer.set_exception(value)

    async def _alone(self, key: K, request: R) -> Outcome:
        try:
            [outcome] = await self._run_batch(key, [request])
        except Exception as exc:
            return (False, exc)
        return outcome

    @staticmethod
    def _fail(batch: list[tuple[R, asyncio.Future[Any]]], exc: BaseException) -> None:
        for _, answer in batch:
            if answer.done():
                continue
            if isinstance(exc, asyncio.CancelledError):
                answer.cancel()
            else:
                answer.set_exception(exc)


def drive(run: SQLiteRun, steps: Steps[T_]) -> T_:
    """Drive ``steps`` with a synchronous runner (``Database.run_sqlite``'s, on the writer's thread):
    each statement it yields runs, and its rows go back to it."""
    try:
        statement, values = next(steps)
        while True:
            statement, values = steps.send(run(statement, values))
    except StopIteration as done:
        return cast(T_, done.value)
    finally:
        steps.close()


async def drive_async(run: AsyncRun, steps: Steps[T_]) -> T_:
    """Drive ``steps`` with an asynchronous runner (``Database.run_postgresql``'s, or ``on`` a
    SQLAlchemy connection)."""
    try:
        statement, values = next(steps)
        while True:
            statement, values = steps.send(await run(statement, values))
    except StopIteration as done:
        return cast(T_, done.value)
    finally:
        steps.close()


def on(conn: AsyncConnection) -> AsyncRun:
    """A runner over a SQLAlchemy connection (the reads of a reply's rare paths)."""

    async def run(statement: ClauseElement, values: Mapping[str, Any]) -> Rows:
        # Every statement here is a Select, Insert or Update (executable); Step types them by the
        # base the direct runners take.
        result = await conn.execute(cast(Executable, statement), dict(values))
        return result.all() if result.returns_rows else []

    return run


def mapped_columns(cls: type[Any]) -> list[Any]:
    """Every column of an ORM class, labelled with its attribute's name: a direct statement's
    select list whose rows ``loaded`` turns back into objects of the class."""
    return [prop.columns[0].label(prop.key) for prop in inspect(cls).column_attrs]


def loaded(cls: type[M], row: Any) -> M:
    """The object of ``cls`` a session would have loaded from ``row`` (a direct statement's row of
    ``mapped_columns(cls)``), as it is once that session has closed: detached, every column set,
    nothing pending, so nothing is written if it is later added to a session unchanged."""
    instance = inspect(cls).class_manager.new_instance()
    for key, value in row._asdict().items():
        set_committed_value(instance, key, value)
    make_transient_to_detached(instance)
    return cast(M, instance)
