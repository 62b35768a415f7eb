"""The pytest plugin: switchboard.testing as fixtures. Installed with switchboard (the ``pytest11``
entry point ``switchboard``), so any test suite in the same environment can use them; a conftest.py
or test module overrides any of them by defining a fixture of the same name.

Database and app
    ``database_url``     a migrated, empty database for this test (SQLite, or PostgreSQL when
                         ``SWITCHBOARD_TEST_DATABASE_URL`` is set)
    ``settings_overrides``  {} — override it to change the settings of a module's tests
    ``settings``         Settings for the test database, a fixed encryption key, outbound calls to
                         127.0.0.1 over HTTP allowed (where the stand-ins listen)
    ``extra_providers``  [] — override it to load test-only providers beside the installed ones
    ``services``, ``db`` the service container and its database
    ``server``, ``base_url``, ``bell``  the whole app on a real 127.0.0.1 port, its URL, its doorbell
Stand-in providers
    ``fake_providers``   start any stand-in (``await fake_providers.start("linear", answer=...)``)
    ``fake_github``, ``fake_gitea``, ``fake_slack``, ``fake_cairn``  one stand-in each, over TLS
    ``fake_api_settings``  settings pointing the github/slack API bases at ``fake_github``/``fake_slack``
    ``guarded``          the services' outbound client, trusting the stand-ins' test CA
Processes
    ``switchboard_serve``  real ``switchboard serve`` processes on the test database
                         (``await switchboard_serve.start({"log_level": "DEBUG"})``), stopped at the end
Browser
    ``chromium``         Debian's Chromium driven by Playwright (``testing.browser``); skips, saying
                         why, where it is missing, except under CI where that fails

The async fixtures need pytest-asyncio (the ``test`` extra of switchboard).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from switchboard import plugins
from switchboard.app import make_app
from switchboard.db import Database
from switchboard.logs import RedactingAccessLogger
from switchboard.mcp import DOORBELL
from switchboard.mcp.doorbell import Doorbell
from switchboard.outbound import Outbound
from switchboard.services import Services
from switchboard.settings import Settings
from switchboard.testing import browser as test_browser
from switchboard.testing.database import (
    TEST_ENCRYPTION_KEY,
    create_migrated,
    drop_migrated,
    engine_name,
    fresh_database,
)
from switchboard.testing.providers import FakeProvider, FakeProviders, StalledHost
from switchboard.testing.serve import ServeProcesses
from switchboard.testing.tls import guarded_client, tls
from switchboard.vault import Vault

if TYPE_CHECKING:
    from playwright.async_api import Browser

try:
    from pytest_asyncio import fixture as async_fixture
except ImportError:  # pragma: no cover - only without pytest-asyncio
    # The plugin still loads (so an unrelated suite in the same environment keeps working); asking
    # for one of its async fixtures then fails with pytest's own message about async fixtures.
    async_fixture = pytest.fixture  # type: ignore[assignment]


def pytest_report_header() -> str:
    return f"switchboard test database: {engine_name()}"


# ---------------------------------------------------------------------------------------------
# Database and app


@pytest.fixture(scope="session")
def _switchboard_migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The run's migrated database: a template SQLite file, or a private PostgreSQL database."""
    migrated = create_migrated(tmp_path_factory.mktemp("template"))
    try:
        yield migrated
    finally:
        drop_migrated(migrated)


@async_fixture
async def database_url(_switchboard_migrated: str, tmp_path: Path) -> str:
    """A migrated, empty database for this test."""
    return await fresh_database(_switchboard_migrated, tmp_path)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """Override in a test module (or parametrize) to change settings for its tests."""
    return {}


@pytest.fixture
def settings(database_url: str, settings_overrides: dict[str, Any]) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "secret_encryption_key": TEST_ENCRYPTION_KEY,
        # The stand-in providers listen on 127.0.0.1 (over TLS, or plain HTTP when asked).
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


@async_fixture
async def services(settings: Settings, extra_providers: list[object]) -> AsyncIterator[Services]:
    services = Services(
        settings=settings,
        db=Database(settings.database_url),
        vault=Vault(settings.encryption_key),
        providers=plugins.load(extra=extra_providers),
    )
    yield services
    # The app closes the rule sandbox when it stops; a test that ran rules without one closes it here.
    await services.sandbox.close()
    await services.db.dispose()


