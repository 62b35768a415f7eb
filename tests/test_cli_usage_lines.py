"""A command line click cannot parse is one ``error: usage: …`` line on stderr, exit 2 (docs/cli.md,
"Output, errors and exit codes"), whatever the arguments hold. Click quotes an extra argument as
given, so one with a line break printed two lines, and a bidi override or escape sequence in it
reached the terminal raw."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from switchboard.cli import main


@pytest.mark.parametrize(
    "args",
    [
        ["human", "add", "alice", "bob\nerror: forged line"],
        ["todo", "push", "--endpoint", "bot", "--title", "t", "extra\u202eevil"],
        ["webhook", "show", "wh_1", "x\x1b]0;title\x07"],
    ],
)
def test_a_usage_error_quoting_an_argument_is_one_neutralised_line(tmp_path: object, args: list[str]) -> None:
    # Refused while parsing: no database is opened.
    result = CliRunner(env={"SWITCHBOARD_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/none.db"}).invoke(
        main, args
    )
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n"), result.stderr
    assert result.stderr.startswith("error: usage: Got unexpected extra argument"), result.stderr
    for raw in ("\u202e", "\x1b", "\x07"):
        assert raw not in result.stderr, result.stderr
