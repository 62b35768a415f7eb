"""An in-memory SQLite database lives in one connection and goes with it: `switchboard serve`
migrated one and served another, empty one (`/healthz` said ok, every delivery, tool call and page
was `503 unavailable`), and each CLI command had a database of its own. Such a URL is a bad value
of SWITCHBOARD_DATABASE_URL: one line that names the variable, and a non-zero exit."""

from __future__ import annotations

import pytest

from switchboard.settings import ConfigError, load_settings
from switchboard.testing import ServeProcesses

IN_MEMORY = [
    "sqlite+aiosqlite://",
    "sqlite+aiosqlite:///:memory:",
    "sqlite+aiosqlite:///file:sb?mode=memory&cache=shared&uri=true",
]


@pytest.mark.parametrize("url", IN_MEMORY)
async def test_serve_refuses_an_in_memory_database_in_one_line(
    switchboard_serve: ServeProcesses, url: str
) -> None:
    done = await switchboard_serve.new({"database_url": url}).run("serve", timeout=60)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: SWITCHBOARD_DATABASE_URL: ")
    assert "serving on" not in done.stderr


@pytest.mark.parametrize("url", IN_MEMORY)
def test_an_in_memory_database_names_the_variable(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", url)
    with pytest.raises(ConfigError, match=r"^SWITCHBOARD_DATABASE_URL: .*file"):
        load_settings()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite+aiosqlite:///./switchboard.db",
        "sqlite+aiosqlite:////var/lib/switchboard/sb.db",
        "sqlite+aiosqlite:///file:sb.db?uri=true",
    ],
)
def test_a_database_file_is_still_taken(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", url)
    assert load_settings().database_url == url
