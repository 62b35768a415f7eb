"""A claim that commits while a revocation is running must not leave its attempt open.

Revoking dead-letters the endpoint's open todos and closes the attempt of each claimed one
(outcome ``revoked``). On PostgreSQL the revocation used to close the attempts first, with a
snapshot that could not see a claim still in flight; its dead-lettering then waited for that claim's
row lock, and dead-lettered the todo once the claim committed. The todo ended as a dead letter whose
attempt stayed open for ever (no outcome, no end: "still running" on the todo page and in the API).
SQLite serialises every write, so the race is PostgreSQL's.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select

from switchboard import tenancy, todos
from switchboard.db import utcnow
from switchboard.ids import new_id
from switchboard.models import Attempt, Todo
from switchboard.services import Services
from switchboard.testing import add_todo, vend


async def test_a_claim_committing_during_a_revocation_has_its_attempt_closed(services: Services) -> None:
    db = services.db
    if db.is_sqlite:
        pytest.skip("SQLite serialises every write: there is no second transaction to race")
    endpoint, _ = await vend(db)
    todo = await add_todo(db, endpoint, title="claimed as the endpoint is revoked")
    todo_id = todo.id
    hold, go_on = asyncio.Event(), asyncio.Event()

    async def stall_the_claim() -> None:
        # An uncommitted attempt numbered 1 for the todo: the real claim below locks and updates the
        # todo, then waits on the attempt's unique (todo_id, number) until this rolls back. That
        # holds a genuine claim mid-statement, the moment a revocation can meet it.
        with pytest.raises(RuntimeError):
            async with db.write() as s:
                now = utcnow()
                s.add(
                    Attempt(
                        id=new_id("at"),
                        todo_id=todo_id,
                        number=1,
                        endpoint_id=endpoint.id,
                        claimed_at=now,
                        lease_expires_at=now,
                        heartbeats=0,
                    )
                )
                await s.flush()
                hold.set()
                await go_on.wait()
                raise RuntimeError("roll back")

    stall = asyncio.create_task(stall_the_claim())
    await hold.wait()
    claim = asyncio.create_task(todos.claim_next(db, endpoint))
    await asyncio.sleep(0.3)  # the claim holds the todo and waits on the stalled attempt
    revoke = asyncio.create_task(tenancy.revoke_endpoint(db, endpoint.slug))
    await asyncio.sleep(0.3)  # the revocation runs now, while the claim is uncommitted
    go_on.set()
    await stall
    claimed = await claim
    await revoke
    assert claimed is not None and claimed["id"] == todo_id

    async with db.read() as s:
        row = await s.get(Todo, todo_id)
        attempts = list((await s.scalars(select(Attempt).where(Attempt.todo_id == todo_id))).all())
    assert row is not None and row.dead_letter and row.dead_reason == "endpoint_revoked"
    assert [(a.outcome, a.ended_at is not None) for a in attempts] == [("revoked", True)]
