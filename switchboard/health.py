"""Health at a glance, for the endpoints and webhooks pages: a few grouped reads per page, never a
read per row.

* An endpoint's last activity (its latest claim, heartbeat or end of an attempt), how many of its
  todos are pending and since when the oldest has waited. Live MCP sessions are the serving
  process's own count (``Services.live_sessions``), not a database fact.
* A webhook's last stored delivery (the newest event) and its refusals of the last day, by reason,
  from the delivery log's refusal rows (``delivery_records``, every server process's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select

from switchboard.db import Database, utcnow
from switchboard.models import Attempt, DeliveryRecord, Event, Todo

# The refusals a webhook's health counts: those of the last day.
REFUSALS_SINCE = timedelta(days=1)


@dataclass(frozen=True)
class EndpointHealth:
    last_activity_at: datetime | None = None
    pending: int = 0
    oldest_pending_at: datetime | None = None


@dataclass(frozen=True)
class WebhookHealth:
    last_delivery_at: datetime | None = None
    # reason -> refusals of the last day (``REFUSALS_SINCE``)
    refused: Mapping[str, int] | None = None
    last_refused_at: datetime | None = None

    @property
    def refused_total(self) -> int:
        return sum((self.refused or {}).values())


def _latest(*moments: datetime | None) -> datetime | None:
    present = [m for m in moments if m is not None]
    return max(present) if present else None


async def endpoint_health(db: Database, endpoint_ids: Iterable[str]) -> dict[str, EndpointHealth]:
    """Per endpoint id: last activity, pending count and the oldest pending todo's creation time."""
    ids = sorted(set(endpoint_ids))
    if not ids:
        return {}
    async with db.read() as s:
        activity = {
            endpoint_id: _latest(claimed, beat, ended)
            for endpoint_id, claimed, beat, ended in await s.execute(
                select(
                    Attempt.endpoint_id,
                    func.max(Attempt.claimed_at),
                    func.max(Attempt.last_heartbeat_at),
                    func.max(Attempt.ended_at),
                )
                .where(Attempt.endpoint_id.in_(ids))
                .group_by(Attempt.endpoint_id)
            )
        }
        # The partial index on pending todos (endpoint, queue, created) answers this.
        pending = {
            endpoint_id: (count, oldest)
            for endpoint_id, count, oldest in await s.execute(
                select(Todo.endpoint_id, func.count(), func.min(Todo.created_at))
                .where(Todo.endpoint_id.in_(ids), Todo.state == "pending")
                .group_by(Todo.endpoint_id)
            )
        }
    return {
        endpoint_id: EndpointHealth(
            last_activity_at=activity.get(endpoint_id),
            pending=pending.get(endpoint_id, (0, None))[0],
            oldest_pending_at=pending.get(endpoint_id, (0, None))[1],
        )
        for endpoint_id in ids
    }


async def webhook_health(db: Database, webhook_ids: Iterable[str]) -> dict[str, WebhookHealth]:
    """Per webhook id: when its newest stored delivery arrived, and its refusals of the last day."""
    ids = sorted(set(webhook_ids))
    if not ids:
        return {}
    since = utcnow() - REFUSALS_SINCE
    async with db.read() as s:
        last = dict(
            (
                await s.execute(
                    select(Event.webhook_id, func.max(Event.received_at))
                    .where(Event.webhook_id.in_(ids))
                    .group_by(Event.webhook_id)
                )
            ).all()
        )
        refused: dict[str, dict[str, int]] = {}
        last_refused: dict[str, datetime] = {}
        for webhook_id, reason, count, latest in await s.execute(
            select(
                DeliveryRecord.webhook_id,
                DeliveryRecord.reason,
                func.sum(DeliveryRecord.count),
                func.max(DeliveryRecord.received_at),
            )
            .where(
                DeliveryRecord.webhook_id.in_(ids),
                DeliveryRecord.disposition == "refused",
                DeliveryRecord.received_at >= since,
            )
            .group_by(DeliveryRecord.webhook_id, DeliveryRecord.reason)
        ):
            refused.setdefault(webhook_id, {})[reason] = int(count or 0)
            last_refused[webhook_id] = max(latest, last_refused.get(webhook_id, latest))
    return {
        i: WebhookHealth(
            last_delivery_at=last.get(i), refused=refused.get(i, {}), last_refused_at=last_refused.get(i)
        )
        for i in ids
    }
