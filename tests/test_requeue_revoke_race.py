"""A dead letter requeued while its endpoint is being revoked must not become a pending todo of a
revoked endpoint, which nothing may claim (PostgreSQL: SQLite's writer holds the database), whether
it is requeued alone or by a bulk requeue."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select, update

from switchboard import tenancy, todos
from switchboard.errors import SwitchboardError
from switchboard.models import Endpoint, Todo
from switchboard.services import Services
from switchboard.testing import add_todo, vend
from switchboard.todos import operator
from switchboard.todos.queries import TodoFilter


@pytest.mark.parametrize("how", ["alone", "in bulk"])
async def test_a_dead_letter_requeued_during_a_revocation_stays_dead(services: Services, how: str) -> None:
    db = services.db
    if db.is_sqlite:
        pytest.skip("SQLite serialises every write")
    endpoint, _ = await vend(db)
    dead = await add_todo(db, endpoint, title="dead letter")
    other = await add_todo(db, endpoint, title="pending")
    async with db.write() as s:
        await s.execute(
            update(Todo)
            .where(Todo.id == dead.id)
            .values(state="failed", dead_letter=True, dead_reason="attempts_exhausted")
        )
    held, go_on = asyncio.Event(), asyncio.Event()

    async def hold_a_todo() -> None:
        # Keeps the revocation's dead-lettering waiting, its endpoint change uncommitted.
        async with db.write() as s:
            await s.execute(select(Todo.id).where(Todo.id == other.id).with_for_update())
            held.set()
            await go_on.wait()

    holder = asyncio.create_task(hold_a_todo())
    await held.wait()
    revoke = asyncio.create_task(tenancy.revoke_endpoint(db, endpoint.slug))
    await asyncio.sleep(0.3)
    # The requeue waits for the revocation and is then refused: nothing could claim the todo again.
    actor = operator.Actor("cli:test", None)
    if how == "alone":
        requeue = asyncio.create_task(operator.requeue(services, dead.id, scopes=None, actor=actor))
    else:
        dead_letters = TodoFilter(endpoint=endpoint.slug, state="dead")
        requeue = asyncio.create_task(
            operator.requeue_matching(services, dead_letters, scopes=None, actor=actor)
        )
    await asyncio.sleep(0.3)
    go_on.set()
    await holder
    await revoke
    if how == "alone":
        with pytest.raises(SwitchboardError) as refused:
            await requeue
        assert refused.value.code == "conflict" and "revoked" in refused.value.message
    else:
        assert (await requeue)["requeued"] == 0
    async with db.read() as s:
        row = await s.get(Todo, dead.id)
        ep = await s.get(Endpoint, endpoint.id)
    assert ep is not None and ep.state == "revoked"
    assert row is not None and (row.state, row.dead_letter) == ("failed", True)


async def test_a_todo_pushed_during_a_revocation_is_refused(services: Services) -> None:
    db = services.db
    if db.is_sqlite:
        pytest.skip("SQLite serialises every write")
    endpoint, _ = await vend(db)
    other = await add_todo(db, endpoint, title="pending")
    held, go_on = asyncio.Event(), asyncio.Event()

    async def hold_a_todo() -> None:
        async with db.write() as s:
            await s.execute(select(Todo.id).where(Todo.id == other.id).with_for_update())
            held.set()
            await go_on.wait()

    holder = asyncio.create_task(hold_a_todo())
    await held.wait()
    revoke = asyncio.create_task(tenancy.revoke_endpoint(db, endpoint.slug))
    await asyncio.sleep(0.3)
    pushed = asyncio.create_task(todos.push(db, endpoint_slug=endpoint.slug, title="pushed now"))
    await asyncio.sleep(0.3)
    go_on.set()
    await holder
    await revoke
    with pytest.raises(SwitchboardError) as refused:
        await pushed
    assert refused.value.code == "conflict"
    async with db.read() as s:
        pending = (
            await s.scalars(select(Todo.id).where(Todo.endpoint_id == endpoint.id, Todo.state == "pending"))
        ).all()
    assert pending == []
