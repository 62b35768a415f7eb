"""``switchboard todo list`` and the bulk ``todo requeue`` never read an empty filter as no filter:
``--queue ""`` (a script's unset variable, ``--queue "$QUEUE"``) names no queue, so it is refused
with one ``invalid_argument`` line and exit 1, as the API refuses ``"queue": ""``. It was read as
"every queue": a bulk requeue meant for one queue's dead letters took every queue's."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import select, update

from switchboard import tenancy, todos
from switchboard.cli import main
from switchboard.db import Database
from switchboard.models import Todo
from switchboard.testing import TEST_ENCRYPTION_KEY, add_todo

FILTERS = ("--endpoint", "--queue", "--source", "--kind", "--search", "--place", "--since", "--until")


async def _run(database_url: str, *args: str) -> Result:
    runner = CliRunner(
        env={
            "SWITCHBOARD_DATABASE_URL": database_url,
            "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
        }
    )
    return await asyncio.to_thread(runner.invoke, main, list(args))


async def _dead_letter(db: Database, queue: str) -> str:
    endpoint = await tenancy.get_endpoint(db, "bot")
    todo = await add_todo(db, endpoint, title=f"dies in {queue}", queue=queue)
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(max_attempts=1))
    await todos.claim(db, endpoint, todo.id)
    await todos.fail(db, endpoint, todo.id, error="boom")
    return todo.id


def _refused(result: Result, option: str) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1, (option, result.exit_code, result.stdout, result.stderr)
    assert result.stdout == "", (option, result.stdout)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: invalid_argument: "), (option, result.stderr)
    assert option in lines[0], (option, lines[0])


@pytest.mark.parametrize("option", FILTERS)
async def test_an_empty_filter_is_refused_and_requeues_nothing(
    db: Database, database_url: str, option: str
) -> None:
    owner = await tenancy.resolve_owner(db, human=(await tenancy.add_human(db, "alice"))[0].handle)
    await tenancy.vend_endpoint(db, name="bot", owner=owner, queues=["ci", "triage"])
    dead = [await _dead_letter(db, "ci"), await _dead_letter(db, "triage")]

    # A real filter narrows the same command.
    narrowed = await _run(
        database_url, "todo", "requeue", "--state", "dead", "--queue", "ci", "--dry-run", "--json"
    )
    assert narrowed.exit_code == 0 and json.loads(narrowed.stdout)["matched"] == 1, narrowed.stdout

    _refused(await _run(database_url, "todo", "requeue", "--state", "dead", option, ""), option)
    _refused(await _run(database_url, "todo", "requeue", "--state", "dead", option, "", "--dry-run"), option)
    _refused(await _run(database_url, "todo", "list", option, ""), option)

    # Both dead letters are still dead: the refused requeue took neither.
    async with db.read() as s:
        states = dict((await s.execute(select(Todo.id, Todo.dead_letter).where(Todo.id.in_(dead)))).all())
    assert states == {dead[0]: True, dead[1]: True}
