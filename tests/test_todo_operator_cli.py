"""``switchboard todo requeue|release|cancel`` and ``todo show`` as the instance operator types them:
one by id and in bulk, text and ``--json``, the refusals on one line, and the history rows naming
the CLI."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import select, update

from switchboard import tenancy, todos
from switchboard.cli import main
from switchboard.db import Database
from switchboard.models import Endpoint, Todo, TodoEvent
from switchboard.testing import TEST_ENCRYPTION_KEY, add_todo


class Cli:
    def __init__(self, database_url: str) -> None:
        env = {
            "SWITCHBOARD_DATABASE_URL": database_url,
            "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
        }
        self.runner = CliRunner(env=env)

    async def run(self, *args: str) -> Result:
        return await asyncio.to_thread(self.runner.invoke, main, list(args), catch_exceptions=False)

    async def ok(self, *args: str) -> dict[str, Any]:
        result = await self.run(*args, "--json")
        assert result.exit_code == 0 and result.stderr == "", (args, result.stdout, result.stderr)
        return dict(json.loads(result.stdout))

    async def refused(self, *args: str, code: str, exit_code: int = 1) -> str:
        result = await self.run(*args)
        assert result.exit_code == exit_code, (args, result.stdout, result.stderr)
        assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"error: {code}"), result.stderr
        return result.stderr


@pytest.fixture
def cli(database_url: str) -> Cli:
    return Cli(database_url)


async def _bot(db: Database, queues: list[str] | None = None) -> Endpoint:
    human, _ = await tenancy.add_human(db, "alice")
    owner = await tenancy.resolve_owner(db, human=human.handle)
    endpoint, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner, queues=queues or ["default"])
    return endpoint


async def _dead(db: Database, endpoint: Endpoint, queue: str | None = None) -> str:
    todo = await add_todo(db, endpoint, queue=queue)
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(max_attempts=1))
    await todos.claim(db, endpoint, todo.id)
    await todos.fail(db, endpoint, todo.id, error="boom")
    return todo.id


async def test_requeue_release_cancel_by_id(cli: Cli, db: Database) -> None:
    bot = await _bot(db)
    dead = await _dead(db, bot)

    shown = await cli.run("todo", "show", dead)
    assert shown.exit_code == 0
    assert "dead:     its last attempt failed (attempts_exhausted)" in shown.stdout
    assert "finished: 20" in shown.stdout and "result:   -" in shown.stdout
    assert "error: boom" in shown.stdout

    answer = await cli.ok("todo", "requeue", dead)
    assert answer["todo"]["state"] == "pending" and answer["todo"]["attempt"] == 0
    assert answer["event"]["actor"].startswith("cli") and answer["event"]["from_state"] == "dead"
    await todos.claim(db, bot, dead)
    text = await cli.run("todo", "release", dead)
    assert text.exit_code == 0 and f"todo {dead} released: claimed → pending" in text.stdout
    done = await cli.run("todo", "cancel", dead)
    assert done.exit_code == 0 and "cancelled: pending → cancelled" in done.stdout

    shown = await cli.ok("todo", "show", dead)
    assert [e["action"] for e in shown["todo"]["history"]] == ["requeue", "release", "cancel"]
    assert shown["todo"]["state"] == "cancelled" and shown["todo"]["finished_at"] is not None
    text = (await cli.run("todo", "show", dead)).stdout
    assert "requeue by cli" in text and "cancel by cli" in text and "pending → cancelled" in text

    assert "only failed todos" in await cli.refused("todo", "requeue", dead, code="conflict")
    await cli.refused("todo", "release", dead, code="conflict")
    await cli.refused("todo", "cancel", dead, code="conflict")
    await cli.refused("todo", "cancel", "td_00000000000000000000000000", code="not_found")
    await cli.refused("todo", "requeue", code="usage", exit_code=2)
    await cli.refused("todo", "requeue", dead, "--state", "dead", code="usage", exit_code=2)
    # A bulk option with one todo is a mistake to say, not an option to drop silently.
    await cli.refused("todo", "requeue", dead, "--limit", "5", code="usage", exit_code=2)
    await cli.refused("todo", "release", code="usage", exit_code=2)


async def test_the_result_and_finish_time_show_in_text(cli: Cli, db: Database) -> None:
    bot = await _bot(db)
    todo = await add_todo(db, bot, title="finish me")
    await todos.claim(db, bot, todo.id)
    await todos.complete(db, bot, todo.id, result={"merged": "abc123"})
    text = (await cli.run("todo", "show", todo.id)).stdout
    assert '"merged": "abc123"' in text and "finished: 20" in text and "result:\n" in text


async def test_bulk_requeue_by_filter(cli: Cli, db: Database) -> None:
    bot = await _bot(db, ["ci", "triage"])
    ci = [await _dead(db, bot, "ci") for _ in range(3)]
    triage = await _dead(db, bot, "triage")

    listed = await cli.ok("todo", "list", "--state", "dead", "--queue", "ci")
    assert sorted(t["id"] for t in listed["todos"]) == sorted(ci)
    dry = await cli.ok("todo", "requeue", "--state", "dead", "--queue", "ci", "--dry-run")
    assert (dry["matched"], dry["requeued"], dry["dry_run"]) == (3, 0, True)
    part = await cli.ok("todo", "requeue", "--state", "dead", "--queue", "ci", "--limit", "2")
    assert part["todo_ids"] == ci[:2] and part["more"] is True
    text = await cli.run("todo", "requeue", "--state", "dead", "--queue", "ci")
    assert text.exit_code == 0 and "1 of 1 matching todo(s) requeued" in text.stdout
    async with db.read() as s:
        states = dict((await s.execute(select(Todo.id, Todo.state))).all())
        events = list((await s.scalars(select(TodoEvent))).all())
    assert [states[i] for i in ci] == ["pending"] * 3 and states[triage] == "failed"
    assert len(events) == 3 and all("bulk requeue of state=dead queue=ci" in (e.detail or "") for e in events)

    await cli.refused("todo", "requeue", "--queue", "ci", code="usage", exit_code=2)
    await cli.refused("todo", "requeue", "--state", "dead", "--since", "last week", code="invalid_argument")
    await cli.refused("todo", "requeue", "--state", "dead", "--endpoint", "nope", code="not_found")
    await cli.refused("todo", "list", "--state", "lost", code="usage", exit_code=2)
