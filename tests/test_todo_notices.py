"""Todos available, told to the other processes (``switchboard.todo_notices``, PostgreSQL
``NOTIFY``): ingest's group commit tells them in its own statement, exactly the todos it stored
that an agent may take, and the doorbell's separate publication is then not asked for them; every
other maker of todos still asks it."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest
from fixtures.ingest_kit import fixture
from sqlalchemy import select
from sqlalchemy.engine import make_url

from switchboard import todo_notices
from switchboard.models import Todo
from switchboard.services import Services
from switchboard.testing import add_todo, engine_name, github_headers, make_webhook, post, vend

pytestmark = pytest.mark.skipif(engine_name() != "postgresql", reason="NOTIFY is PostgreSQL's")


async def _listening(services: Services) -> tuple[asyncpg.Connection, list[str]]:
    dsn = make_url(services.settings.database_url).set(drivername="postgresql")
    connection = await asyncpg.connect(dsn.render_as_string(hide_password=False))
    heard: list[str] = []
    await connection.add_listener(
        todo_notices.CHANNEL, lambda _c, _p, _ch, payload: heard.extend(payload.split(","))
    )
    return connection, heard


async def test_the_group_commit_tells_the_other_processes_of_exactly_the_todos_it_stored(
    services: Services, base_url: str
) -> None:
    # Deliveries from a trusted sender become todos; one from anybody else is held in quarantine,
    # which no agent takes and nobody is told of.
    token, secret, _ = await make_webhook(services, "github", trust={"logins": ["octocat"]})
    assert secret is not None
    template = fixture("github/issues/opened.payload.json")
    asked: list[list[str]] = []

    async def publisher(ids: list[str]) -> None:
        asked.append(ids)

    services.todo_publishers.append(publisher)

    def delivery(n: int, login: str) -> tuple[bytes, dict[str, str]]:
        body = json.dumps(
            {
                **template,
                "sender": {**template["sender"], "login": login},
                "issue": {**template["issue"], "number": n},
            }
        ).encode()
        return body, github_headers(secret, body, "issues", f"notice-{n}")

    connection, heard = await _listening(services)
    try:
        sent = [delivery(n, "octocat") for n in range(6)] + [delivery(100, "mallory")]
        answers = await asyncio.gather(*(post(base_url, token, body, headers) for body, headers in sent))
        assert [status for status, _, _ in answers] == [202] * 7
        # A redelivery of a stored one: a duplicate, no new todo, nothing told.
        assert (await post(base_url, token, *sent[0]))[1]["created"] == 0
        async with services.db.read() as s:
            todos = (await s.execute(select(Todo.id, Todo.state))).all()
        available = {todo_id for todo_id, state in todos if state != "held"}
        assert len(available) == 6 and len(todos) == 7
        for _ in range(100):
            if len(heard) >= len(available):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # anything more would have arrived by now
    finally:
        await connection.close()
        services.todo_publishers.remove(publisher)
    assert sorted(heard) == sorted(available)  # each once, the held one never
    assert asked == []  # no second publication of them


async def test_every_other_maker_of_todos_still_asks_for_the_publication(services: Services) -> None:
    """``todos_created`` without ``published`` (a requeue, an operator's action, a release from
    quarantine, a todo made through the API) tells the publishers, which on PostgreSQL is the
    doorbell's ``NOTIFY``; with it, only the listeners."""
    asked: list[list[str]] = []

    async def publisher(ids: list[str]) -> None:
        asked.append(ids)

    services.todo_publishers.append(publisher)
    try:
        endpoint, _ = await vend(services.db)
        todo = await add_todo(services.db, endpoint, title="t")
        await services.todos_created([todo.id])
        await services.todos_created([todo.id], published=True)
    finally:
        services.todo_publishers.remove(publisher)
    assert asked == [[todo.id]]
