"""Cursor pages on every list: 2,500 todos walked both ways over the API and the CLI without a gap or
a repeat (timestamps shared by many todos, so the id breaks the ties), the short lists held in
memory, filters on a walk, and bad cursors refused."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner, Result

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.cli import main
from switchboard.db import Database, utcnow
from switchboard.models import Endpoint
from switchboard.paging import page_of
from switchboard.testing import TEST_ENCRYPTION_KEY
from switchboard.todos import new_todo_row

TOTAL = 2500


async def _mint(db: Database, endpoint: Endpoint, n: int) -> tuple[list[str], list[str]]:
    """``n`` todos, and the dead letters among them (every fifth), newest first as listings order
    them; seven share each timestamp."""
    start = utcnow() - timedelta(days=1)
    rows = []
    for i in range(n):
        todo = new_todo_row(
            endpoint_id=endpoint.id,
            queue="default",
            source="manual",
            kind="manual",
            title=f"todo {i}",
            payload={"i": i},
            now=start + timedelta(seconds=i // 7),
        )
        if i % 5 == 0:
            todo.state, todo.dead_letter, todo.dead_reason = "failed", True, "attempts_exhausted"
        rows.append(todo)
    async with db.write() as s:
        s.add_all(rows)
    ordered = sorted(rows, key=lambda t: (t.created_at, t.id), reverse=True)
    return [t.id for t in ordered], [t.id for t in ordered if t.dead_letter]


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_the_api_walks_2500_todos_both_ways_without_gaps_or_repeats(
    db: Database, http: aiohttp.ClientSession, base_url: str
) -> None:
    _, token = await tenancy.add_human(db, "alice")
    _, eve_token = await tenancy.add_human(db, "eve")
    owner = await tenancy.resolve_owner(db, human="alice")
    endpoint, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner)
    expected, expected_dead = await _mint(db, endpoint, TOTAL)

    async def get(query: str, as_token: str = token) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {as_token}"}
        async with http.get(f"{base_url}{PREFIX}/todos?{query}", headers=headers) as r:
            return r.status, await r.json()

    # Older, from the newest page.
    seen: list[str] = []
    pages: list[dict[str, Any]] = []
    query = "limit=300"
    while True:
        status, page = await get(query)
        assert status == 200
        pages.append(page)
        seen += [t["id"] for t in page["todos"]]
        if page["next_before"] is None:
            break
        assert page["next_before"] == page["todos"][-1]["id"]
        query = f"limit=300&before={page['next_before']}"
    assert seen == expected and len(set(seen)) == TOTAL
    assert pages[0]["next_after"] is None  # the newest page: nothing newer
    assert all(p["next_after"] == p["todos"][0]["id"] for p in pages[1:])

    # Newer, from the oldest page back up.
    oldest = pages[-1]
    climbed: list[list[str]] = [[t["id"] for t in oldest["todos"]]]
    cursor = oldest["next_after"]
    while cursor is not None:
        status, page = await get(f"limit=450&after={cursor}")
        assert status == 200 and page["next_before"] == page["todos"][-1]["id"]
        climbed.append([t["id"] for t in page["todos"]])
        cursor = page["next_after"]
    flat = [todo_id for chunk in reversed(climbed) for todo_id in chunk]
    assert flat == expected

    # A filter holds along the walk.
    dead: list[str] = []
    query = "state=dead&limit=101"
    while query:
        _, page = await get(query)
        dead += [t["id"] for t in page["todos"]]
        assert all(t["dead_reason"] == "attempts_exhausted" for t in page["todos"])
        query = f"state=dead&limit=101&before={page['next_before']}" if page["next_before"] else ""
    assert dead == expected_dead and len(dead) == TOTAL // 5

    # Bad cursors.
    for bad in ("before=garbage", "after=td_x", f"before={expected[5]}&after={expected[9]}", "limit=1001"):
        status, body = await get(bad)
        assert (status, body["error"]) == (400, "invalid_argument"), bad
    # Another human's todo is no cursor of theirs: 404, like one that does not exist.
    status, body = await get(f"before={expected[3]}", eve_token)
    assert (status, body["error"]) == (404, "not_found")


async def test_the_cli_walks_2500_todos_both_ways(db: Database, database_url: str) -> None:
    owner = await tenancy.add_human(db, "alice")
    endpoint, _ = await tenancy.vend_endpoint(
        db, name="bot", owner=await tenancy.resolve_owner(db, human=owner[0].handle)
    )
    expected, _ = await _mint(db, endpoint, TOTAL)
    runner = CliRunner(
        env={
            "SWITCHBOARD_DATABASE_URL": database_url,
            "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
        }
    )

    async def cli(*args: str) -> Result:
        return await asyncio.to_thread(runner.invoke, main, list(args), catch_exceptions=False)

    async def page(*args: str) -> dict[str, Any]:
        result = await cli("todo", "list", "--json", "--limit", "1000", *args)
        assert result.exit_code == 0, result.stderr
        return dict(json.loads(result.stdout))

    seen, cursor = [], None
    while True:
        got = await page(*(("--before", cursor) if cursor else ()))
        seen += [t["id"] for t in got["todos"]]
        cursor = got["next_before"]
        if cursor is None:
            break
    assert seen == expected
    back: list[list[str]] = []
    cursor = expected[-1]
    while cursor is not None:
        got = await page("--after", cursor)
        back.append([t["id"] for t in got["todos"]])
        cursor = got["next_after"]
    assert [i for chunk in reversed(back) for i in chunk] == expected[:-1]

    text = await cli("todo", "list", "--limit", "2")
    assert text.exit_code == 0 and f"older: --before {expected[1]}" in text.stdout
    dead = await cli("todo", "list", "--state", "dead", "--limit", "3", "--json")
    assert dead.exit_code == 0 and all(t["dead_letter"] for t in json.loads(dead.stdout)["todos"])
    both = await cli("todo", "list", "--before", expected[3], "--after", expected[9])
    assert both.exit_code == 1 and both.stderr.startswith("error: invalid_argument")


def test_a_short_list_pages_both_ways_in_time_order() -> None:
    ids = [f"ep_{n:026d}" for n in range(7)]
    walk: Callable[..., Any] = lambda **kw: page_of(ids, lambda i: i, limit=3, **kw)  # noqa: E731
    first = walk()
    assert (first.rows, first.next_before, first.next_after) == (ids[:3], None, ids[2])
    middle = walk(after=first.next_after)
    assert (middle.rows, middle.next_before, middle.next_after) == (ids[3:6], ids[3], ids[5])
    last = walk(after=middle.next_after)
    assert (last.rows, last.next_before, last.next_after) == (ids[6:], ids[6], None)
    assert walk(before=last.next_before).rows == ids[3:6]
    assert walk(before=middle.next_before).rows == ids[:3]
    assert walk(before=middle.next_before).next_before is None
    # Newest first (as todos are listed): the first page is the newest.
    newest = page_of(ids, lambda i: i, limit=3, newest_first=True)
    assert (newest.rows, newest.next_before, newest.next_after) == (ids[6:3:-1], ids[4], None)
    # Any id is a point in time, even one not in the list (or of another type).
    assert page_of(ids, lambda i: i, before="td_" + "0" * 23 + "004", limit=10).rows == ids[:4]


async def test_every_api_list_takes_cursors(db: Database, http: aiohttp.ClientSession, base_url: str) -> None:
    _, token = await tenancy.add_human(db, "alice")
    headers = {"Authorization": f"Bearer {token}"}
    owner = await tenancy.resolve_owner(db, human="alice")
    slugs = [(await tenancy.vend_endpoint(db, name=f"bot {n}", owner=owner))[0].slug for n in range(7)]

    async def get(path: str) -> dict[str, Any]:
        async with http.get(f"{base_url}{PREFIX}{path}", headers=headers) as r:
            assert r.status == 200, await r.text()
            return dict(await r.json())

    first = await get("/endpoints?limit=3")
    assert [e["slug"] for e in first["endpoints"]] == slugs[:3] and first["next_before"] is None
    second = await get(f"/endpoints?limit=3&after={first['next_after']}")
    third = await get(f"/endpoints?limit=3&after={second['next_after']}")
    assert [e["slug"] for e in second["endpoints"] + third["endpoints"]] == slugs[3:]
    assert third["next_after"] is None
    back = await get(f"/endpoints?limit=3&before={second['next_before']}")
    assert [e["slug"] for e in back["endpoints"]] == slugs[:3]
    for path in ("/teams", "/webhooks", "/connections", "/routes"):
        listed = await get(f"{path}?limit=5")
        assert listed["next_before"] is None and listed["next_after"] is None, path
    async with http.get(f"{base_url}{PREFIX}/teams?after=nope", headers=headers) as r:
        assert r.status == 400 and (await r.json())["error"] == "invalid_argument"
