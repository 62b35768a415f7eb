"""Health at a glance, for the endpoints and webhooks pages: a few grouped reads per page, never a
read per row.

* An endpoint's last activity (its latest claim, heartbeat or end of an attempt), how many of its
  todos are pending and since when the oldest has waited. Live MCP sessions are the serving
  process's own count (``Services.live_sessions``), not a database fact.
* A webhook's last delivery (the newest stored event) and its refusals, counted by this process
  since it started (``switchboard_ingest_refused_total``; refusals store no row).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select

from switchboard.db import Database
from switchboard.metrics import Metrics
from switchboard.models import Attempt, Event, Todo

# The ingest refusal counter (``ingest_admission.REFUSED_METRIC``), read here by name: that module
# is the counter's writer, this one only reads what the registry holds.
REFUSED_METRIC = "switchboard_ingest_refused_total"


@dataclass(frozen=True)
class EndpointHealth:
    last_activity_at: datetime | None = None
    pending: int = 0
    oldest_pending_at: datetime | None = None


@dataclass(frozen=True)
class WebhookHealth:
    last_delivery_at: datetime | None = None
    # reason -> refusals counted by this process since it started
    refused: Mapping[str, int] | None = None

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


def refusals_by_webhook(metrics: Metrics) -> dict[str, dict[str, int]]:
    """webhook id -> reason -> count, from this process's refusal counter."""
    out: dict[str, dict[str, int]] = {}
    for labels, value in metrics.series(REFUSED_METRIC):
        webhook, reason = labels.get("webhook"), labels.get("reason", "")
        if webhook:
            out.setdefault(webhook, {})[reason] = int(value)
    return out


async def webhook_health(
    db: Database, metrics: Metrics, webhook_ids: Iterable[str]
) -> dict[str, WebhookHealth]:
    """Per webhook id: when its newest stored delivery arrived, and its refusals in this process."""
    ids = sorted(set(webhook_ids))
    if not ids:
        return {}
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
    refused = refusals_by_webhook(metrics)
    return {i: WebhookHealth(last_delivery_at=last.get(i), refused=refused.get(i, {})) for i in ids}
