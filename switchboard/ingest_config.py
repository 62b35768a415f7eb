"""What ingest needs to know about a webhook: the webhook row, its owner endpoint and its routes, read
together as one ``WebhookConfig`` whose ``stamp`` says exactly which rows it was made from.

The request path reads a configuration (by ingest token) and decides with it: verify, targets,
rows. The group-commit writer reads the configurations of its batch again, by webhook id, inside its
own transaction (share-locked on PostgreSQL; SQLite's write lock already excludes every other
writer) and stores a delivery only if the stamp still matches and its live targets are still the
same. A delivery decided on a configuration that has since changed is handed back to be decided
again. So a revoked endpoint never gets a todo once its revocation has committed, a delivery is
stored only if it verified against the secrets the webhook's row holds at the commit, and a deleted
webhook stores nothing, whichever process made the change.

That is what lets the request path serve configurations from a per-process cache (``ConfigCache``)
without a read per delivery. The cache is emptied when this process changes a webhook, a route or an
endpoint, and, on PostgreSQL, when another process does (``LISTEN switchboard_config``; see
``config_changes``). A change the cache has not heard of (the CLI on SQLite, a notification still in
flight) costs at most one more decision, never a wrong answer:

* an acceptance decided on a cached configuration is re-checked by the writer as above;
* a refusal (401, 503) or a handshake decided on a cached configuration is decided again on the
  rows as they are now before it is answered, so a secret rotated or set from another process works
  on the very next delivery.

Chosen over ``PRAGMA data_version`` (it moves on every commit by any connection, so every ingest
batch and claim would empty the cache, and reading it is still a read per delivery), over a
``config_version`` row (a read per delivery, and a migration) and over a time to live (stale for its
length, so a revocation would not be obeyed at once): the writer's check costs two statements per
batch, not a read per delivery. Measured on the 2-core development machine under load (best of
five runs of 60): the check adds about 0.4-0.7 ms to a batch's transaction on SQLite and 1-3 ms on
PostgreSQL (its share locks make the commit write), where one small read per delivery costs about
1.5 ms (SQLite) and 0.9 ms (PostgreSQL), and the uncached lookup 2.6-3 ms; under load a batch holds
many deliveries.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Select, String, Table, any_, bindparam, inspect, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase

from switchboard import config_changes
from switchboard.db import Database, utcnow
from switchboard.direct import Steps
from switchboard.models import Endpoint, Route, Webhook
from switchboard.tenancy import endpoint_is_live

log = logging.getLogger("switchboard.ingest")

# Webhooks whose configuration one process keeps; beyond it the oldest entry goes.
CACHE_ENTRIES = 10_000
# Seconds between attempts to (re)open the LISTEN connection.
LISTEN_RETRY_SECONDS = 2.0


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
    """Every column of a row, in the table's order: what a Core select of the table returns."""
    return tuple(getattr(row, key) for key in _attribute_keys(type(row)))


@functools.cache
def _attribute_keys(model: type[DeclarativeBase]) -> tuple[str, ...]:
    mapper = inspect(model)
    return tuple(mapper.get_property_by_column(column).key for column in model.__table__.columns)


def _config(webhook: Webhook, owner: Endpoint, routed: list[Endpoint]) -> WebhookConfig:
    stamp = (_columns(webhook), _columns(owner), tuple(_columns(e) for e in routed))
    return WebhookConfig(webhook, owner, tuple(routed), stamp)


async def _assemble(s: AsyncSession, found: Select[Webhook, Endpoint]) -> dict[str, WebhookConfig]:
    pairs = (await s.execute(found)).all()
    if not pairs:
        return {}
    routes = (
        select(Route.webhook_id, Endpoint)
        .join(Endpoint, Endpoint.id == Route.endpoint_id)
        .where(Route.webhook_id.in_([webhook.id for webhook, _ in pairs]))
        .order_by(Route.webhook_id, Route.created_at, Route.id)
    )
    routed: dict[str, list[Endpoint]] = {}
    for webhook_id, endpoint in await s.execute(routes):
        routed.setdefault(webhook_id, []).append(endpoint)
    return {webhook.id: _config(webhook, owner, routed.get(webhook.id, [])) for webhook, owner in pairs}


def _with_owner() -> Select[Webhook, Endpoint]:
    return select(Webhook, Endpoint).join(Endpoint, Endpoint.id == Webhook.endpoint_id)


async def config_by_token_hash(s: AsyncSession, ingest_token_hash: str) -> WebhookConfig | None:
    """The configuration of the webhook an ingest token names (two statements), or None."""
    found = await _assemble(s, _with_owner().where(Webhook.ingest_token_hash == ingest_token_hash))
    return next(iter(found.values()), None)


# The writer's re-check reads the same rows through Core (no ORM objects: only their stamps are
# compared), with statements built once. FOR SHARE on PostgreSQL, so a revocation, a rotation or a
# deletion waits for the writer's transaction (and the writer reads what such a change committed);
# SQLite renders nothing, its write transaction already holds the database's one write lock.
_WEBHOOKS = cast(Table, Webhook.__table__)
_ENDPOINTS = cast(Table, Endpoint.__table__)
_ROUTES = cast(Table, Route.__table__)


