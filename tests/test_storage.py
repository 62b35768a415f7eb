"""Storage: migrations on both engines, the schema's own guarantees, and liveness."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from switchboard import migrate, tenancy
from switchboard.app import make_app
from switchboard.db import Database, utcnow
from switchboard.models import Base
from switchboard.plugins import load
from switchboard.services import Services
from switchboard.settings import Settings
from switchboard.vault import Vault


def _diff(conn) -> list:
    context = MigrationContext.configure(conn, opts={"compare_type": True})
    return compare_metadata(context, Base.metadata)


async def test_migrations_produce_exactly_the_models(database_url: str) -> None:
    database = Database(database_url)
    try:
        async with database.engine.connect() as conn:
            assert await conn.run_sync(_diff) == []
            version = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar_one()
        # The newest migration, whichever that is: every revision is applied.
        head = ScriptDirectory.from_config(migrate.alembic_config(database_url)).get_current_head()
        assert version == head
        # The CLI's own reading of the head (the highest numbered script), without alembic.
        assert migrate.head() == head
    finally:
        await database.dispose()


async def test_downgrade_and_upgrade_again(database_url: str) -> None:
    await migrate.upgrade_async(database_url)  # already at head: a no-op
    await __import__("asyncio").to_thread(
        lambda: __import__("alembic.command", fromlist=["downgrade"]).downgrade(
            migrate.alembic_config(database_url), "base"
        )
    )
    database = Database(database_url)
    try:
        async with database.engine.connect() as conn:
            tables = await conn.run_sync(lambda c: __import__("sqlalchemy").inspect(c).get_table_names())
        assert set(tables) <= {"alembic_version"}
    finally:
        await database.dispose()
    await migrate.upgrade_async(database_url)


async def test_owner_scope_is_exactly_one_human_or_team(db: Database) -> None:
    human, _ = await tenancy.add_human(db, "ada")
    team = await tenancy.add_team(db, "core", "ada")
    now = utcnow()
    for human_id, team_id in ((human.id, team.id), (None, None)):
        with pytest.raises(IntegrityError):
            async with db.write() as s:
                await s.execute(
                    text(
                        "INSERT INTO endpoints (id, slug, name, owner_human_id, owner_team_id, token_hash,"
                        " token_display, queues, verbs, state, default_lease_seconds, created_at)"
                        " VALUES (:id, :slug, 'x', :h, :t, :th, 'sbk_x', '[]', '[]', 'active', 300, :now)"
                    ),
                    {
                        "id": f"ep_{bool(team_id)}",
                        "slug": f"s{bool(team_id)}",
                        "h": human_id,
                        "t": team_id,
                        "th": f"h{bool(team_id)}",
                        "now": now,
                    },
                )


async def test_engine_session_settings(db: Database) -> None:
    async with db.read() as s:
        if not db.is_sqlite:
            # LISTEN/NOTIFY, SKIP LOCKED and DROP DATABASE … WITH (FORCE) need PostgreSQL 13+.
            version = (
                await s.execute(text("SELECT current_setting('server_version_num')::int"))
            ).scalar_one()
            assert version >= 130000
            # Claims keep using the partial index however stale the planner's statistics are.
            assert (await s.execute(text("SHOW plan_cache_mode"))).scalar_one() == "force_custom_plan"
            return
        assert (await s.execute(text("PRAGMA journal_mode"))).scalar_one() == "wal"
        assert (await s.execute(text("PRAGMA foreign_keys"))).scalar_one() == 1
        assert (await s.execute(text("PRAGMA busy_timeout"))).scalar_one() >= 5000


async def test_healthz_is_503_when_the_database_is_unreachable(tmp_path) -> None:
    settings = Settings(database_url="postgresql+asyncpg://nobody@127.0.0.1:1/none")
    services = Services(
        settings=settings,
        db=Database(settings.database_url),
        vault=Vault(None),
        providers=load(entrypoints=False),
    )
    server = TestServer(make_app(services), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http, http.get(str(server.make_url("/healthz"))) as resp:
            assert resp.status == 503
            assert (await resp.json()) == {"status": "unavailable", "database": "unreachable"}
    finally:
        await server.close()
