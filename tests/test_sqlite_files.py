"""SQLite files are private (issue 13, item 15): the database that ``switchboard serve`` or
``switchboard db upgrade`` creates, and the -wal and -shm files SQLite makes beside it, are
readable by their owner only, whatever the umask. These always run on SQLite files of their own."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from switchboard import tenancy
from switchboard.cli import main
from switchboard.cli.instance import private_sqlite_file
from switchboard.db import Database
from switchboard.testing import ServeProcesses


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _modes(folder: Path) -> dict[str, int]:
    return {p.name: _mode(p) for p in folder.iterdir()}


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The common umask (022), under which SQLite alone would create 0644 files."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


async def test_db_upgrade_creates_the_database_and_its_wal_files_0600(
    tmp_path: Path, usual_umask: None
) -> None:
    path = tmp_path / "sb.db"
    url = f"sqlite+aiosqlite:///{path}"
    runner = CliRunner(env={"SWITCHBOARD_DATABASE_URL": url})
    # The CLI runs its own event loop: a thread of its own, outside this test's loop.
    result = await asyncio.to_thread(runner.invoke, main, ["db", "upgrade"])
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    assert _mode(path) == 0o600
    database = Database(url)
    try:
        await tenancy.add_human(database, "ada")  # a write: SQLite makes the -wal and -shm files
        assert _modes(tmp_path) == dict.fromkeys(["sb.db", "sb.db-shm", "sb.db-wal"], 0o600)
    finally:
        await database.dispose()


async def test_serve_creates_a_private_database(
    switchboard_serve: ServeProcesses, tmp_path: Path, usual_umask: None
) -> None:
    path = tmp_path / "data" / "sb.db"
    path.parent.mkdir()
    sb = await switchboard_serve.start({"database_url": f"sqlite+aiosqlite:///{path}"})
    try:
        modes = _modes(path.parent)
        assert "sb.db" in modes and set(modes.values()) == {0o600}, modes
    finally:
        assert await sb.stop() == 0


def test_an_existing_readable_database_is_left_as_is_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    path.touch()
    path.chmod(0o644)
    url = f"sqlite+aiosqlite:///{path}"
    result = CliRunner(env={"SWITCHBOARD_DATABASE_URL": url}).invoke(main, ["db", "upgrade"])
    assert result.exit_code == 0
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"warning: the SQLite database {path} is readable by other users (mode 644); "
        f"`chmod 600 {path}*` makes it private"
    ]
    assert _mode(path) == 0o644
    path.chmod(0o600)
    assert private_sqlite_file(url) is None


def test_other_databases_are_not_touched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for url in (
        "postgresql+asyncpg://nobody@127.0.0.1:1/none",
        "sqlite+aiosqlite://",
        "sqlite+aiosqlite:///:memory:",
        "sqlite+aiosqlite:///file:shared?mode=memory&uri=true",
    ):
        assert private_sqlite_file(url) is None
    assert list(tmp_path.iterdir()) == []
    # A folder that does not exist: nothing is created, SQLite reports it when it opens the file.
    assert private_sqlite_file(f"sqlite+aiosqlite:///{tmp_path / 'missing' / 'sb.db'}") is None
