"""Migration 0009: on PostgreSQL a delivery's body and headers and a todo's payload and result are
compressed with lz4 from then on; values stored before keep their pglz compression and read back
the same, and going down returns the columns to pglz. On SQLite the migration changes nothing and
goes up and down cleanly."""

from __future__ import annotations

import asyncio

import pytest
from alembic import command
from sqlalchemy import select, text

from switchboard import migrate
from switchboard.db import Database
from switchboard.models import Todo
from switchboard.testing import add_todo, vend

COLUMNS = {("events", "body"), ("events", "headers"), ("todos", "payload"), ("todos", "result")}
# Compressible, and over the size at which PostgreSQL compresses a value (about 2 KB).
PAYLOAD = {"text": "a pull request body that says the same thing again " * 600}


def _to(database_url: str, revision: str, *, down: bool) -> None:
    config = migrate.alembic_config(database_url)
    (command.downgrade if down else command.upgrade)(config, revision)


async def _compression(database: Database) -> dict[tuple[str, str], str]:
    """Each large column's compression method: 'l' (lz4), 'p' (pglz) or '' (the default, pglz)."""
    async with database.read() as s:
        rows = await s.execute(
            text(
                "SELECT c.relname, a.attname, a.attcompression::text FROM pg_attribute a"
                " JOIN pg_class c ON c.oid = a.attrelid"
                " WHERE c.relname IN ('events', 'todos')"
                " AND a.attname IN ('body', 'headers', 'payload', 'result')"
            )
        )
        return {(table, column): str(method or "") for table, column, method in rows.all()}


async def _stored_with(database: Database, todo_id: str) -> str:
    async with database.read() as s:
        value = await s.scalar(
            text("SELECT pg_column_compression(payload) FROM todos WHERE id = :id"), {"id": todo_id}
        )
        return str(value)


async def test_new_bodies_and_payloads_are_stored_with_lz4_and_old_ones_still_read(
    database_url: str, db: Database
) -> None:
    if db.is_sqlite:
        pytest.skip("PostgreSQL's column compression: SQLite stores values as they are")
    async with db.read() as s:
        methods = await s.scalar(
            text("SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'")
        )
    if methods is None or "lz4" not in methods:
        pytest.skip("this PostgreSQL server was built without lz4; the migration leaves pglz")
    assert await _compression(db) == {column: "l" for column in COLUMNS}
    await db.dispose()

    await asyncio.to_thread(_to, database_url, "0008", down=True)
    database = Database(database_url)
    try:
        assert await _compression(database) == {column: "p" for column in COLUMNS}
        ep, _ = await vend(database)
        before = await add_todo(database, ep, payload=PAYLOAD)
        assert await _stored_with(database, before.id) == "pglz"
    finally:
        await database.dispose()

    await asyncio.to_thread(_to, database_url, "head", down=False)
    database = Database(database_url)
    try:
        after = await add_todo(database, ep, payload=PAYLOAD)
        assert await _stored_with(database, after.id) == "lz4"
        assert await _stored_with(database, before.id) == "pglz"
        async with database.read() as s:
            payloads = (await s.scalars(select(Todo.payload).where(Todo.id.in_([before.id, after.id])))).all()
        assert len(payloads) == 2 and payloads[0] == payloads[1]
    finally:
        await database.dispose()


async def test_the_migration_goes_down_and_up_keeping_every_row(database_url: str, db: Database) -> None:
    ep, _ = await vend(db)
    todo = await add_todo(db, ep, payload=PAYLOAD)
    await db.dispose()
    await asyncio.to_thread(_to, database_url, "0008", down=True)
    await asyncio.to_thread(_to, database_url, "head", down=False)
    database = Database(database_url)
    try:
        async with database.read() as s:
            kept = await s.get(Todo, todo.id)
        assert kept is not None and kept.payload == todo.payload
    finally:
        await database.dispose()
