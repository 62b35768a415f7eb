"""A team admin may not change or remove an owner, also when the member they act on is made an
owner at the same moment.

The API (and the web UI) read the member's role, checked it against the admin's, and then changed
it in another transaction. On PostgreSQL an owner's promotion of that member, uncommitted while the
admin's check ran, was then overwritten (or the new owner removed) by the admin's change: an admin
demoted or removed an owner. SQLite serialises every write, so the race is PostgreSQL's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select, update

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.models import Human, Membership, Team


@pytest.mark.parametrize("admin_does", ["re-roles", "removes"])
async def test_an_admin_cannot_undo_an_owner_made_while_their_request_ran(
    services: Any, base_url: str, admin_does: str
) -> None:
    db = services.db
    if db.is_sqlite:
        pytest.skip("SQLite serialises every write: there is no second transaction to race")
    for handle in ("ada", "bob"):
        await tenancy.add_human(db, handle)
    _, carol_token = await tenancy.add_human(db, "carol")
    await tenancy.add_team(db, "plat", "ada")
    await tenancy.set_member(db, "plat", "bob", "member")
    await tenancy.set_member(db, "plat", "carol", "admin")
    async with db.read() as s:
        team_id = await s.scalar(select(Team.id).where(Team.slug == "plat"))
        bob_id = await s.scalar(select(Human.id).where(Human.handle == "bob"))
    bobs = (Membership.team_id == team_id) & (Membership.human_id == bob_id)
    promoted, go_on = asyncio.Event(), asyncio.Event()

    async def ada_makes_bob_owner() -> None:
        # Ada's promotion of Bob, made and not yet committed (as ``owners.set_member`` makes it).
        async with db.write() as s:
            await s.execute(update(Membership).where(bobs).values(role="owner"))
            promoted.set()
            await go_on.wait()

    async def carol() -> tuple[int, Any]:
        method, path = "PUT", f"{PREFIX}/teams/plat/members/bob"
        body: dict[str, str] | None = {"role": "admin"}
        if admin_does == "removes":
            method, body = "DELETE", None
        async with aiohttp.ClientSession() as http:
            async with http.request(
                method, base_url + path, json=body, headers={"Authorization": f"Bearer {carol_token}"}
            ) as r:
                return r.status, await r.json()

    first = asyncio.create_task(ada_makes_bob_owner())
    await promoted.wait()
    second = asyncio.create_task(carol())
    await asyncio.sleep(0.3)  # Carol's check runs now, while Bob's promotion is uncommitted
    go_on.set()
    await first
    status, answer = await second
    assert status == 403 and answer.get("error") == "forbidden", (status, answer)
    async with db.read() as s:
        role = await s.scalar(select(Membership.role).where(bobs))
    assert role == "owner", "an admin changed or removed an owner"
