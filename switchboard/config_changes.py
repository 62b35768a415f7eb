"""Telling ingest that the configuration it serves from has changed: webhooks, routes, endpoints.

Ingest keeps, per process, the webhook an ingest token names with its owner endpoint and its routes
(``ingest_config``), so a delivery costs no read before it is stored. Every write to those tables
goes through ``changing`` (the ``tenancy`` functions the API, the UI and the CLI call), which

* in this process, moves ``generation()`` on once the change has committed, so the next delivery
  reads the configuration again;
* on PostgreSQL, sends ``NOTIFY switchboard_config`` in the same transaction (delivered at commit),
  which every serving process hears on its ``LISTEN`` connection and handles the same way.

These signals keep the cache fresh; they are not what makes ingest correct. The group-commit writer
compares each delivery's configuration with the rows it reads (and on PostgreSQL share-locks) in its
own transaction, so a change made anywhere (another process, the CLI on SQLite, a lost
notification) is caught before anything is stored (see ``ingest_config``).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from switchboard.db import Database

# The PostgreSQL channel the serving processes LISTEN on. The payload names the process that made
# the change, which has already emptied its own cache and ignores its own notification.
CHANNEL = "switchboard_config"
ORIGIN = secrets.token_hex(8)

_generation = 0


def generation() -> int:
    """A number that moves on whenever this process learns of a configuration change."""
    return _generation


def changed() -> None:
    """Note a change (made here and committed, or heard of from another process)."""
    global _generation
    _generation += 1


def heard(payload: str) -> None:
    """A notification on ``CHANNEL``: a change made by another process."""
    if payload != ORIGIN:
        changed()


@asynccontextmanager
async def changing(db: Database) -> AsyncIterator[AsyncSession]:
    """``db.write()`` for a change to webhooks, routes or endpoints: the other processes are told
    at commit (PostgreSQL), this one right after it. A transaction that fails tells no one."""
    async with db.write() as session:
        yield session
        if not db.is_sqlite:
            await session.execute(
                text("SELECT pg_notify(:channel, :origin)"), {"channel": CHANNEL, "origin": ORIGIN}
            )
    changed()
