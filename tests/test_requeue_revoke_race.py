"""A dead letter requeued, or a todo pushed, while its endpoint is being revoked must not become a
pending todo of a revoked endpoint, which nothing may claim. PostgreSQL only: SQLite's writer holds
the whole database, so there the revocation and the other write cannot overlap (and the held
transaction below would keep the second write waiting for good)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select, update

from switchboard import tenancy, todos
from switchboard.db import Database
from switchboard.errors import SwitchboardError
from switchboard.models import Endpoint, Todo
from switchboard.services import Services
from switchboard.testing import add_todo, vend
from switchboard.todos import operator
from switchboard.todos.queries import TodoFilter


class _Revoking:
    def __init__(
        self, holder: asyncio.Task[None], revoke: asyncio.Task[Endpoint], go_on: asyncio.Event
    ) -> None:
        self.holder, self.revoke, self.go_on = holder, revoke, go_on

    async def finish(self) -> None:
        """Let the revocation go on and commit."""
        self.go_on.set()
        await self.holder
        await self.revoke


async def _revocation_in_flight(db: Database, endpoint: Endpoint, other: Todo) -> _Revoking:
    """``endpoint``'s revocation, started and kept from committing: ``other`` (one of its open
    todos) is locked by a transaction of its own, so the revocation has changed the endpoint's row
    and waits to dead-letter its todos until ``finish``."""
    held, go_on = asyncio.Event(), asyncio.Event()

    async def hold_a_todo() -> None:
        async with db.write() as s:
            await s.execute(select(Todo.id).where(Todo.id == other.id).with_for_update())
            held.set()
            await go_on.wait()

    holder = asyncio.create_task(hold_a_todo())
    await held.wait()
    revoke = asyncio.create_task(tenancy.revoke_endpoint(db, endpoint.slug))
    await asyncio.sleep(0.3)  # the revocation is now waiting on ``other``
    return _Revoking(holder, revoke, go_on)


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
    revoking = await _revocation_in_flight(db, endpoint, other)
    # The requeue waits for the revocation and is then refused: nothing could claim the todo again.
    actor = operator.Actor("cli:test", None)
    if how == "alone":
        requeue = asyncio.create_task(operator.requeue(services, dead.id, scopes=None, actor=actor))
    else:
        dead_letters = TodoFilter(endpoint=endpoint.slug, state="dead")
        requeue = asyncio.create_task(
            operator.requeue_matching(services, dead_letters, scopes=None, actor=actor)
        )
    await asyncio.sleep(0.3)  # the change under test runs now, and waits or not
    await revoking.finish()
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
    revoking = await _revocation_in_flight(db, endpoint, other)
    pushed = asyncio.create_task(todos.push(db, endpoint_slug=endpoint.slug, title="pushed now"))
    await asyncio.sleep(0.3)  # the change under test runs now, and waits or not
    await revoking.finish()
    with pytest.raises(SwitchboardError) as refused:
        await pushed
    assert refused.value.code == "conflict"
    async with db.read() as s:
        pending = (
            await s.scalars(select(Todo.id).where(Todo.endpoint_id == endpoint.id, Todo.state == "pending"))
        ).all()
    assert pending == []
