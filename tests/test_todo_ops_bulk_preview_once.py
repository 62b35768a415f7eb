"""A bulk requeue's preview (``dry_run``, the board's "Requeue all N…" and its confirmation page)
counted every dead letter that matched, but two dead letters about one ``once`` subject never both
go back: the requeue takes the oldest, and the other waits while that one is open. The preview
said 2 and the requeue did 1."""

from __future__ import annotations

from sqlalchemy import update

from switchboard import todos
from switchboard.db import Database
from switchboard.models import Endpoint, Todo
from switchboard.services import Services
from switchboard.testing import add_todo, vend
from switchboard.todos import operator as todo_ops
from switchboard.todos.queries import TodoFilter


async def _dead(db: Database, endpoint: Endpoint, title: str, once_key: str | None) -> str:
    todo = await add_todo(db, endpoint, title=title)
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(max_attempts=1))
    await todos.claim(db, endpoint, todo.id)
    await todos.fail(db, endpoint, todo.id, error="boom")
    if once_key is not None:
        async with db.write() as s:
            await s.execute(update(Todo).where(Todo.id == todo.id).values(once_key=once_key))
    return todo.id


async def test_bulk_requeue_preview_counts_what_the_requeue_does(services: Services) -> None:
    db = services.db
    endpoint, _ = await vend(db)
    first = await _dead(db, endpoint, "issue #1", "gh:o/r#1")
    await _dead(db, endpoint, "issue #1 again", "gh:o/r#1")
    plain = await _dead(db, endpoint, "plain", None)
    actor = todo_ops.Actor("cli:test")
    dead = TodoFilter.of(state="dead")

    preview = await todo_ops.requeue_matching(services, dead, scopes=None, actor=actor, dry_run=True)
    done = await todo_ops.requeue_matching(services, dead, scopes=None, actor=actor)
    assert sorted(done["todo_ids"]) == sorted([first, plain])
    assert preview["matched"] == done["requeued"] == 2, (preview, done)
    assert done["more"] is False
