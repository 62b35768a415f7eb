"""The command line's refusals of input that once got a traceback or was taken: a secret on stdin
that is not UTF-8, a ``--payload`` no database or JSON reader can carry (a lone surrogate, NaN,
Infinity), a NUL in an argument, a database URL whose port is no number (whose traceback quoted the
password's tail), past 65535, or with an option the driver does not take or a value it refuses, a
schema behind this Switchboard's, ``plugin new``'s refusals, and a route filter naming no webhook or
endpoint (it answered "no routes"). Each is one line on stderr with a stable code and a non-zero exit,
and nothing is written. The helpers are the shape of ``tests/test_cli_admin.py``'s (tests do not
import each other)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from switchboard import migrate
from switchboard.cli import main
from switchboard.testing import TEST_ENCRYPTION_KEY

Cli = Callable[..., Result]


def _env(database_url: str) -> dict[str, str]:
    return {
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_BASE_URL": "https://switchboard.example.test",
        "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
    }


def _runner(env: dict[str, str]) -> Cli:
    runner = CliRunner(env=env)

    def invoke(*args: str, input: str | bytes | None = None) -> Result:
        # catch_exceptions=True: a traceback must show up as a failed assertion, not abort the test.
        return runner.invoke(main, list(args), input=input)

    return invoke


@pytest.fixture
def cli(database_url: str) -> Cli:
    return _runner(_env(database_url))


def ok(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def refused(result: Result, code: str, exit_code: int = 1) -> str:
    """One line on stderr naming ``code``, nothing on stdout, ``exit_code``, no exception."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == exit_code, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {code}"), lines[0]
    return lines[0]


def count(database_url: str, table: str, where: str = "") -> int:
    async def go() -> int:
        engine = create_async_engine(database_url)
        try:
            async with engine.connect() as conn:
                sql = f'SELECT count(*) FROM "{table}"' + (f" WHERE {where}" if where else "")
                return int((await conn.execute(text(sql))).scalar_one())
        finally:
            await engine.dispose()

    return asyncio.run(go())


def alice(cli: Cli) -> None:
    ok(cli("human", "add", "alice", "--json"))
    ok(cli("endpoint", "vend", "--name", "Alice Bot", "--owner", "alice", "--json"))


def _subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(extra)
    return env


# ---------------------------------------------------------------------------------------------
# Secrets on stdin that are not UTF-8


@pytest.mark.parametrize(
    "command",
    [
        (
            "connection",
            "add",
            "--owner",
            "alice",
            "--kind",
            "github",
            "--name",
            "gh",
            "--account-key",
            "github.com",
        ),
        ("connection", "rotate", "cn_nope"),
        ("webhook", "set-secret", "wh_nope"),
    ],
)
def test_a_secret_on_stdin_that_is_not_utf8_is_one_line(
    cli: Cli, database_url: str, command: tuple[str, ...]
) -> None:
    # stdin is decoded strictly (as it is at a terminal set to en_US.UTF-8 and the like):
    # read_secret's stdin.read raised UnicodeDecodeError out of the command, a traceback.
    alice(cli)
    refused(cli(*command, input=b"ghp_\xff\xfesecret\n"), "invalid_argument")
    assert count(database_url, "connections") == 0


def test_a_secret_on_stdin_that_is_not_utf8_is_one_line_in_a_real_process(database_url: str) -> None:
    env = _subprocess_env(**_env(database_url), PYTHONIOENCODING="utf-8:strict")
    proc = subprocess.run(
        [sys.executable, "-m", "switchboard", "webhook", "set-secret", "wh_nope"],
        env=env,
        input=b"whsec_\xff\n",
        capture_output=True,
        timeout=60,
    )
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    assert proc.returncode == 1
    assert proc.stderr.count(b"\n") == 1 and proc.stderr.startswith(b"error: invalid_argument"), proc.stderr


# ---------------------------------------------------------------------------------------------
# `todo push --payload`: JSON the API refuses


@pytest.mark.parametrize("payload", ['"\\ud800"', '{"k": "a\\udfffb"}', '{"\\ud83d": 1}'])
def test_todo_push_payload_with_a_lone_surrogate_is_invalid_argument(
    cli: Cli, database_url: str, payload: str
) -> None:
    # Was `error: internal: unexpected UnicodeEncodeError` (the API answers 400 invalid_argument).
    alice(cli)
    refused(
        cli("todo", "push", "--endpoint", "alice-bot", "--title", "t", "--payload", payload),
        "invalid_argument",
    )
    assert count(database_url, "todos") == 0


@pytest.mark.parametrize("payload", ["NaN", '{"x": Infinity}', '{"x": -Infinity}', '{"x": 1e999}'])
def test_todo_push_payload_that_is_not_standard_json_is_refused(
    cli: Cli, database_url: str, payload: str
) -> None:
    # docs/cli.md: "The payload must be valid JSON". NaN/Infinity were stored, and `todo show --json`
    # then printed a bare NaN token: not the "one JSON object" the docs promise.
    alice(cli)
    refused(
        cli("todo", "push", "--endpoint", "alice-bot", "--title", "t", "--payload", payload),
        "invalid_argument",
    )
    assert count(database_url, "todos") == 0


# ---------------------------------------------------------------------------------------------
# NUL characters in arguments (reachable by a program invoking `main`, not through exec)


