"""What ingest needs to know about a webhook: the webhook row, its owner endpoint and its routes, read
together as one ``WebhookConfig`` whose ``stamp`` says exactly which rows it was made from.

The request path reads a configuration (by ingest token) and decides with it: verify, targets,
rows. The group-commit writer reads the configurations of its batch again, by webhook id, inside its
own transaction (share-locked on PostgreSQL; SQLite's write lock already excludes every other
writer) and stores a delivery only if the stamp still matches and its live targets are still the
same. A delivery decided on a configuration that has since changed is handed back to be decided
again. So a revoked endpoint never gets a todo once its revocation has committed, a rotated secret
is never verified against after the rotation, and a deleted webhook stores nothing, whichever
process made the change.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase

from switchboard.db import utcnow
from switchboard.models import Endpoint, Route, Webhook
from switchboard.tenancy import endpoint_is_live


@dataclass(frozen=True)
class Target:
    """An endpoint a delivery's todo goes to."""

    endpoint_id: str
    slug: str
    owner_scope: str


@dataclass(frozen=True, eq=False)
class WebhookConfig:
    """A webhook with its owner endpoint and its routes' endpoints (in the order they were added).

    The rows are detached copies that nobody changes; ``stamp`` holds every column of each, so two
    configurations are the same exactly when their stamps are equal.
    """

    webhook: Webhook
    owner: Endpoint
    routed: tuple[Endpoint, ...]
    stamp: tuple[Any, ...]

    @property
    def id(self) -> str:
        return self.webhook.id

    def targets(self, now: datetime | None = None) -> list[Target]:
        """The owner endpoint first, then the routes in the order they were added; live ones
        granted the webhook's queue only. Expiry is judged at ``now``, never cached."""
        now = now or utcnow()
        queue = self.webhook.queue
        return [
            Target(e.id, e.slug, e.owner_human_id or e.owner_team_id or "")
            for e in (self.owner, *self.routed)
            if endpoint_is_live(e, now) and queue in e.queues
        ]


def _columns(row: DeclarativeBase) -> tuple[Any, ...]:
    table = row.__table__
    return tuple(getattr(row, column.key) for column in table.columns)


def _config(webhook: Webhook, owner: Endpoint, routed: list[Endpoint]) -> WebhookConfig:
    stamp = (_columns(webhook), _columns(owner), tuple(_columns(e) for e in routed))
    return WebhookConfig(webhook, owner, tuple(routed), stamp)


async def _assemble(
    s: AsyncSession, found: Select[Webhook, Endpoint], lock: bool
) -> dict[str, WebhookConfig]:
    if lock:
        # PostgreSQL: FOR SHARE, so a revocation, rotation or deletion waits for this transaction
        # (and this one reads what such a change committed). SQLite renders nothing: its write
        # transaction already holds the database's one write lock.
        found = found.with_for_update(read=True)
    pairs = (await s.execute(found)).all()
    if not pairs:
        return {}
    routes = (
        select(Route.webhook_id, Endpoint)
        .join(Endpoint, Endpoint.id == Route.endpoint_id)
        .where(Route.webhook_id.in_([webhook.id for webhook, _ in pairs]))
        .order_by(Route.webhook_id, Route.created_at, Route.id)
    )
    if lock:
        routes = routes.with_for_update(read=True)
    routed: dict[str, list[Endpoint]] = {}
    for webhook_id, endpoint in await s.execute(routes):
        routed.setdefault(webhook_id, []).append(endpoint)
    return {webhook.id: _config(webhook, owner, routed.get(webhook.id, [])) for webhook, owner in pairs}


def _with_owner() -> Select[Webhook, Endpoint]:
    return select(Webhook, Endpoint).join(Endpoint, Endpoint.id == Webhook.endpoint_id)


async def config_by_token_hash(s: AsyncSession, ingest_token_hash: str) -> WebhookConfig | None:
    """The configuration of the webhook an ingest token names (two statements), or None."""
    found = await _assemble(s, _with_owner().where(Webhook.ingest_token_hash == ingest_token_hash), False)
    return next(iter(found.values()), None)


async def configs_by_id(
    s: AsyncSession, webhook_ids: Iterable[str], *, lock: bool
) -> dict[str, WebhookConfig]:
    """The configurations of these webhooks as they are now, by webhook id (absent: deleted)."""
    ids = sorted(set(webhook_ids))
    return await _assemble(s, _with_owner().where(Webhook.id.in_(ids)).order_by(Webhook.id), lock)
