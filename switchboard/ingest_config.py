"""What ingest needs to know about a webhook: the webhook row, its owner endpoint and its routes, read
together as one ``WebhookConfig`` whose ``version`` says exactly which state of them it was made from.

The request path reads a configuration (by ingest token) and decides with it: verify, targets,
rows. The group-commit writer reads the configurations of its batch again, by webhook id, inside its
own transaction (share-locked on PostgreSQL; SQLite's write lock already excludes every other
writer) and stores a delivery only if the version still matches and its live targets are still the
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

How the writer knows "as it is now" cheaply: ``webhooks.config_version``, which the database's own
triggers move on whenever a webhook, one of its routes or an endpoint it delivers to changes
(migration 0010), whoever made the change (this process, another one, the CLI, raw SQL). The writer
reads that one number per webhook of its batch, share-locked on PostgreSQL (there inside the batch's
one statement, ``ingest_statements.pg_batch``): a change to a route or an endpoint updates the webhooks
it concerns, so it meets that same lock. Before it, the writer read
every column of the webhook, its owner endpoint and its routes' endpoints again, in two joined
statements that share-locked all of those rows; one narrow statement instead gave 6-10% more
deliveries/s on PostgreSQL, side by side (bench/HISTORY.md, issue 12).

Chosen over ``PRAGMA data_version`` (it moves on every commit by any connection, so every ingest
batch and claim would empty the cache, and reading it is still a read per delivery), over reading
the version per delivery (a round trip on every request) and over a time to live (stale for its
length, so a revocation would not be obeyed at once): the check costs one statement per batch
(SQLite: one per webhook of the batch), and under load a batch holds many deliveries.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Select, String, Table, any_, bindparam, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard import config_changes
from switchboard.db import Database, utcnow
from switchboard.direct import Steps
from switchboard.models import Endpoint, Route, Webhook
from switchboard.tenancy import webhook_secret
from switchboard.vault import Vault

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

    The rows are detached copies that nobody changes. ``version`` is the webhook's
    ``config_version`` as read with its row, which the database moves on whenever any of these rows
    changes (migration 0010): two configurations of one webhook are the same exactly when their
    versions are equal. It is read with the webhook's row, before its routes, so a change that lands
    between the two reads leaves it behind: the writer then decides such a delivery again rather
    than trusting rows that may be newer than their version.
    """

    webhook: Webhook
    owner: Endpoint
    routed: tuple[Endpoint, ...]
    version: int
    # The signing secret once opened (``signing_secret``), by nobody but this configuration.
    _opened: list[str | None] = field(default_factory=list, repr=False)

    # Read per delivery, from plain attributes: the rows never change, and each read of an ORM
    # attribute goes through its descriptor (several dozen a delivery, issue 12).
    @functools.cached_property
    def id(self) -> str:
        return self.webhook.id

    @functools.cached_property
    def _granted(self) -> tuple[tuple[Target, datetime | None], ...]:
        """The endpoints that are active and granted the webhook's queue, each with its expiry."""
        queue = self.webhook.queue
        return tuple(
            (Target(e.id, e.slug, e.owner_human_id or e.owner_team_id or ""), e.expires_at)
            for e in (self.owner, *self.routed)
            if e.state == "active" and queue in e.queues
        )

    def signing_secret(self, vault: Vault) -> str | None:
        """The webhook's signing secret, opened from its sealed column once per configuration.

        Opening it is two AES-GCM decryptions, which every delivery paid for (issue 12). The plain
        secret is kept only as long as this configuration, in the process that already holds the
        key that opens it; a new secret, a reseal or a rotation is a new configuration (its version
        moves), so it is opened again. A ``VaultError`` is raised every time, never kept."""
        if not self._opened:
            self._opened.append(webhook_secret(vault, self.webhook))
        return self._opened[0]

    def targets(self, now: datetime | None = None) -> list[Target]:
        """The owner endpoint first, then the routes in the order they were added; live ones
        granted the webhook's queue only. Expiry is judged at ``now``, never cached."""
        now = now or utcnow()
        # As ``tenancy.endpoint_is_live``: active (``_granted``) and not expired.
        return [target for target, expires_at in self._granted if expires_at is None or expires_at > now]


def _config(webhook: Webhook, owner: Endpoint, routed: list[Endpoint]) -> WebhookConfig:
    return WebhookConfig(webhook, owner, tuple(routed), webhook.config_version)


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


# The writer's re-check reads one narrow row per webhook through Core, with statements built once:
# its id and ``config_version``, which the database's triggers move on whenever the webhook, one of
# its routes or an endpoint it delivers to changes (migration 0010). FOR SHARE on PostgreSQL, in the
# webhooks' id order: such a change updates these rows, so it waits for the writer's transaction, or
# the writer waits for it and reads what it committed. SQLite renders nothing; its write transaction
# already holds the database's one write lock.
_WEBHOOKS = cast(Table, Webhook.__table__)
_VERSIONS = (
    select(_WEBHOOKS.c.id, _WEBHOOKS.c.config_version).order_by(_WEBHOOKS.c.id).with_for_update(read=True)
)
# SQLite: one webhook per statement (its driver takes no arrays); a batch names one or a few.
_VERSION_ONE = _VERSIONS.where(_WEBHOOKS.c.id == bindparam("id"))
# PostgreSQL: every webhook of the batch in one statement, as an array (a fixed statement text).
VERSIONS_ANY = _VERSIONS.where(_WEBHOOKS.c.id == any_(bindparam("ids", type_=ARRAY(String))))


def current_versions(webhook_ids: Iterable[str], dialect: str) -> Steps[dict[str, int]]:
    """The versions of these webhooks' configurations as they are now, share-locked, by webhook id
    (absent: deleted), as steps of the ingest writer's transaction (``Database.run_steps``): one
    statement on PostgreSQL, one per webhook on SQLite (calls into SQLite on its writer's thread)."""
    ids = sorted(set(webhook_ids))
    rows: list[Any] = []
    if dialect == "sqlite":
        for webhook_id in ids:
            rows += yield _VERSION_ONE, {"id": webhook_id}
    else:
        rows = list((yield VERSIONS_ANY, {"ids": ids}))
    return {row[0]: row[1] for row in rows}


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
