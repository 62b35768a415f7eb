"""Removing a human who owns a team with one other owner, while that other owner leaves or is
demoted, must not leave the team without an owner (nobody could then manage or delete it).

``human remove`` refuses the last owner of a team, but its check was a plain read: on PostgreSQL it
saw the other owner's uncommitted leave as not made, passed, and then removed the human's
membership once the leave had committed. SQLite serialises every write, so the race is
PostgreSQL's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import delete, select, update

from switchboard import humans, tenancy
from switchboard.errors import SwitchboardError
from switchboard.models import Human, Membership, Team


@pytest.mark.parametrize("bob_goes", ["leaves", "is demoted"])
async def test_a_human_is_not_removed_as_a_team_loses_its_other_owner(services: Any, bob_goes: str) -> None:
    db = services.db
    if db.is_sqlite:
        pytest.skip("SQLite serialises every write: there is no second transaction to race")
    await tenancy.add_human(db, "ada")
    await tenancy.add_human(db, "bob")
    await tenancy.add_team(db, "plat", "ada")
    await tenancy.set_member(db, "plat", "bob", "owner")
    async with db.read() as s:
        team_id = await s.scalar(select(Team.id).where(Team.slug == "plat"))
        bob_id = await s.scalar(select(Human.id).where(Human.handle == "bob"))
    changed, go_on = asyncio.Event(), asyncio.Event()

    async def bob() -> None:
        # Bob's leave (or demotion) as ``owners`` makes it: the team's owner rows locked, his
        # own checked against Ada's, his change made and not yet committed.
        async with db.write() as s:
            await s.execute(
                select(Membership.human_id)
                .where(Membership.team_id == team_id, Membership.role == "owner")
                .order_by(Membership.human_id)
                .with_for_update()
            )
            mine = (Membership.team_id == team_id) & (Membership.human_id == bob_id)
            if bob_goes == "leaves":
                await s.execute(delete(Membership).where(mine))
            else:
                await s.execute(update(Membership).where(mine).values(role="member"))
            changed.set()
            await go_on.wait()

    first = asyncio.create_task(bob())
    await changed.wait()
    removal = asyncio.create_task(humans.remove_human(db, "ada"))
    await asyncio.sleep(0.3)  # the removal's check runs now, while Bob's change is uncommitted
    go_on.set()
    await first
    with pytest.raises(SwitchboardError) as refused:
        await removal
    assert refused.value.code == "conflict"
    assert "the last owner of team plat" in refused.value.message
    async with db.read() as s:
        owners = list(
            (
                await s.scalars(
                    select(Membership.human_id).where(
                        Membership.team_id == team_id, Membership.role == "owner"
                    )
                )
            ).all()
        )
    assert owners, "the team was left without an owner"
