"""Requeueing a ``once`` todo that is not failed (pending or claimed: it is itself the open todo about
its subject) was refused for the wrong reason: "another todo about its subject is open; it can be
requeued once that one has ended", though there was no other todo and ending it would not make it
requeueable. It is refused for its state, as any other todo is."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from sqlalchemy import update

from switchboard import tenancy, todos
from switchboard.api import PREFIX
from switchboard.db import Database
from switchboard.models import Todo
from switchboard.testing import add_todo


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _post(http: aiohttp.ClientSession, base_url: str, token: str, path: str) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with http.post(f"{base_url}{PREFIX}{path}", data=b"{}", headers=headers) as r:
        return r.status, json.loads(await r.text())


@pytest.mark.parametrize("state", ["pending", "claimed"])
async def test_requeue_of_an_open_once_todo_names_its_state(
    db: Database, http: aiohttp.ClientSession, base_url: str, state: str
) -> None:
    _, token = await tenancy.add_human(db, "ada")
    owner = await tenancy.resolve_owner(db, human="ada")
    endpoint, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner)
    todo = await add_todo(db, endpoint, title="issue #1")
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(once_key="gh:o/r#1"))
    if state == "claimed":
        await todos.claim(db, endpoint, todo.id)

    status, answer = await _post(http, base_url, token, f"/todos/{todo.id}/requeue")
    assert status == 409 and answer["error"] == "conflict", answer
    assert answer["message"] == (
        f"todo {todo.id} is {state}: only failed todos and dead letters are requeued"
    ), answer
