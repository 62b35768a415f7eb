"""A migrated, empty database per test, on the engine the run chooses.

``SWITCHBOARD_TEST_DATABASE_URL`` unset: every test gets its own SQLite file, copied from a template
migrated once per run. Set to a PostgreSQL URL (``postgresql://…`` is accepted): the run creates a
private database on that server (so parallel runs do not collide), migrates it once, empties it
between tests, and drops it at the end.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from switchboard import db as db_mod
from switchboard import migrate
from switchboard.models import Base

TEST_DATABASE_ENV = "SWITCHBOARD_TEST_DATABASE_URL"
# A fixed key so failures are reproducible; never used outside tests.
TEST_ENCRYPTION_KEY = base64.b64encode(bytes(range(32))).decode()


def postgres_url() -> str | None:
    """The PostgreSQL server the run uses (asyncpg URL), or None for SQLite."""
    url = os.environ.get(TEST_DATABASE_ENV, "").strip()
    if not url:
        return None
    if url.startswith("postgresql://"):
        url = "postgresql+asyncpg://" + url.removeprefix("postgresql://")
    return url


def engine_name() -> str:
    """``postgresql`` or ``sqlite``: the engine this run's tests use."""
    return "postgresql" if postgres_url() else "sqlite"


@dataclass
class Statements:
    """What ran while ``watch_statements`` watched: ``direct``, each statement run on the driver
    directly (``Database.statement_taps``) as its first three words, upper-cased, and its whole
    SQL in ``direct_sql``; and ``through_sqlalchemy``, the SQL of each one SQLAlchemy executed on
    either engine."""

    direct: list[str] = field(default_factory=list)
    direct_sql: list[str] = field(default_factory=list)
    through_sqlalchemy: list[str] = field(default_factory=list)


@contextlib.contextmanager
def watch_statements(db: db_mod.Database, *, reads: bool = True) -> Iterator[Statements]:
    """Record the statements ``db`` runs inside the block (for tests that a hot path stays on the
    driver and runs the statements it should). ``reads=False``: SQLAlchemy's statements on the
    write engine only (on SQLite the reads have an engine of their own)."""
    seen = Statements()

    def tap(sql: str, _args: Any) -> None:
        seen.direct.append(" ".join(sql.split()[:3]).upper())
        seen.direct_sql.append(sql)

    def grab(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        seen.through_sqlalchemy.append(sql)

    engines = {db.write_engine.sync_engine, *([db.engine.sync_engine] if reads else [])}
    db.statement_taps.append(tap)
    for engine in engines:
        event.listen(engine, "before_cursor_execute", grab)
    try:
        yield seen
    finally:
        db.statement_taps.remove(tap)
        for engine in engines:
            event.remove(engine, "before_cursor_execute", grab)


async def _admin(url: str, statement: str) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


def create_migrated(folder: Path) -> str:
    """Make the run's migrated database: a template SQLite file in ``folder`` (its path is returned),
    or a private PostgreSQL database (its URL is returned). Synchronous: it runs before any test's
    event loop exists."""
    pg = postgres_url()
    if pg is None:
        template = folder / "template.db"
        migrate.upgrade(f"sqlite+aiosqlite:///{template}")
        return str(template)
    name = f"sbtest_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin(pg, f'CREATE DATABASE "{name}"'))
    url = make_url(pg).set(database=name).render_as_string(hide_password=False)
    try:
        migrate.upgrade(url)
    except BaseException:
        drop_migrated(url)
        raise
    return url


def drop_migrated(migrated: str) -> None:
    """Drop the private PostgreSQL database made by :func:`create_migrated` (a SQLite template is
    left to the temporary folder it lives in)."""
    pg = postgres_url()
    if pg is None:
        return
    asyncio.run(_admin(pg, f'DROP DATABASE IF EXISTS "{make_url(migrated).database}" WITH (FORCE)'))


async def fresh_database(migrated: str, folder: Path) -> str:
    """A migrated, empty database for one test: a copy of the template in ``folder``, or the private
    PostgreSQL database with every table emptied."""
    if postgres_url() is None:
        path = folder / "switchboard.db"
        shutil.copyfile(migrated, path)
        return f"sqlite+aiosqlite:///{path}"
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    await _admin(migrated, f"TRUNCATE {tables} CASCADE")
    return migrated
