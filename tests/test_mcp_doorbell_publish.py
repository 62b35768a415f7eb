"""The doorbell's cross-process publication (PostgreSQL ``NOTIFY``): every id reaches a listener of
another connection, in payloads under the server's limit, however many chunks one call makes; and
its ring claim moves a todo's ``ring_count`` once."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from switchboard.db import Database, utcnow
from switchboard.mcp.doorbell import Doorbell, LiveSession
from switchboard.models import Todo
from switchboard.services import Services
from switchboard.testing import add_todo, engine_name, vend
from switchboard.todo_notices import CHANNEL, PAYLOAD_LIMIT


@pytest.mark.skipif(engine_name() != "postgresql", reason="NOTIFY is PostgreSQL's")
async def test_a_publication_of_many_ids_reaches_another_connection_whole(services: Services) -> None:
    dsn = make_url(services.settings.database_url).set(drivername="postgresql")
    listener = await asyncpg.connect(dsn.render_as_string(hide_password=False))
    heard: list[str] = []
    got = asyncio.Event()
    ids = [f"td_{n:026d}" for n in range(700)]

    def on_notify(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        heard.append(payload)
        if sum(len(p.split(",")) for p in heard) >= len(ids):
            got.set()

    try:
        await listener.add_listener(CHANNEL, on_notify)
        await Doorbell(services)._publish(ids)
        await asyncio.wait_for(got.wait(), 10)
    finally:
        await listener.close()
    assert len(heard) >= 3, "700 ids of 30 characters make several payloads"
    assert all(len(p.encode()) <= PAYLOAD_LIMIT for p in heard)
    assert [i for p in heard for i in p.split(",")] == ids


class _Hearing:
    """A connection stand-in that records what it was sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, object]] = []

    async def notify(self, _method: str, params: dict[str, object]) -> None:
        self.sent.append(params)


async def test_a_ring_is_claimed_once_and_moves_the_todo_on(db: Database, services: Services) -> None:
    ep, _ = await vend(db)
    todo = await add_todo(db, ep)
    async with db.read() as s:
        row = await s.scalar(select(Todo).where(Todo.id == todo.id))
    assert row is not None and row.ring_count == 0 and row.next_ring_at is not None
    bell = Doorbell(services)
    hearing = _Hearing()
    session = LiveSession(id="s1", endpoint_id=ep.id, queues=tuple(ep.queues), transport=None)  # type: ignore[arg-type]
    session.connection, session.stream_open = hearing, True  # type: ignore[assignment]
    # Two rings decided on the same read: only the first claims it.
    assert await bell._ring(row, [session]) == 1
    assert await bell._ring(row, [session]) == 0
    assert [p["meta"]["todo_id"] for p in hearing.sent] == [todo.id]  # type: ignore[index]
    async with db.read() as s:
        after = await s.scalar(select(Todo).where(Todo.id == todo.id))
    assert after is not None and after.ring_count == 1
    assert after.next_ring_at is not None and after.next_ring_at > utcnow()
