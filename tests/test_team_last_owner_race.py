"""Two owners leaving (or demoting each other) at the same moment must not leave a team without an
owner: nobody could then manage or delete it. SQLite serialises every write, so the race is
PostgreSQL's, where each transaction's check used to see the other's uncommitted change as not
yet made."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import delete, select, update

from switchboard import tenancy
from switchboard.errors import SwitchboardError
from switchboard.models import Human, Membership, Team


async def _two_owners(db: Any) -> tuple[str, str]:
    await tenancy.add_human(db, "ada")
    await tenancy.add_human(db, "bob")
    await tenancy.add_team(db, "plat", "ada")
    await tenancy.set_member(db, "plat", "bob", "owner")
    async with db.read() as s:
        team_id = await s.scalar(select(Team.id).where(Team.slug == "plat"))
        bob_id = await s.scalar(select(Human.id).where(Human.handle == "bob"))
    return str(team_id), str(bob_id)


async def _owners(db: Any, team_id: str) -> list[str]:
    async with db.read() as s:
        rows = await s.scalars(
            select(Membership.human_id).where(Membership.team_id == team_id, Membership.role == "owner")
        )
        return list(rows.all())


@pytest.mark.parametrize("bob_goes", ["leaves", "is demoted"])
@pytest.mark.parametrize("ada", ["leaves", "is demoted"])
async def test_the_last_owner_cannot_go_while_another_owner_is_going(
    services: Any, bob_goes: str, ada: str
) -> None:
    db = services.db
    if db.is_sqlite:
        pytest.skip("SQLite serialises every write: there is no second transaction to race")
    team_id, bob_id = await _two_owners(db)
    changed, go_on = asyncio.Event(), asyncio.Event()

    async def bob() -> None:
        # Bob's change has passed its own check (Ada is another owner) and is made, not committed.
        async with db.write() as s:
            mine = (Membership.team_id == team_id) & (Membership.human_id == bob_id)
            if bob_goes == "leaves":
                await s.execute(delete(Membership).where(mine))
            else:
                await s.execute(update(Membership).where(mine).values(role="member"))
            changed.set()
            await go_on.wait()

    first = asyncio.create_task(bob())
    await changed.wait()
    if ada == "leaves":
        second = asyncio.create_task(tenancy.remove_member(db, "plat", "ada"))
    else:
        second = asyncio.create_task(tenancy.set_member(db, "plat", "ada", "member"))
    await asyncio.sleep(0.3)  # Ada's check runs now, while Bob's change is uncommitted
    go_on.set()
    await first
    with pytest.raises(SwitchboardError) as refused:
        await second
    assert refused.value.code == "conflict"
    assert await _owners(db, team_id), "the team was left without an owner"
