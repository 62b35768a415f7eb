"""How each engine is opened: the pools, what every new connection is told, and the check on
checkout. ``db.Database`` builds its sessions and direct runners on what ``open_engines`` returns;
why each pool is shaped as it is is said beside it below.

SQLite: a pool of read connections (``PRAGMA query_only``, WAL) and one writer connection, or a
single shared pool for an in-memory database (it exists once per connection). PostgreSQL: one pool
for reads and writes, and a small second pool whose connections may keep generic plans.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from switchboard.sanitize import json_text

# A pooled PostgreSQL connection is replaced after this long, so one silently cut by a firewall or
# a proxy's idle timeout does not live forever (no ping finds it).
PG_POOL_RECYCLE_SECONDS = 1800
# The connections where PostgreSQL may keep a plan (``run_postgresql``'s ``generic_plans``) serve
# statements that find their rows by key. A kept plan is costed on the statistics of when it was
# made: made while a table was small, it could be a sequential scan or a hash join over the whole
# table, kept as the table grows until the next ANALYZE (a complete's plan kept at 50 todos hashed
# all of ``attempts``: 189 ms per complete once 300,000 finished todos had theirs; 0.6 ms with
# these). Ruled out, every such statement walks its indexes (tests/test_kept_plans.py).
KEYED_PLAN_SETTINGS = {"enable_seqscan": "off", "enable_hashjoin": "off", "enable_mergejoin": "off"}


@dataclass(frozen=True)
class Engines:
    """The engines of one database URL."""

    is_sqlite: bool
    # Reads on SQLite; every statement on PostgreSQL.
    engine: AsyncEngine
    # SQLite: the one writer connection (``engine`` itself in memory). PostgreSQL: ``engine``.
    writer: AsyncEngine
    # PostgreSQL: the connections that may keep a plan. SQLite: ``writer`` (never used).
    keyed: AsyncEngine
    # SQLite: the database file, for ``checkpoints`` (None in memory or for a ``file:`` URI).
    sqlite_file: str | None


def open_engines(url: str, *, echo: bool, wal_bound: Callable[[], int]) -> Engines:
    """The engines for ``url``. ``wal_bound``: the SQLite writer's ``wal_autocheckpoint``, read as
    each writer connection opens (``checkpoints`` changes it while it runs)."""
    sqlite_file: str | None = None
    parsed = make_url(url)
    is_sqlite = parsed.get_backend_name() == "sqlite"
    # JSON columns written by orjson where it can (``sanitize.json_text``): the standard
    # library's ``dumps`` of a delivery's headers and trace held the SQLite writer's thread, and
    # so the GIL, for a sixth of its time in ingest's group commit.
    kwargs: dict[str, Any] = {"echo": echo, "json_serializer": json_text}
    if is_sqlite:
        kwargs["connect_args"] = {"timeout": 30}
        # An in-memory database exists once per connection: reads and writes must share it.
        in_memory = parsed.database in (None, "", ":memory:") or "mode=memory" in url
        # Reads on a file: up to 32 connections kept open (each a thread of aiosqlite's). With
        # the default 5 (+10 that close on check-in) a burst of webhooks whose echo check reads
        # opened a connection per request: a thread, the file, five PRAGMAs and the schema
        # parsed again, which cost more than the read.
        reads = {} if in_memory else {"pool_size": 32, "max_overflow": 32}
        engine = create_async_engine(url, **reads, **kwargs)
        if in_memory:
            writer = engine
        else:
            writer = create_async_engine(url, pool_size=1, max_overflow=0, **kwargs)
            # (A ``file:`` URI names its file in its own syntax: no checkpointer for it.)
            sqlite_file = None if parsed.query.get("uri") else parsed.database
        _configure_sqlite(writer, query_only=False, wal_bound=wal_bound)
        if writer is not engine:
            _configure_sqlite(engine, query_only=True)
        # No kept plans on SQLite: ``run_postgresql`` refuses it before it would look.
        keyed = writer
    else:
        # At most 22 connections (with the 20 below, 42 a process, as before claims moved there);
        # 14 stay open, so a burst of concurrent requests does not close and reopen overflow
        # connections (a connect, and every statement prepared and its types introspected again)
        # on every checkin.
        kwargs.update(pool_size=14, max_overflow=8, pool_recycle=PG_POOL_RECYCLE_SECONDS)
        # asyncpg keeps prepared statements per connection; a generic plan chosen while a table
        # was small (or its statistics stale) would keep its shape as the table grows. The
        # statements here are planned every call with their actual parameters.
        kwargs["connect_args"] = {"server_settings": {"plan_cache_mode": "force_custom_plan"}}
        engine = create_async_engine(url, **kwargs)
        writer = engine
        _configure_postgresql(engine)
        # The hot writes (claims, completes, replies, ingest's group commit) find their rows by
        # key or by an index walk whatever the statistics, so a generic plan serves them as well
        # as a custom one; on these connections PostgreSQL's default (``auto``) keeps a plan
        # instead of planning each call again, which was half of the database's CPU per call
        # (``run_postgresql``'s ``generic_plans``). Every agent's claim comes here, so it holds
        # as many as the other pool. A kept plan there may not read a whole table
        # (KEYED_PLAN_SETTINGS), nor walk a whole index (tests/test_kept_plans.py).
        kept = {**kwargs, "connect_args": {"server_settings": KEYED_PLAN_SETTINGS}}
        keyed = create_async_engine(url, **{**kept, "pool_size": 12, "max_overflow": 8})
        _configure_postgresql(keyed)
    return Engines(is_sqlite, engine, writer, keyed, sqlite_file)


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def _configure_sqlite(
    engine: AsyncEngine, *, query_only: bool, wal_bound: Callable[[], int] | None = None
) -> None:
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
        # SQLite's own lower() folds ASCII letters only: the board's "title contains (any case)"
        # missed "Über" for "über". Python's folds every script, as PostgreSQL's does.
        dbapi_connection.create_function("lower", 1, _lower, deterministic=True)
        cursor = dbapi_connection.cursor()
        if query_only:
            cursor.execute("PRAGMA query_only=ON")
        elif wal_bound is not None:
            cursor.execute(f"PRAGMA wal_autocheckpoint={int(wal_bound())}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get("sqlite_begin", "BEGIN"))


def _configure_postgresql(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_connection: Any, _record: object, _proxy: object) -> None:
        # Any: SQLAlchemy's adapter around the asyncpg connection. No round trip: asyncpg marks a
        # connection closed as soon as the server hangs up (a restart, pg_terminate_backend), and
        # the pool answers DisconnectionError with a fresh connection.
        raw = getattr(dbapi_connection, "_connection", None)
        if raw is not None and raw.is_closed():
            raise DisconnectionError("the server closed this pooled connection")