@pytest.fixture
def db(services: Services) -> Database:
    return services.db


@async_fixture
async def server(services: Services) -> AsyncIterator[TestServer]:
    """The whole app on a real 127.0.0.1 port; ``str(server.make_url("/"))`` is its base URL."""
    test_server = TestServer(make_app(services), host="127.0.0.1")
    # The same access log as `serve`: ingest tokens shortened, so tests can grep logs for them.
    await test_server.start_server(access_log_class=RedactingAccessLogger)
    yield test_server
    await test_server.close()


@pytest.fixture
def bell(server: TestServer) -> Doorbell:
    """The running app's doorbell (its live MCP sessions)."""
    app = server.app
    assert isinstance(app, web.Application)
    return app[DOORBELL]


@pytest.fixture
def base_url(server: TestServer) -> str:
    return str(server.make_url("")).rstrip("/")


# ---------------------------------------------------------------------------------------------
# Stand-in providers


@async_fixture
async def fake_providers() -> AsyncIterator[FakeProviders]:
    providers = FakeProviders()
    yield providers
    await providers.close()


@async_fixture
async def fake_github(fake_providers: FakeProviders) -> FakeProvider:
    return await fake_providers.start("github")


@async_fixture
async def fake_gitea(fake_providers: FakeProviders) -> FakeProvider:
    return await fake_providers.start("gitea")


@async_fixture
async def fake_slack(fake_providers: FakeProviders) -> FakeProvider:
    return await fake_providers.start("slack")


@async_fixture
async def fake_cairn(fake_providers: FakeProviders) -> FakeProvider:
    return await fake_providers.start("cairn")


@async_fixture
async def stalled_host() -> AsyncIterator[StalledHost]:
    """A host that accepts, reads and never answers (``StalledHost``), closed after the test."""
    host = await StalledHost().start()
    yield host
    await host.close()


@pytest.fixture
def fake_api_settings(fake_github: FakeProvider, fake_slack: FakeProvider) -> dict[str, Any]:
    """The SaaS API bases pointed at the stand-ins (SWITCHBOARD_GITHUB_API_URL / _SLACK_API_URL).
    Return it from a module's ``settings_overrides`` to use it."""
    return {"github_api_url": fake_github.base_url, "slack_api_url": f"{fake_slack.base_url}/api"}


@async_fixture
async def guarded(services: Services) -> AsyncIterator[Outbound]:
    """The services' outbound client: the production one, trusting the stand-ins' test CA."""
    client = guarded_client(allow_cidrs=services.settings.outbound_allow_cidrs)
    services.outbound = client
    yield client
    await client.close()


# ---------------------------------------------------------------------------------------------
# Processes


@async_fixture
async def switchboard_serve(database_url: str, tmp_path: Path) -> AsyncIterator[ServeProcesses]:
    """Real ``switchboard serve`` processes on this test's database, with the ``settings`` fixture's
    defaults (fixed key, outbound to 127.0.0.1 over HTTP allowed) and trusting the stand-ins' test CA
    (``SSL_CERT_FILE``). Every process still running at the end is stopped."""
    servers = ServeProcesses(
        {
            "database_url": database_url,
            "secret_encryption_key": TEST_ENCRYPTION_KEY,
            "outbound_allow_http": True,
            "outbound_allow_cidrs": "127.0.0.0/8",
        },
        tmp_path,
        extra_env={"SSL_CERT_FILE": str(tls().ca_file)},
    )
    try:
        yield servers
    finally:
        await servers.close()


# ---------------------------------------------------------------------------------------------
# Browser


@async_fixture
async def chromium() -> AsyncIterator[Browser]:
    """A headless Chromium (``/usr/bin/chromium``, never a downloaded one) for this test."""
    why = test_browser.missing()
    if why is not None:
        if test_browser.required():
            pytest.fail(f"the browser tests must run under CI, but {why}")
        pytest.skip(why)
    async with test_browser.chromium() as browser:
        yield browser
