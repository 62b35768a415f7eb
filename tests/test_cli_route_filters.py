"""``webhook route list --webhook ID`` and ``--endpoint SLUG`` name a webhook and an endpoint: one
that does not exist (a typo) is ``not_found``, one line and exit 1, as ``webhook list --endpoint``,
``quarantine list --webhook`` and ``todo list --endpoint`` say it. It answered "no routes" with
exit 0, which reads as "this webhook fans out to nobody". The helpers are the shape of
``tests/test_cli_admin.py``'s (tests do not import each other)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner, Result

from switchboard.cli import main
from switchboard.testing import TEST_ENCRYPTION_KEY

Cli = Callable[..., Result]


@pytest.fixture
def cli(database_url: str) -> Cli:
    runner = CliRunner(
        env={
            "SWITCHBOARD_DATABASE_URL": database_url,
            "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
        }
    )

    def invoke(*args: str) -> Result:
        return runner.invoke(main, list(args))

    return invoke


def ok(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def refused(result: Result, code: str) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {code}: "), lines[0]
    return lines[0]


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
