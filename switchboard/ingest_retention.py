"""The retention of events that minted no todo (a background job of the app)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, exists, select

from switchboard.db import utcnow
from switchboard.models import Event, Todo
from switchboard.services import Services

# Events that minted no todo (ignored, self_reply) are only kept for deduplication and audit. Their
# delivery keys must outlive any provider retry (at least 7 days: docs/architecture.md, "What ingest
# stores"); a month is generous.
EVENT_RETENTION = timedelta(days=30)
RETENTION_BATCH = 1000


async def prune_events(services: Services, now: datetime | None = None) -> int:
    """Delete old events that no todo points at, in batches; returns how many went."""
    cutoff = (now or utcnow()) - EVENT_RETENTION
    total = 0
    while True:
        async with services.db.write() as s:
            stale = (
                select(Event.id)
                .where(Event.received_at < cutoff, ~exists().where(Todo.event_id == Event.id))
                .limit(RETENTION_BATCH)
            )
            ids = list((await s.scalars(stale)).all())
            if ids:
                await s.execute(delete(Event).where(Event.id.in_(ids)))
        total += len(ids)
        if len(ids) < RETENTION_BATCH:
            return total
