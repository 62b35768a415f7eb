"""Engine, sessions and migrations for SQLite (embedded default) and PostgreSQL (production).

Write transactions go through ``Database.write()``. On SQLite that issues ``BEGIN IMMEDIATE``, so
two writers serialise on the database lock up front instead of failing on upgrade from a read lock;
on PostgreSQL it is an ordinary transaction (row locks and ``SKIP LOCKED`` do the work there).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

if TYPE_CHECKING:
    # Only for the annotation: importing alembic takes ~0.15 s and only migrations need it.
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"


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
        if isinstance(current, IntegrityError):
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


class Database:
    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = url
        self.is_sqlite = make_url(url).get_backend_name() == "sqlite"
        kwargs: dict[str, Any] = {"echo": echo}
        if self.is_sqlite:
            kwargs["connect_args"] = {"timeout": 30}
        else:
            kwargs.update(pool_size=10, max_overflow=20, pool_pre_ping=True)
            # asyncpg keeps prepared statements per connection; a generic plan chosen while the
            # todos table was small (or its statistics stale) would keep scanning as the backlog
            # grows. Custom plans see the actual parameters and keep using the partial index.
            kwargs["connect_args"] = {"server_settings": {"plan_cache_mode": "force_custom_plan"}}
        self.engine: AsyncEngine = create_async_engine(url, **kwargs)
        if self.is_sqlite:
            _configure_sqlite(self.engine)
        self._write_engine = self.engine.execution_options(sqlite_begin="BEGIN IMMEDIATE")
        self._read = async_sessionmaker(self.engine, expire_on_commit=False)
        self._write = async_sessionmaker(self._write_engine, expire_on_commit=False)

    @property
    def dialect(self) -> str:
        return "sqlite" if self.is_sqlite else "postgresql"

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """A session for reads; anything written is rolled back unless committed explicitly."""
        async with self._read() as session:
            yield session

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A write transaction: committed on success, rolled back on any exception."""
        async with self._write() as session, session.begin():
            yield session

    async def ping(self, timeout: float = 2.0) -> None:
        try:
            async with asyncio.timeout(timeout), self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception as exc:
            raise DatabaseUnavailable(type(exc).__name__) from None

    async def dispose(self) -> None:
        await self.engine.dispose()


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: object) -> None:
        # Any: this is sqlite3's connection, whose isolation_level the DB-API protocol type lacks.
        # Let us issue BEGIN ourselves (pysqlite's own transaction handling would defer it).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get("sqlite_begin", "BEGIN"))


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Run migrations up to ``revision`` (synchronous; call from a thread inside an event loop)."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)


async def upgrade_async(url: str) -> None:
    await asyncio.to_thread(upgrade, url)
