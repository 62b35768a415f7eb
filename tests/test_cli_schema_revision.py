"""A database whose ``alembic_version`` table holds no revision (``alembic downgrade base`` leaves
it so, with every table dropped) has no Switchboard schema: every command says to run
``switchboard db upgrade``. It answered "the database schema is at revision None; … (this
Switchboard is older than it)", which sends the operator to upgrade Switchboard instead."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from click.testing import CliRunner

from switchboard import migrate
from switchboard.cli import main


def test_a_database_migrated_down_to_base_says_run_db_upgrade(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'down.db'}"
    migrate.upgrade(url)
    command.downgrade(migrate.alembic_config(url), "base")
    runner = CliRunner(env={"SWITCHBOARD_DATABASE_URL": url})
    for args in (["human", "list"], ["todo", "list"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 1 and result.stdout == "", (result.stdout, result.stderr)
        assert result.stderr == (
            "error: unavailable: the database has no Switchboard schema (run `switchboard db upgrade`)\n"
        ), result.stderr
    # And the advice is right: the upgrade brings it back.
    upgraded = runner.invoke(main, ["db", "upgrade"])
    assert upgraded.exit_code == 0, upgraded.stderr
    assert runner.invoke(main, ["human", "list"]).exit_code == 0
