"""Migration 0008 (intake) on both engines: webhooks that exist when it ships keep working as before
(every kind but ``generic`` is trusted with ``allow_all``), and going back down keeps every row."""

from __future__ import annotations

import asyncio

from alembic import command
from sqlalchemy import select, update

from switchboard import migrate
from switchboard.db import Database, utcnow
from switchboard.ids import new_id
from switchboard.intake import HOLD_QUEUE, HOLD_TTL
from switchboard.models import Event, Todo, Webhook
from switchboard.services import Services
from switchboard.testing import make_webhook
from switchboard.todos import new_todo_row


def _to(database_url: str, revision: str, *, down: bool) -> None:
    config = migrate.alembic_config(database_url)
    (command.downgrade if down else command.upgrade)(config, revision)


async def test_existing_webhooks_are_migrated_to_allow_all_except_generic(
    services: Services, database_url: str
) -> None:
    _, _, github = await make_webhook(services, "github")
    _, _, cairn = await make_webhook(services, "cairn")
    _, _, slack = await make_webhook(services, "slack")
    _, _, generic = await make_webhook(services, "generic")
    await services.db.dispose()

    await asyncio.to_thread(_to, database_url, "0007", down=True)
    await asyncio.to_thread(_to, database_url, "head", down=False)

    database = Database(database_url)
    try:
        async with database.read() as s:
            trust = dict((await s.execute(select(Webhook.id, Webhook.trust))).all())
            routing = set((await s.scalars(select(Webhook.routing))).all())
    finally:
        await database.dispose()
    assert trust == {
        github: {"allow_all": True},
        cairn: {"allow_all": True},
        # A kind without actors ignores it; a generic body is unsigned, so trust cannot apply.
        slack: {"allow_all": True},
        generic: None,
    }
    assert routing == {None}


async def test_going_down_keeps_held_todos_and_the_new_dispositions_as_their_nearest_old_state(
    services: Services, database_url: str
) -> None:
    _, _, webhook_id = await make_webhook(services, "github")
    async with services.db.read() as s:
        webhook = await s.get(Webhook, webhook_id)
    assert webhook is not None
    now = utcnow()
    event = Event(
        id=new_id("ev"),
        webhook_id=webhook_id,
        source="github",
        event_type="issues.opened",
        delivery_key="d-1",
        headers={},
        body=b"{}",
        verified=True,
        verify_detail="ok",
        trust_mode="signed",
        disposition="quarantined",
        received_at=now,
        routing={"by": "trust"},
    )
    held = new_todo_row(
        endpoint_id=webhook.endpoint_id,
        queue=HOLD_QUEUE,
        source="github",
        kind="issues.opened",
        title="held",
        payload={},
        event_id=event.id,
        now=now,
        hold_reason="untrusted_actor",
        hold_detail={"actor": None},
        hold_expires_at=now + HOLD_TTL,
    )
    async with services.db.write() as s:
        s.add(event)
        await s.flush()
        s.add(held)
    await services.db.dispose()

    await asyncio.to_thread(_to, database_url, "0007", down=True)
    database = Database(database_url)
    try:
        async with database.engine.connect() as conn:
            states = (await conn.exec_driver_sql("SELECT state FROM todos")).scalars().all()
            dispositions = (await conn.exec_driver_sql("SELECT disposition FROM events")).scalars().all()
    finally:
        await database.dispose()
    assert list(states) == ["cancelled"] and list(dispositions) == ["ignored"]

    await asyncio.to_thread(_to, database_url, "head", down=False)
    database = Database(database_url)
    try:
        # Back at head: the held state and the new dispositions are allowed again.
        async with database.write() as s:
            await s.execute(update(Todo).values(state="held", hold_reason="rule"))
            await s.execute(update(Event).values(disposition="quarantined"))
    finally:
        await database.dispose()
