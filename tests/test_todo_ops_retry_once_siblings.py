"""The retry scheduler and two failed ``once`` todos about one subject.

``uq_todos_once`` holds one *pending or claimed* todo per subject; a failed todo waiting for its
retry is in neither state, so ingest makes a second todo about the subject meanwhile, and that one
may fail too. Both then wait for their retries with the subject free, so both passed the
scheduler's ``subject_free`` filter, went back to pending in the same batch, broke the index and
rolled the whole batch back: on every pass, so no due retry of any endpoint was ever made again."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from switchboard import todos
from switchboard.db import Database, utcnow
from switchboard.models import Endpoint, Todo
from switchboard.testing import add_todo, vend


async def _failed(db: Database, endpoint: Endpoint, title: str, once_key: str | None) -> str:
    todo = await add_todo(db, endpoint, title=title)
    claimed = await todos.claim(db, endpoint, todo.id)
    await todos.fail(db, endpoint, todo.id, error="flaky", lease_token=claimed.get("lease_token"))
    if once_key is not None:
        async with db.write() as s:
            await s.execute(update(Todo).where(Todo.id == todo.id).values(once_key=once_key))
    return todo.id


async def test_two_failed_todos_of_one_once_subject_do_not_stop_every_retry(db: Database) -> None:
    endpoint, _ = await vend(db)
    first = await _failed(db, endpoint, "issue #1, first", "gh:o/r#1")
    second = await _failed(db, endpoint, "issue #1, again", "gh:o/r#1")
    plain = await _failed(db, endpoint, "another subject", None)

    later = utcnow() + timedelta(hours=1)
    requeued = await todos.schedule_retries(db, later)
    # The unrelated retry is made, and one of the subject's two (the oldest); the other waits.
    assert plain in requeued
    assert first in requeued and second not in requeued, requeued
    async with db.read() as s:
        states = dict((await s.execute(select(Todo.id, Todo.state))).all())
    assert states == {first: "pending", second: "failed", plain: "pending"}

    # The waiting one goes back once the open todo about its subject has ended.
    claimed = await todos.claim(db, endpoint, first)
    await todos.complete(db, endpoint, first, lease_token=claimed.get("lease_token"))
    assert await todos.schedule_retries(db, later) == [second]
