"""Background jobs meeting what the rest of the system left behind: event retention and the numbering
of redeliveries, a ``once`` todo's retry and an open todo about its subject, and the configuration's
LISTEN connection lost and made again (PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

import pytest
from fixtures.intake_kit import SENDER, deliver, github_hook, newest_event, set_rules
from sqlalchemy import select, text, update

from switchboard import config_changes, deliveries, ingest, ingest_config, todos
from switchboard.db import utcnow
from switchboard.ingest import INGEST_WRITER
from switchboard.models import Event, Todo
from switchboard.services import Services

TRUSTED = {"logins": [SENDER]}
DROP_ALL = {"rules": [{"id": "all", "expr": "true", "action": {"type": "drop"}}]}


async def test_event_retention_does_not_break_redelivery_numbering(
    services: Services, server: Any, base_url: str
) -> None:
    """A redelivery's key is ``redelivery:<original>:<n>``. Event retention deletes old redeliveries
    that made no todo; ``n`` counted those still stored, so it fell back onto a key a later
    redelivery still held, and every further redelivery of that original was a duplicate, answered
    ``unavailable`` for good. It is now one past the highest still stored."""
    hook = await github_hook(services, trust=TRUSTED)
    status, answer = await deliver(base_url, hook, "issues/opened")
    assert status == 202 and answer["disposition"] == "routed", answer
    original = (await newest_event(services, hook.webhook_id)).id
    writer = server.app[INGEST_WRITER]

    # A rule now drops everything: redeliveries mint no todo (so retention may delete them).
    await set_rules(services, hook.webhook_id, DROP_ALL)
    first = await deliveries.redeliver(services, writer, hook.webhook_id, original, by="ada")
    assert first.disposition == "dropped" and first.todos == []
    # ...and 31 days pass for the first one.
    async with services.db.write() as s:
        await s.execute(
            update(Event).where(Event.id == first.event_id).values(received_at=utcnow() - timedelta(days=31))
        )
    second = await deliveries.redeliver(services, writer, hook.webhook_id, original, by="ada")
    assert second.disposition == "dropped"

    assert await ingest.prune_events(services) == 1  # the first redelivery goes, the second stays

    third = await deliveries.redeliver(services, writer, hook.webhook_id, original, by="ada")
    async with services.db.read() as s:
        keys = set((await s.scalars(select(Event.delivery_key).where(Event.redelivery_of == original))).all())
    assert third.event_id != second.event_id
    assert len(keys) == 2


async def test_one_once_todo_whose_retry_conflicts_does_not_block_every_retry(
    services: Services, base_url: str
) -> None:
    """``uq_todos_once`` holds one *pending or claimed* todo per subject; a failed todo waiting for
    its retry is not in it, so ingest makes a second todo about the subject meanwhile. Its retry
    used to break the index and roll back the whole batch, every pass: no due retry of any endpoint
    was made while the other todo stayed open. It now waits for that todo to end."""
    hook = await github_hook(services, trust=TRUSTED)
    once = {"rules": [{"id": "once", "expr": "true", "action": {"type": "queue", "once": True}}]}
    await set_rules(services, hook.webhook_id, once)
    db = services.db

    status, first = await deliver(base_url, hook, "issue_comment/created")
    assert status == 202 and first["created"] == 1, first
    folded_id = first["todos"][0]["id"]
    claimed = await todos.claim(db, hook.endpoint, folded_id)
    await todos.fail(db, hook.endpoint, folded_id, error="flaky", lease_token=claimed.get("lease_token"))

    # An unrelated todo (another subject, pull request #2) also failed and is due at the same time.
    status, other = await deliver(base_url, hook, "pull_request/opened")
    assert status == 202 and other["created"] == 1, other
    other_id = other["todos"][0]["id"]
    claimed = await todos.claim(db, hook.endpoint, other_id)
    await todos.fail(db, hook.endpoint, other_id, error="flaky", lease_token=claimed.get("lease_token"))

    # While the first waits for its retry, a new delivery about issue #1 makes an open todo.
    status, again = await deliver(base_url, hook, "issues/opened")
    assert status == 202 and again["created"] == 1, again

    later = utcnow() + timedelta(hours=1)
    requeued = await todos.schedule_retries(db, later)
    assert requeued == [other_id]
    async with db.read() as s:
        assert (await s.get(Todo, other_id)).state == "pending"  # type: ignore[union-attr]
        assert (await s.get(Todo, folded_id)).state == "failed"  # type: ignore[union-attr]
    # Once the open todo about issue #1 has ended, the waiting one is retried.
    open_id = again["todos"][0]["id"]
    claimed = await todos.claim(db, hook.endpoint, open_id)
    await todos.complete(db, hook.endpoint, open_id, lease_token=claimed.get("lease_token"))
    assert await todos.schedule_retries(db, later) == [folded_id]


async def test_config_listen_connection_killed_by_the_server_reconnects_and_hears_again(
    services: Services, monkeypatch: Any
) -> None:
    """The server kills the ``LISTEN switchboard_config`` connection (``pg_terminate_backend``): the
    caches are emptied (a notification may have been missed), the connection comes back, and
    another process's change is heard again."""
    if services.db.is_sqlite:
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    monkeypatch.setattr(ingest_config, "LISTEN_RETRY_SECONDS", 0.05)
    listen_sql = text(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'"
    )

    async def listener_pids() -> list[int]:
        async with services.db.read() as s:
            return list((await s.scalars(listen_sql)).all())

    async def until(check: Any) -> None:
        for _ in range(200):
            if await check():
                return
            await asyncio.sleep(0.025)
        raise AssertionError("timed out")

    task = asyncio.create_task(ingest_config.listen_for_changes(services.settings.database_url))
    try:
        await until(listener_pids)
        [old_pid] = await listener_pids()
        before = config_changes.generation()
        async with services.db.write() as s:
            await s.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": old_pid})

        async def back() -> bool:
            pids = await listener_pids()
            return bool(pids) and old_pid not in pids

        await until(back)
        # Emptied on the loss and again on reconnecting: whatever was missed in between is not served.
        assert config_changes.generation() >= before + 2
        heard_before = config_changes.generation()
        async with services.db.write() as s:
            await s.execute(text("SELECT pg_notify(:c, 'another-process')"), {"c": config_changes.CHANNEL})

        async def heard() -> bool:
            return config_changes.generation() > heard_before

        await until(heard)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
