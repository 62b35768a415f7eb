"""``finished_at`` says when a todo finished. A failed todo keeps the time of its failure while it
waits for its retry (the agent's reply window runs from it), but once the retry scheduler, the
lease reaper or a release puts it back on the queue it has not finished: the API, the CLI and the
board went on showing the old failure as its finish time on a pending or claimed todo, and a
dead letter whose last lease ran out kept an earlier failure's time (and that endpoint's reply
window) as if it had been failed just then. An operator's requeue already cleared it."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from switchboard import todos
from switchboard.db import Database, utcnow
from switchboard.models import Todo
from switchboard.services import Services
from switchboard.testing import add_todo, vend
from switchboard.todos import operator as todo_ops


async def test_a_retried_todo_is_not_finished(db: Database) -> None:
    endpoint, _ = await vend(db)
    todo = await add_todo(db, endpoint)
    await todos.claim(db, endpoint, todo.id)
    failed = await todos.fail(db, endpoint, todo.id, error="flaky")
    assert (await todos.get_todo(db, endpoint, todo.id))["finished_at"] is not None
    assert failed["state"] == "failed"

    # The retry is due: the todo is pending again, not finished.
    assert await todos.schedule_retries(db, utcnow() + timedelta(hours=1)) == [todo.id]
    shown = await todos.get_todo(db, endpoint, todo.id)
    assert shown["state"] == "pending" and shown["finished_at"] is None, shown

    # Claimed again and its lease runs out: pending again, still not finished.
    await todos.claim(db, endpoint, todo.id, lease_seconds=1)
    assert await todos.reap_leases(db, utcnow() + timedelta(minutes=5)) == [todo.id]
    shown = await todos.get_todo(db, endpoint, todo.id)
    assert shown["state"] == "pending" and shown["finished_at"] is None, shown


async def test_a_retried_claim_and_its_release_are_not_finished(services: Services) -> None:
    db = services.db
    endpoint, _ = await vend(db)
    todo = await add_todo(db, endpoint)
    await todos.claim(db, endpoint, todo.id)
    await todos.fail(db, endpoint, todo.id, error="flaky")
    await todos.schedule_retries(db, utcnow() + timedelta(hours=1))
    await todos.claim(db, endpoint, todo.id)
    [row] = (await todos.list_in_scopes(db, scopes=None)).rows
    assert row["state"] == "claimed" and row["finished_at"] is None, row

    released = await todo_ops.release(services, todo.id, scopes=None, actor=todo_ops.Actor("cli:test"))
    assert released["todo"]["state"] == "pending" and released["todo"]["finished_at"] is None, released


async def test_a_dead_letter_of_an_expired_last_lease_keeps_no_earlier_finish(db: Database) -> None:
    endpoint, _ = await vend(db)
    todo = await add_todo(db, endpoint)
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(max_attempts=2))
    await todos.claim(db, endpoint, todo.id)
    await todos.fail(db, endpoint, todo.id, error="flaky")
    await todos.schedule_retries(db, utcnow() + timedelta(hours=1))
    await todos.claim(db, endpoint, todo.id, lease_seconds=1)
    assert await todos.reap_leases(db, utcnow() + timedelta(minutes=5)) == []
    shown = await todos.get_todo(db, endpoint, todo.id)
    assert shown["dead_letter"] and shown["dead_reason"] == "lease_expired", shown
    # Nobody finished it: the earlier failure's time is not its finish (nor opens a reply window).
    assert shown["finished_at"] is None, shown
