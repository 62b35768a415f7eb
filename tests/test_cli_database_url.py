"""A ``SWITCHBOARD_DATABASE_URL`` that parses but holds a value the driver refuses (a port past
65535, a query option that is not a number) is one ``error: unavailable: …`` line and exit 1 from
every command that opens the database, never a traceback (docs/cli.md, "Output, errors and exit
codes"). The driver raised ValueError or OverflowError, which only ``db upgrade`` turned into a line.
The helpers are the shape of ``tests/test_cli_bad_input.py``'s (tests do not import each other)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from switchboard.cli import main
from switchboard.testing import TEST_ENCRYPTION_KEY


def _env(database_url: str) -> dict[str, str]:
    return {
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
    }


def refused(result: Result, code: str, exit_code: int = 1) -> str:
    """One line on stderr naming ``code``, nothing on stdout, ``exit_code``, no exception."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == exit_code, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {code}"), lines[0]
    return lines[0]


# Each parses as a URL; the driver refuses a value in it, at engine creation or at connect.
POSTGRESQL_URLS = [
    # OverflowError("connect(): port must be 0-65535.") from the socket, at connect.
    "postgresql+asyncpg://app:S3cretPw@127.0.0.1:99999/none",
    # ValueError("invalid command_timeout value: ...") from asyncpg, at connect.
    "postgresql+asyncpg://app:S3cretPw@127.0.0.1:1/none?command_timeout=abc",
    # ValueError("invalid literal for int() ...") from SQLAlchemy, at engine creation.
    "postgresql+asyncpg://app:S3cretPw@127.0.0.1:1/none?prepared_statement_cache_size=abc",
]


@pytest.mark.parametrize("url", POSTGRESQL_URLS)
@pytest.mark.parametrize("command", [("human", "list"), ("human", "add", "amy")])
def test_a_postgresql_url_with_a_value_the_driver_refuses_is_one_line(
    url: str, command: tuple[str, ...]
) -> None:
    line = refused(CliRunner(env=_env(url)).invoke(main, list(command)), "unavailable")
    assert "SWITCHBOARD_DATABASE_URL" in line, line
    assert "S3cretPw" not in line


def test_a_sqlite_url_with_an_option_value_the_driver_refuses_is_one_line(tmp_path: Path) -> None:
    # ValueError("could not convert string to float: 'abc'") from SQLAlchemy, at engine creation.
    database = tmp_path / "sb.db"
    database.touch()
    url = f"sqlite+aiosqlite:///{database}?timeout=abc"
    line = refused(CliRunner(env=_env(url)).invoke(main, ["human", "list"]), "unavailable")
    assert "SWITCHBOARD_DATABASE_URL" in line, line


def test_a_port_past_65535_is_one_line_in_a_real_process() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(_env(POSTGRESQL_URLS[0]))
    proc = subprocess.run(
        [sys.executable, "-m", "switchboard", "endpoint", "list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: unavailable: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "S3cretPw" not in proc.stderr
