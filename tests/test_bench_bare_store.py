"""The benchmarks' bare store (``bench/bare_store.py``) does the work its row claims: it refuses a
bad signature and a body that is not JSON, stores a delivery's body and payload before its 202,
and answers a repeated delivery id as a duplicate. An anchor that skipped any of it would make
Switchboard's "of bare store" look worse than it is."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator

import aiohttp
import asyncpg
import pytest
from aiohttp.test_utils import TestServer
from sqlalchemy.engine import make_url

from bench import bare_store
from switchboard.testing import engine_name

pytestmark = pytest.mark.skipif(engine_name() != "postgresql", reason="the bare store is PostgreSQL's anchor")

SECRET = "bare-store-test-secret"


def _dsn(database_url: str) -> str:
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
async def store(database_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", database_url)
    monkeypatch.setenv("BARE_STORE_SECRET", SECRET)
    server = TestServer(bare_store.make_app(), host="127.0.0.1")
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}/webhooks/bare"
    finally:
        await server.close()
        # The run's database is shared by the tests after this one: leave it with our tables only.
        conn = await asyncpg.connect(_dsn(database_url))
        try:
            await conn.execute("DROP TABLE IF EXISTS bare_todos, bare_events")
        finally:
            await conn.close()


async def _post(url: str, body: bytes, delivery: str, secret: str = SECRET) -> tuple[int, dict[str, object]]:
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-Hub-Signature-256": signature,
        "X-GitHub-Delivery": delivery,
        "Content-Type": "application/json",
    }
    async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=headers) as response:
        return response.status, await response.json()


async def test_the_bare_store_verifies_stores_and_dedupes(store: str, database_url: str) -> None:
    body = json.dumps({"action": "opened", "issue": {"number": 7, "title": "héllo"}}).encode()
    status, answer = await _post(store, body, "d-1")
    assert status == 202 and answer["created"] == 1
    todo_id = answer["todos"][0]["id"]  # type: ignore[index]

    status, again = await _post(store, body, "d-1")
    assert status == 202 and again == {"todos": [], "created": 0, "disposition": "duplicate"}
    assert (await _post(store, body, "d-2", secret="not-the-secret"))[0] == 401
    not_json = b"{not json"
    assert (await _post(store, not_json, "d-3"))[0] == 400

    conn = await asyncpg.connect(_dsn(database_url))
    try:
        events = await conn.fetch("SELECT id, delivery_key, body FROM bare_events")
        todos = await conn.fetch("SELECT id, event_id, payload FROM bare_todos")
    finally:
        await conn.close()
    assert [(e["delivery_key"], bytes(e["body"])) for e in events] == [("d-1", body)]
    assert [t["id"] for t in todos] == [todo_id] and todos[0]["event_id"] == events[0]["id"]
    assert json.loads(bytes(todos[0]["payload"])) == json.loads(body)
