"""Revoking an endpoint dead-letters its open todos; a claimed one's open attempt is closed with
them (outcome ``revoked``), not left open forever with no outcome and no end."""

from __future__ import annotations

from sqlalchemy import select

from switchboard import tenancy, todos
from switchboard.models import Attempt
from switchboard.services import Services
from switchboard.testing import add_todo, vend


async def test_revoking_an_endpoint_closes_the_attempt_of_its_claimed_todo(services: Services) -> None:
    db = services.db
    endpoint, _ = await vend(db)
    todo = await add_todo(db, endpoint, title="in hand")
    assert await todos.claim_next(db, endpoint) is not None
    todo_id = todo.id

    await tenancy.revoke_endpoint(db, endpoint.slug)

    async with db.read() as s:
        (attempt,) = (await s.scalars(select(Attempt).where(Attempt.todo_id == todo_id))).all()
    assert attempt.outcome == "revoked"
    assert attempt.ended_at is not None
