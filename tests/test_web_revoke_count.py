"""The endpoint's revoke confirmation page counts the todos the revocation will dead-letter: its open
ones, not the dead letters it already has (revoking leaves those as they are)."""

from __future__ import annotations

import re

import aiohttp
from sqlalchemy import select, update

from switchboard import tenancy, todos
from switchboard.models import Todo
from switchboard.services import Services
from switchboard.tenancy import Owner
from switchboard.testing import ui_login
from switchboard.todos import lifecycle


async def test_the_revoke_page_counts_only_the_todos_revoking_dead_letters(
    services: Services, base_url: str
) -> None:
    db = services.db
    ada, token = await tenancy.add_human(db, "ada")
    endpoint, _ = await tenancy.vend_endpoint(db, name="bot", owner=Owner(human_id=ada.id))
    # Two todos the agent failed for good (dead letters), one it is working on, one waiting.
    dead = [await todos.push(db, endpoint_slug="bot", title=f"dead {n}") for n in range(2)]
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id.in_([t.id for t in dead])).values(max_attempts=1))
    for todo in dead:
        claimed = await lifecycle.claim(db, endpoint, todo.id)
        await lifecycle.fail(db, endpoint, todo.id, error="boom", lease_token=claimed.get("lease_token"))
    working = await todos.push(db, endpoint_slug="bot", title="working")
    await lifecycle.claim(db, endpoint, working.id)
    await todos.push(db, endpoint_slug="bot", title="waiting")

    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await ui_login(http, base_url, token)
        async with http.get(f"{base_url}/ui/endpoints/bot/revoke") as resp:
            assert resp.status == 200
            page = await resp.text()
        said = re.search(r"Its <strong>([\d,]+)</strong> open todo", page)
        assert said is not None, page
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        async with http.post(
            f"{base_url}/ui/endpoints/bot/revoke",
            data={"csrf": csrf.group(1), "confirm": "yes"},
            allow_redirects=False,
        ) as resp:
            assert resp.status == 303
    async with db.read() as s:
        revoked = (await s.scalars(select(Todo.title).where(Todo.dead_reason == "endpoint_revoked"))).all()
    assert sorted(revoked) == ["waiting", "working"]
    # The page said what the revocation then did: two open todos, not the dead letters too.
    assert said.group(1) == str(len(revoked))
