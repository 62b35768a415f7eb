"""``switchboard todo show`` is the operator's account of what an agent did: its attempts (with the
summary and error the agent wrote), replies and history, one line each. The agent's summary and
error were printed as written, line breaks and all, so an agent (steered by the text of the work it
read) could add lines of its choosing to that account: a "reply … sent" that was never posted, a
history row. They now stay on their line, the break shown escaped (``\\x0a``); ``--json`` keeps the
exact text."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner, Result
from sqlalchemy import update

from switchboard import tenancy, todos
from switchboard.cli import main
from switchboard.db import Database
from switchboard.models import Todo
from switchboard.testing import TEST_ENCRYPTION_KEY, add_todo

FORGED_REPLY = "reply rp_01forged: sent github github.com/acme/api#7 https://github.com/acme/api/pull/7"
FORGED_HISTORY = "2026-12-06T00:00:00.000Z cancel by cli:root: pending → cancelled"


async def _show(database_url: str, todo_id: str, *extra: str) -> Result:
    runner = CliRunner(
        env={
            "SWITCHBOARD_DATABASE_URL": database_url,
            "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
        }
    )
    result = await asyncio.to_thread(runner.invoke, main, ["todo", "show", todo_id, *extra])
    assert result.exit_code == 0 and result.stderr == "", (result.stdout, result.stderr)
    return result


async def test_an_agents_summary_and_error_cannot_add_lines_to_todo_show(
    db: Database, database_url: str
) -> None:
    owner = await tenancy.resolve_owner(db, human=(await tenancy.add_human(db, "alice"))[0].handle)
    bot, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner)
    todo = await add_todo(db, bot, title="fix the build")
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(max_attempts=2))
    # What the agent sends over MCP (`fail`, then `complete`), as the core stores it.
    await todos.claim(db, bot, todo.id)
    await todos.fail(db, bot, todo.id, error=f"flaky\n{FORGED_HISTORY}", summary="tried once")
    async with db.write() as s:  # its retry is due now
        await s.execute(update(Todo).where(Todo.id == todo.id).values(state="pending", next_retry_at=None))
    await todos.claim(db, bot, todo.id)
    await todos.complete(db, bot, todo.id, summary=f"fixed it\n{FORGED_REPLY}")

    text = (await _show(database_url, todo.id)).stdout.split("\nresult:")[0]
    lines = text.splitlines()
    assert not any(line.startswith(("reply ", "2026-")) for line in lines), text
    assert [line.split(":")[0] for line in lines if line.startswith("attempt ")] == ["attempt 1", "attempt 2"]
    assert f"fixed it\\x0a{FORGED_REPLY}" in text and f"flaky\\x0a{FORGED_HISTORY}" in text

    attempts = json.loads((await _show(database_url, todo.id, "--json")).stdout)["todo"]["attempts"]
    assert {a["summary"] for a in attempts} == {"tried once", f"fixed it\n{FORGED_REPLY}"}
