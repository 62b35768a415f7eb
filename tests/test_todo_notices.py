"""Todos available, told to the other processes (``switchboard.todo_notices``, PostgreSQL
``NOTIFY``): ingest's group commit tells them in its own statement, exactly the todos it stored
that an agent may take, and the doorbell's separate publication is then not asked for them; every
other maker of todos still asks it."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest
from aiohttp.test_utils import TestServer, make_mocked_request
from fixtures.ingest_kit import fixture
from sqlalchemy import select
from sqlalchemy.engine import make_url

from switchboard import ingest, todo_notices
from switchboard.db import utcnow
from switchboard.ids import token_hash
from switchboard.models import Todo
from switchboard.services import Services
from switchboard.testing import add_todo, engine_name, github_headers, make_webhook, post, vend

pytestmark = pytest.mark.skipif(engine_name() != "postgresql", reason="NOTIFY is PostgreSQL's")


async def _listening(services: Services) -> tuple[asyncpg.Connection, list[str]]:
    """A connection of its own listening on the channel, and the payloads it hears."""
    dsn = make_url(services.settings.database_url).set(drivername="postgresql")
    connection = await asyncpg.connect(dsn.render_as_string(hide_password=False))
    payloads: list[str] = []

    def hear(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        payloads.append(payload)

    await connection.add_listener(todo_notices.CHANNEL, hear)
    return connection, payloads


def _ids(payloads: list[str]) -> list[str]:
    return [todo_id for payload in payloads for todo_id in payload.split(",")]


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

    connection, payloads = await _listening(services)
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
            if len(_ids(payloads)) >= len(available):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # anything more would have arrived by now
    finally:
        await connection.close()
        services.todo_publishers.remove(publisher)
    assert sorted(_ids(payloads)) == sorted(available)  # each once, the held one never
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


async def test_a_batch_of_many_todos_tells_them_in_notices_under_the_limit(
    services: Services, server: TestServer
) -> None:
    """NOTIFY refuses a payload of 8,000 bytes: a batch's ids are split by their running length,
    and every one of them is heard once. The deliveries are decided first and handed to the writer
    at once, so that they make one batch (the writer takes whatever is waiting)."""
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    app = server.app
    config = await app[ingest.INGEST_CONFIGS].read(services.db, token_hash(token))
    assert config is not None
    decided = []
    for n in range(300):
        body = json.dumps({"action": "opened", "issue": {"number": n, "title": "t"}}).encode()
        headers = github_headers(secret, body, "issues", f"many-{n}")
        request = make_mocked_request("POST", f"/webhooks/{token}", headers=headers, app=app)
        decided.append(await ingest._decide(request, services, config, body, utcnow()))
    connection, payloads = await _listening(services)
    try:
        writer = app[ingest.INGEST_WRITER]
        results = await asyncio.gather(*(writer.submit(d.rows) for d in decided))
        assert {r.status for r in results} == {"stored"}
        for _ in range(100):
            if len(_ids(payloads)) >= 300:
                break
            await asyncio.sleep(0.05)
    finally:
        await connection.close()
    async with services.db.read() as s:
        stored = set((await s.scalars(select(Todo.id))).all())
    assert sorted(_ids(payloads)) == sorted(stored) and len(stored) == 300
    assert writer.batches <= 3, "most of them in one batch"
    # No batch failed and was split to go in: every notice was under the limit the first time.
    assert services.metrics.value("switchboard_ingest_transactions_total", outcome="failed") == 0
    # A batch of more ids than one notice holds was told in several, each within the bound (an id
    # at most 40 characters and its comma past it).
    # … and not one notice an id (a true division once grouped them so).
    assert writer.batches < len(payloads) <= 2 * writer.batches
    assert all(len(p.encode()) <= todo_notices.PAYLOAD_LIMIT + 41 for p in payloads)
