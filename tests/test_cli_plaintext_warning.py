"""Without ``SWITCHBOARD_SECRET_ENCRYPTION_KEY`` the webhook commands that store a signing secret say
on stderr that it is stored in plaintext, but a refused one prints only its one ``error:`` line
(docs/cli.md, "Output, errors and exit codes"): it stored nothing. The warning came first, so a
refused ``webhook create|rotate|set-secret`` printed two lines on stderr."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from switchboard.cli import main


@pytest.fixture
def cli(database_url: str) -> CliRunner:
    # No encryption key: secrets would be stored in plaintext.
    return CliRunner(env={"SWITCHBOARD_DATABASE_URL": database_url, "SWITCHBOARD_SECRET_ENCRYPTION_KEY": ""})


def _refused(result: Result, code: str) -> None:
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.splitlines() == [result.stderr.strip()], result.stderr
    assert result.stderr.startswith(f"error: {code}: "), result.stderr


def test_a_refused_secret_command_without_a_key_prints_only_its_error(cli: CliRunner) -> None:
    assert cli.invoke(main, ["human", "add", "alice"]).exit_code == 0
    assert cli.invoke(main, ["endpoint", "vend", "--name", "bot", "--owner", "alice"]).exit_code == 0

    _refused(
        cli.invoke(main, ["webhook", "create", "--endpoint", "nobody", "--source", "github", "--allow-all"]),
        "not_found",
    )
    _refused(cli.invoke(main, ["webhook", "rotate", "wh_nope"]), "not_found")
    _refused(cli.invoke(main, ["webhook", "set-secret", "wh_nope"], input="s3cret\n"), "not_found")

    # One that stores a secret still says it is in plaintext, after it is done.
    made = cli.invoke(
        main, ["webhook", "create", "--endpoint", "bot", "--source", "github", "--allow-all", "--json"]
    )
    assert made.exit_code == 0, made.stderr
    assert json.loads(made.stdout)["secret"].startswith("whsec_")
    assert made.stderr.startswith("warning: no SWITCHBOARD_SECRET_ENCRYPTION_KEY"), made.stderr
