"""Shared fixtures: a migrated database per test, the services, and a real server on 127.0.0.1.

The engine is chosen for the whole run by ``SWITCHBOARD_TEST_DATABASE_URL``: unset, every test gets
its own SQLite file; set to a PostgreSQL URL, the run creates a private database on that server
(so parallel runs do not collide), migrates it once, and empties it between tests.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from switchboard import db as db_mod
from switchboard import plugins
from switchboard.app import make_app
from switchboard.logs import RedactingAccessLogger
from switchboard.mcp import DOORBELL
from switchboard.mcp.doorbell import Doorbell
from switchboard.models import Base
from switchboard.services import Services
from switchboard.settings import Settings
from switchboard.vault import Vault

TEST_DATABASE_ENV = "SWITCHBOARD_TEST_DATABASE_URL"
# A fixed key so failures are reproducible; never used outside tests.
TEST_ENCRYPTION_KEY = base64.b64encode(bytes(range(32))).decode()


def _pg_url() -> str | None:
    url = os.environ.get(TEST_DATABASE_ENV, "").strip()
    if not url:
        return None
    if url.startswith("postgresql://"):
        url = "postgresql+asyncpg://" + url.removeprefix("postgresql://")
    return url


def engine_name() -> str:
    return "postgresql" if _pg_url() else "sqlite"


async def _admin(url: str, statement: str) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
def _migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated database for the run: a template SQLite file, or a private PostgreSQL database."""
    pg = _pg_url()
    if pg is None:
        template = tmp_path_factory.mktemp("template") / "template.db"
        db_mod.upgrade(f"sqlite+aiosqlite:///{template}")
        yield str(template)
        return
    name = f"sbtest_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = make_url(pg)
    asyncio.run(_admin(admin.render_as_string(hide_password=False), f'CREATE DATABASE "{name}"'))
    url = admin.set(database=name).render_as_string(hide_password=False)
    try:
        db_mod.upgrade(url)
        yield url
    finally:
        asyncio.run(
            _admin(
                admin.render_as_string(hide_password=False), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
            )
        )


@pytest.fixture
async def database_url(_migrated: str, tmp_path: Path) -> AsyncIterator[str]:
    """A migrated, empty database for this test."""
    if _pg_url() is None:
        path = tmp_path / "switchboard.db"
        shutil.copyfile(_migrated, path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    await _admin(_migrated, f"TRUNCATE {tables} CASCADE")
    yield _migrated


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """Override in a test module to change settings for its tests."""
    return {}


@pytest.fixture
def settings(database_url: str, settings_overrides: dict[str, Any]) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "secret_encryption_key": TEST_ENCRYPTION_KEY,
        # The stand-in providers listen on 127.0.0.1 over plain HTTP.
        "outbound_allow_http": True,
        "outbound_allow_cidrs": "127.0.0.0/8",
        "base_url": "http://127.0.0.1:8080",
    }
    values.update(settings_overrides)
    return Settings(**values)


@pytest.fixture
def extra_providers() -> list[object]:
    """Override to register test-only providers (e.g. a `linear` kind) alongside the installed ones."""
    return []


@pytest.fixture
async def services(settings: Settings, extra_providers: list[object]) -> AsyncIterator[Services]:
    services = Services(
        settings=settings,
        db=db_mod.Database(settings.database_url),
        vault=Vault(settings.encryption_key),
        providers=plugins.load(extra=extra_providers),
    )
    yield services
    await services.db.dispose()


@pytest.fixture
def db(services: Services) -> db_mod.Database:
    return services.db


@pytest.fixture
async def server(services: Services) -> AsyncIterator[TestServer]:
    """The whole app on a real 127.0.0.1 port; ``str(server.make_url("/"))`` is its base URL."""
    app = make_app(services)
    test_server = TestServer(app, host="127.0.0.1")
    # The same access log as `serve`: ingest tokens shortened, so tests can grep logs for them.
    await test_server.start_server(access_log_class=RedactingAccessLogger)
    yield test_server
    await test_server.close()


@pytest.fixture
def bell(server: TestServer) -> Doorbell:
    """The running app's doorbell (its live MCP sessions)."""
    return server.app[DOORBELL]


@pytest.fixture
def base_url(server: TestServer) -> str:
    return str(server.make_url("")).rstrip("/")