@pytest.mark.parametrize(
    "args",
    [
        ("human", "add", "carl", "--email", "carl\x00@example.com"),
        ("endpoint", "vend", "--name", "N\x00ul", "--owner", "alice"),
        ("todo", "push", "--endpoint", "alice-bot", "--title", "t\x00t"),
    ],
)
def test_a_nul_in_an_argument_is_refused_as_bad_input_and_writes_nothing(
    cli: Cli, database_url: str, args: tuple[str, ...]
) -> None:
    # SQLite stored the NUL; PostgreSQL refused it as "unavailable: database error (Error)", an
    # outage code for a bad argument. The API refuses NUL in every string field up front.
    alice(cli)
    before = {t: count(database_url, t) for t in ("humans", "endpoints", "todos")}
    result = cli(*args)
    assert result.exit_code in (1, 2), (result.stdout, result.stderr)
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in result.stderr
    assert line.startswith(("error: invalid_argument", "error: usage")), line
    assert {t: count(database_url, t) for t in before} == before


# ---------------------------------------------------------------------------------------------
# SWITCHBOARD_DATABASE_URL that parses badly


@pytest.mark.parametrize("command", [("human", "list"), ("db", "upgrade")])
def test_a_database_url_whose_port_is_not_a_number_is_a_config_error_that_quotes_no_password(
    command: tuple[str, ...],
) -> None:
    # A password with an unescaped "@" and ":" puts its tail where the port goes: make_url raised
    # ValueError("invalid literal for int() ...: 'S3cretTail@db.example:5432'"), a traceback that
    # prints that part of the password.
    url = "postgresql://app:Tr0ub@dor:S3cretTail@db.example:5432/sb"
    proc = subprocess.run(  # noqa: S603 (our own CLI)
        [sys.executable, "-m", "switchboard", *command],
        env=_subprocess_env(SWITCHBOARD_DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "S3cretTail" not in proc.stderr + proc.stdout
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: SWITCHBOARD_DATABASE_URL"), proc.stderr
    assert proc.stderr.count("\n") == 1


def test_a_database_url_with_a_query_argument_the_driver_does_not_take_is_one_line() -> None:
    # `?sslmode=require` is libpq's spelling (asyncpg's is `?ssl=require`): every command but
    # `db upgrade` died with "TypeError: connect() got an unexpected keyword argument 'sslmode'".
    cli = _runner(_env("postgresql+asyncpg://postgres@127.0.0.1:1/none?sslmode=require"))
    line = refused(cli("human", "list"), "unavailable")
    assert "sslmode" in line


# ---------------------------------------------------------------------------------------------
# A database migrated, but not to the latest revision


def test_a_database_behind_the_latest_migration_says_run_db_upgrade(tmp_path: Path) -> None:
    # Only "no alembic_version table" was recognised: a database at an older revision answered
    # every command "unavailable: database error (OperationalError)", with no word of the fix.
    url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0001")
    cli = _runner(_env(url))
    for args in (("human", "list"), ("human", "add", "amy"), ("todo", "list")):
        line = refused(cli(*args), "unavailable")
        assert "db upgrade" in line, line


def test_db_upgrade_into_a_folder_that_does_not_exist_names_it(tmp_path: Path) -> None:
    # The line carried SQLAlchemy's wrapper: the driver's "unable to open database file" (naming no
    # file), an escaped line break and a "(Background on this error at: …)" link.
    folder = tmp_path / "no-such-folder"
    line = refused(_runner(_env(f"sqlite+aiosqlite:///{folder / 'sb.db'}"))("db", "upgrade"), "unavailable")
    assert (
        line == f"error: unavailable: cannot create the SQLite database: the folder {folder} does not exist"
    )


def test_db_upgrade_that_the_driver_refuses_names_its_reason_only(tmp_path: Path) -> None:
    # A file that is not a database: the driver's own first line, without SQLAlchemy's additions.
    database = tmp_path / "not-a-database.db"
    database.write_bytes(b"this is not a SQLite file" * 100)
    database.chmod(0o600)  # private, so no warning line about its mode
    line = refused(_runner(_env(f"sqlite+aiosqlite:///{database}"))("db", "upgrade"), "unavailable")
    assert line == "error: unavailable: cannot migrate the database (DatabaseError: file is not a database)"


# ---------------------------------------------------------------------------------------------
# Stable error codes


@pytest.mark.parametrize("name", ["Acme", "acme-chat"])
def test_plugin_new_refuses_with_a_stable_code(tmp_path: Path, name: str) -> None:
    # docs/cli.md: the codes are the API's (`invalid_argument`, ...); `plugin new` said `invalid:`.
    result = CliRunner().invoke(main, ["plugin", "new", name, "--dir", str(tmp_path / "out")])
    refused(result, "invalid_argument")
    assert not (tmp_path / "out").exists()


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


def test_route_list_names_an_unknown_webhook_or_endpoint_as_not_found(cli: Cli) -> None:
    ok(cli("human", "add", "ada", "--json"))
    for name in ("ada-bot", "ada-helper"):
        ok(cli("endpoint", "vend", "--name", name, "--owner", "ada", "--json"))
    created = ok(cli("webhook", "create", "--endpoint", "ada-bot", "--source", "generic", "--json"))
    webhook_id = created["webhook"]["id"]
    ok(cli("webhook", "route", "add", webhook_id, "--endpoint", "ada-helper", "--json"))

    # The filters as given still list what they match.
    assert len(ok(cli("webhook", "route", "list", "--webhook", webhook_id, "--json"))["routes"]) == 1
    assert len(ok(cli("webhook", "route", "list", "--endpoint", "ada-helper", "--json"))["routes"]) == 1
    assert ok(cli("webhook", "route", "list", "--endpoint", "ada-bot", "--json"))["routes"] == []

    line = refused(cli("webhook", "route", "list", "--webhook", webhook_id + "x"), "not_found")
    assert webhook_id + "x" in line
    line = refused(cli("webhook", "route", "list", "--endpoint", "ada-hepler", "--json"), "not_found")
    assert "ada-hepler" in line
