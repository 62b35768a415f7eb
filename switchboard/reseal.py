"""Sealing secrets that were stored in plaintext before an encryption key was configured.

Without ``SWITCHBOARD_SECRET_ENCRYPTION_KEY`` webhook signing secrets are stored in plaintext (so a
first install works without one); connection secrets never are. Configuring a key later seals
new secrets only, so ``switchboard db reseal`` seals every plaintext-stored secret in one
transaction, and ``serve`` logs a warning with the count at start while any remain.

A sealed copy is worthless if the plaintext survives beside it, so on SQLite the transaction runs
with ``PRAGMA secure_delete=ON`` (the old cells and any freed page are overwritten with zeros) and
is followed by ``PRAGMA wal_checkpoint(TRUNCATE)``, which moves the new pages into the database
file and empties the write-ahead log that still holds the old ones. On PostgreSQL the old row
versions remain until the table is vacuumed, and in the server's WAL until it is recycled; the
operator guide says so.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.errors import SwitchboardError
from switchboard.models import Connection, Webhook
from switchboard.services import Services
from switchboard.vault import PLAINTEXT_KEY_ID, binding

log = logging.getLogger("switchboard.reseal")

# A busy checkpoint (a reader in another process) is retried this many times, this far apart.
CHECKPOINT_TRIES = 20
CHECKPOINT_PAUSE = 0.25


@dataclass(frozen=True)
class Resealed:
    """What ``reseal`` did: secrets sealed, and whether SQLite's log was emptied (None elsewhere)."""

    count: int
    wal_truncated: bool | None


async def plaintext_count(services: Services) -> int:
    """Secrets stored in plaintext: webhook signing secrets (the current one, and the previous one
    a rotation keeps for its overlap), and connections' for completeness."""
    counted = 0
    async with services.db.read() as s:
        for column in (Webhook.secret_key_id, Webhook.previous_secret_key_id, Connection.secret_key_id):
            found = await s.scalar(select(func.count()).where(column == PLAINTEXT_KEY_ID))
            counted += int(found or 0)
    return counted


async def _seal_rows(s: AsyncSession, services: Services) -> int:
    vault = services.vault
    count = 0
    # The rows are locked by the write transaction (FOR UPDATE on PostgreSQL; SQLite's BEGIN
    # IMMEDIATE holds the database), so a concurrent rotate cannot be overwritten by a stale copy.
    webhooks = await s.scalars(
        select(Webhook)
        .where(
            (Webhook.secret_key_id == PLAINTEXT_KEY_ID) | (Webhook.previous_secret_key_id == PLAINTEXT_KEY_ID)
        )
        .with_for_update()
    )
    for webhook in webhooks.all():
        # The previous secret is sealed under the same binding as the current one (it is the
        # current one's envelope, kept by a rotation).
        aad = binding("webhooks", "secret", webhook.id)
        if webhook.secret_key_id == PLAINTEXT_KEY_ID and webhook.secret_ciphertext is not None:
            secret = vault.open(webhook.secret_ciphertext, PLAINTEXT_KEY_ID, aad)
            webhook.secret_ciphertext, webhook.secret_key_id = vault.seal(secret, aad)
            count += 1
        if (
            webhook.previous_secret_key_id == PLAINTEXT_KEY_ID
            and webhook.previous_secret_ciphertext is not None
        ):
            secret = vault.open(webhook.previous_secret_ciphertext, PLAINTEXT_KEY_ID, aad)
            webhook.previous_secret_ciphertext, webhook.previous_secret_key_id = vault.seal(secret, aad)
            count += 1
    connections = await s.scalars(
        select(Connection).where(Connection.secret_key_id == PLAINTEXT_KEY_ID).with_for_update()
    )
    for connection in connections.all():
        aad = binding("connections", "secret", connection.id)
        secret = vault.open(connection.secret_ciphertext, PLAINTEXT_KEY_ID, aad)
        connection.secret_ciphertext, connection.secret_key_id = vault.seal(secret, aad)
        count += 1
    await s.flush()
    return count


async def _truncate_wal(services: Services) -> bool:
    """Checkpoint every page into the database file and empty the WAL; True when it was emptied."""
    async with services.db.engine.connect() as conn:
        raw = await conn.get_raw_connection()
        # The driver's own connection: SQLAlchemy would open a transaction around the statement,
        # and a checkpoint cannot truncate the log from inside one.
        driver: Any = raw.driver_connection
        for attempt in range(CHECKPOINT_TRIES):
            cursor = await driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            busy, _, _ = await cursor.fetchone()
            await cursor.close()
            if not busy:
                return True
            if attempt + 1 < CHECKPOINT_TRIES:
                await asyncio.sleep(CHECKPOINT_PAUSE)
    return False


async def reseal(services: Services) -> Resealed:
    """Seal every plaintext-stored secret under the configured key, in one transaction."""
    if not services.vault.has_key:
        raise SwitchboardError(
            "encryption_required",
            "no SWITCHBOARD_SECRET_ENCRYPTION_KEY is configured (run `switchboard keygen` and set it)",
        )
    sqlite = services.db.is_sqlite
    async with services.db.write() as s:
        if sqlite:
            conn = await s.connection()
            # Zero the old cells and freed pages as the rows are rewritten; the pooled connection
            # gets its previous setting back before the transaction ends.
            before = (await conn.exec_driver_sql("PRAGMA secure_delete")).scalar()
            await conn.exec_driver_sql("PRAGMA secure_delete=ON")
        try:
            count = await _seal_rows(s, services)
        finally:
            if sqlite:
                await conn.exec_driver_sql(f"PRAGMA secure_delete={int(before or 0)}")
    truncated = await _truncate_wal(services) if sqlite else None
    if count:
        log.info("sealed %d plaintext-stored secret(s)", count)
    if truncated is False:
        log.warning(
            "the SQLite write-ahead log could not be emptied (another process is reading); the old "
            "plaintext may remain in it until the next full checkpoint: stop the server and run "
            "`switchboard db reseal` again"
        )
    return Resealed(count, truncated)
