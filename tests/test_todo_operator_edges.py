"""Operators' listings and actions at their edges, each of which once failed: the board's date at
the calendar's end (a 500), dead letters of a team endpoint a member only reads (a 404 for the whole
board), API times with an offset (a 500 at the calendar's edge on PostgreSQL, the wrong instants on
SQLite), and a bulk requeue that met a ``once`` todo whose subject was open (the whole batch
refused, every time)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta, timezone
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select, update

from switchboard import tenancy, todos
from switchboard.api import PREFIX
from switchboard.db import Database
from switchboard.models import Endpoint, Todo
from switchboard.testing import add_todo

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


class Browser:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))

    async def get(self, path: str) -> tuple[aiohttp.ClientResponse, str]:
        async with self.http.get(self.base_url + path, allow_redirects=False) as resp:
            return resp, await resp.text()

    async def login(self, token: str) -> None:
        _, text = await self.get("/ui/login")
        found = CSRF_RE.search(text)
        assert found is not None
        async with self.http.post(
            self.base_url + "/ui/login", data={"csrf": found.group(1), "token": token}, allow_redirects=False
        ) as resp:
            assert resp.status == 303


@pytest.fixture
async def browser(base_url: str) -> AsyncIterator[Browser]:
    b = Browser(base_url)
    yield b
    await b.http.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _call(
    http: aiohttp.ClientSession, base_url: str, token: str, method: str, path: str, body: Any = None
):
    headers = {"Authorization": f"Bearer {token}"}
    data = json.dumps(body).encode() if body is not None else None
    async with http.request(method, f"{base_url}{PREFIX}{path}", data=data, headers=headers) as r:
        text = await r.text()
        try:
            payload = json.loads(text)
        except ValueError:
            payload = text
        return r.status, payload


async def _dead(db: Database, endpoint: Endpoint, title: str = "dies") -> str:
    todo = await add_todo(db, endpoint, title=title)
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(max_attempts=1))
    await todos.claim(db, endpoint, todo.id)
    await todos.fail(db, endpoint, todo.id, error="boom")
    return todo.id


async def test_board_to_date_at_the_end_of_the_calendar_is_not_a_500(browser: Browser, db: Database) -> None:
    """``/ui?to=9999-12-31``: the day after it is past datetime.max (it was a 500)."""
    _, token = await tenancy.add_human(db, "ada")
    await browser.login(token)
    resp, _ = await browser.get("/ui?to=9999-12-31")
    assert resp.status < 500, resp.status
    resp, _ = await browser.get("/ui/todos/requeue?state=dead&to=9999-12-31")
    assert resp.status < 500, resp.status


async def test_board_dead_letters_of_a_team_endpoint_a_member_only_reads(
    browser: Browser, db: Database
) -> None:
    """A member who manages their own scope but only reads the team's lists the team endpoint's
    dead letters: the bulk-requeue preview runs the filter in the *managed* scopes, where the
    endpoint is ``not_found``, and the whole board page fails."""
    await tenancy.add_human(db, "ada")
    _, max_token = await tenancy.add_human(db, "max")
    await tenancy.add_team(db, "ops", "ada")
    await tenancy.set_member(db, "ops", "max", "member")
    ops, _ = await tenancy.vend_endpoint(
        db, name="ops bot", owner=await tenancy.resolve_owner(db, team="ops")
    )
    await _dead(db, ops, "Team dead letter")
    await browser.login(max_token)
    resp, page = await browser.get("/ui?endpoint=ops-bot")
    assert resp.status == 200 and "Team dead letter" in page  # control: the member sees it
    resp, page = await browser.get("/ui?state=dead&endpoint=ops-bot")
    assert resp.status == 200, (resp.status, page[:400])
    assert "Team dead letter" in page


async def test_api_since_with_an_offset_at_the_edge_of_the_calendar_is_a_400(
    db: Database, http: aiohttp.ClientSession, base_url: str
) -> None:
    """``since=0001-01-01T00:00:00+01:00`` parses, but is before datetime.min in UTC: the driver's
    conversion overflows (500 on PostgreSQL)."""
    _, token = await tenancy.add_human(db, "ada")
    for value in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        for name in ("since", "until"):
            status, payload = await _call(
                http, base_url, token, "GET", f"/todos?{name}={value.replace('+', '%2B')}"
            )
            assert status < 500, (name, value, status, payload)


async def test_api_since_with_a_non_utc_offset_filters_by_the_instant(
    db: Database, http: aiohttp.ClientSession, base_url: str
) -> None:
    """``since`` is an instant: one minute before a todo's creation, written in +05:00, must list it
    (SQLite compares the wall-clock digits, dropping the offset)."""
    _, token = await tenancy.add_human(db, "ada")
    owner = await tenancy.resolve_owner(db, human="ada")
    endpoint, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner)
    todo = await add_todo(db, endpoint, title="made now")
    since = (todo.created_at - timedelta(minutes=1)).astimezone(timezone(timedelta(hours=5)))
    until = (todo.created_at + timedelta(minutes=1)).astimezone(timezone(timedelta(hours=-5)))
    q = since.isoformat().replace("+", "%2B")
    status, payload = await _call(http, base_url, token, "GET", f"/todos?since={q}")
    assert status == 200 and [t["id"] for t in payload["todos"]] == [todo.id], payload
    q = until.isoformat().replace("+", "%2B")
    status, payload = await _call(http, base_url, token, "GET", f"/todos?until={q}")
    assert status == 200 and [t["id"] for t in payload["todos"]] == [todo.id], payload


async def test_bulk_requeue_is_not_blocked_by_one_once_todo_whose_subject_is_open(
    db: Database, http: aiohttp.ClientSession, base_url: str
) -> None:
    """A ``once`` dead letter whose subject has an open todo cannot go back to pending
    (``uq_todos_once``). The retry scheduler leaves such todos out; the bulk requeue does not, so
    the unique violation rolls back the whole batch: nothing is requeued, every time."""
    _, token = await tenancy.add_human(db, "ada")
    owner = await tenancy.resolve_owner(db, human="ada")
    endpoint, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner)
    blocked = await _dead(db, endpoint, "once, subject open")
    plain = await _dead(db, endpoint, "plain dead letter")
    open_one = await add_todo(db, endpoint, title="open about the same subject")
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id.in_([blocked, open_one.id])).values(once_key="gh:o/r#1"))
    status, payload = await _call(http, base_url, token, "POST", "/todos/requeue", {"state": "dead"})
    assert status == 200, (status, payload)
    assert plain in payload["todo_ids"], payload
    async with db.read() as s:
        assert (await s.scalar(select(Todo.state).where(Todo.id == plain))) == "pending"