def _owned(webhooks: Any) -> Select[Any]:
    """Each of ``webhooks``' row with its owner endpoint's."""
    return (
        select(_WEBHOOKS, _ENDPOINTS)
        .join_from(_WEBHOOKS, _ENDPOINTS, _ENDPOINTS.c.id == _WEBHOOKS.c.endpoint_id)
        .where(webhooks)
        .order_by(_WEBHOOKS.c.id)
        .with_for_update(read=True)
    )


def _routed(webhooks: Any) -> Select[Any]:
    """The endpoints ``webhooks`` route to, by webhook, in the order the routes were added."""
    return (
        select(_ROUTES.c.webhook_id, _ENDPOINTS)
        .join_from(_ROUTES, _ENDPOINTS, _ENDPOINTS.c.id == _ROUTES.c.endpoint_id)
        .where(webhooks)
        .order_by(_ROUTES.c.webhook_id, _ROUTES.c.created_at, _ROUTES.c.id)
        .with_for_update(read=True)
    )


# SQLite: one webhook per statement (its driver takes no arrays); a batch names one or a few.
_OWNED_ONE = _owned(_WEBHOOKS.c.id == bindparam("id"))
_ROUTED_ONE = _routed(_ROUTES.c.webhook_id == bindparam("id"))
# PostgreSQL: every webhook of the batch in one statement each, as an array (a fixed statement text).
_OWNED_ANY = _owned(_WEBHOOKS.c.id == any_(bindparam("ids", type_=ARRAY(String))))
_ROUTED_ANY = _routed(_ROUTES.c.webhook_id == any_(bindparam("ids", type_=ARRAY(String))))


def current_stamps(webhook_ids: Iterable[str], dialect: str) -> Steps[dict[str, tuple[Any, ...]]]:
    """The stamps of these webhooks' configurations as they are now, share-locked, by webhook id
    (absent: deleted), as steps of the ingest writer's transaction (``Database.run_steps``): two
    statements on PostgreSQL, two per webhook on SQLite (calls into SQLite on its writer's thread)."""
    ids = sorted(set(webhook_ids))
    width = len(_WEBHOOKS.columns)
    owned: list[Any] = []
    routed: list[Any] = []
    if dialect == "sqlite":
        for webhook_id in ids:
            owned += yield _OWNED_ONE, {"id": webhook_id}
            routed += yield _ROUTED_ONE, {"id": webhook_id}
    else:
        owned = list((yield _OWNED_ANY, {"ids": ids}))
        routed = list((yield _ROUTED_ANY, {"ids": ids}))
    by_webhook: dict[str, list[tuple[Any, ...]]] = {}
    for row in routed:
        by_webhook.setdefault(row[0], []).append(tuple(row[1:]))
    return {
        row[0]: (tuple(row[:width]), tuple(row[width:]), tuple(by_webhook.get(row[0], ()))) for row in owned
    }


class ConfigCache:
    """Configurations by ingest token hash, for this process. Emptied whenever
    ``config_changes.generation()`` moves on; a configuration read while it moved is not kept (it
    may predate the change). Unknown tokens are not kept: a webhook made by another process must
    be found on its first delivery."""

    def __init__(self, max_entries: int = CACHE_ENTRIES) -> None:
        self.max_entries = max_entries
        self._entries: dict[str, WebhookConfig] = {}
        self._generation = config_changes.generation()
        # How many lookups were answered here, and how many read the database (for tests and tuning).
        self.hits = 0
        self.reads = 0

    def get(self, ingest_token_hash: str) -> WebhookConfig | None:
        self._catch_up()
        config = self._entries.get(ingest_token_hash)
        if config is not None:
            self.hits += 1
        return config

    async def read(self, db: Database, ingest_token_hash: str) -> WebhookConfig | None:
        """The configuration as it is in the database now (kept for the next lookup), or None."""
        self._catch_up()
        generation = self._generation
        async with db.read() as s:
            config = await config_by_token_hash(s, ingest_token_hash)
        self.reads += 1
        self._catch_up()
        if config is None:
            self._entries.pop(ingest_token_hash, None)
        elif generation == self._generation:
            if len(self._entries) >= self.max_entries and ingest_token_hash not in self._entries:
                del self._entries[next(iter(self._entries))]
            self._entries[ingest_token_hash] = config
        return config

    def _catch_up(self) -> None:
        current = config_changes.generation()
        if current != self._generation:
            self._entries.clear()
            self._generation = current


async def listen_for_changes(database_url: str) -> None:
    """PostgreSQL: hold a ``LISTEN switchboard_config`` connection until cancelled, reconnecting;
    every notification (and every reconnection, which may have missed some) empties the caches."""
    import asyncpg

    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    while True:
        conn = None
        try:
            conn = await asyncpg.connect(dsn)
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
            await conn.add_listener(config_changes.CHANNEL, lambda *args: config_changes.heard(args[-1]))
            # Whatever changed while this process was not listening.
            config_changes.changed()
            await lost.wait()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("ingest: LISTEN %s failed (%s); retrying", config_changes.CHANNEL, type(exc).__name__)
        finally:
            if conn is not None and not conn.is_closed():
                with contextlib.suppress(Exception):
                    await asyncio.shield(conn.close(timeout=2))
        config_changes.changed()
        await asyncio.sleep(LISTEN_RETRY_SECONDS)
