"""Reads on the driver directly (``Database.read_steps``) and the bearer lookups built on them
(``switchboard.bearers``): the same rows and objects a session would give, reads only, and a pool
that stays usable after a failed or cancelled read; on whichever engine the run uses."""

from __future__ import annotations

import asyncio
from datetime import UTC, timedelta

import pytest
from sqlalchemy import bindparam, inspect, literal_column, select, text
from sqlalchemy.exc import DBAPIError

from switchboard import bearers, humans, tenancy
from switchboard.db import Database, utcnow
from switchboard.direct import Steps
from switchboard.ids import token_hash
from switchboard.models import Endpoint, Human
from switchboard.owners import add_human, human_by_token
from switchboard.testing import vend


def _columns(obj: object) -> dict[str, object]:
    return {attr.key: attr.value for attr in inspect(obj).attrs}


async def test_an_endpoint_read_directly_is_the_row_a_session_reads(db: Database) -> None:
    endpoint, token = await vend(db, queues=["triage", "ops"], families=["reply"], default_lease_seconds=90)
    async with db.write() as s:
        row = await s.get(Endpoint, endpoint.id)
        assert row is not None
        row.expires_at = utcnow() + timedelta(days=3)
    async with db.read() as s:
        expected = await s.scalar(select(Endpoint).where(Endpoint.id == endpoint.id))
    got = await bearers.endpoint_by_hash(db, token_hash(token))
    assert got is not None and _columns(got) == _columns(expected)
    # The values keep their types: lists from JSON, UTC datetimes, integers.
    assert got.queues == ["triage", "ops"] and "reply" in got.verbs
    assert got.expires_at is not None and got.expires_at.tzinfo is not None
    assert got.expires_at.utcoffset() == UTC.utcoffset(None)
    assert got.default_lease_seconds == 90
    # As a closed session leaves it: detached, nothing pending. Added to a session unchanged it
    # writes nothing; changed, it is updated like any loaded row.
    state = inspect(got)
    assert state.detached and not state.modified
    async with db.write() as s:
        merged = await s.merge(got)
        assert not s.is_modified(merged) and not s.new
        merged.name = "renamed"
    assert (await tenancy.endpoint_by_token(db, token)).name == "renamed"  # type: ignore[union-attr]
    # Unknown tokens and other token kinds name nothing.
    assert await bearers.endpoint_by_hash(db, token_hash("sbk_" + "0" * 40)) is None
    assert await tenancy.endpoint_by_token(db, "sbo_" + token[4:]) is None


async def test_an_operator_token_names_its_human_until_revoked(db: Database) -> None:
    human, token = await add_human(db, "ada", email="ada@example.com")
    found = await human_by_token(db, token)
    assert found is not None and (found.id, found.handle, found.email) == (human.id, "ada", "ada@example.com")
    assert inspect(found).detached and isinstance(found, Human)
    await humans.revoke_token(db, handle="ada")
    assert await human_by_token(db, token) is None
    assert await human_by_token(db, "sbk_" + token[4:]) is None


def _two_reads(marker: str) -> Steps[tuple[int, str]]:
    first = yield select(literal_column("40") + bindparam("n")).select_from(text("humans")).limit(1), {"n": 2}
    second = yield select(bindparam("marker")), {"marker": marker}
    return len(first), second[0][0]


async def test_read_steps_runs_each_statement_and_returns_what_the_steps_return(db: Database) -> None:
    await add_human(db, "ada")
    assert await db.read_steps(_two_reads("x")) == (1, "x")


def _failing() -> Steps[None]:
    yield select(literal_column("1")).select_from(text("no_such_table")), {}


def _sleeping() -> Steps[None]:
    yield select(text("pg_sleep(5)")), {}


async def test_a_failed_or_cancelled_read_leaves_the_pool_usable(db: Database) -> None:
    endpoint, token = await vend(db)
    with pytest.raises(DBAPIError):
        await db.read_steps(_failing())
    if not db.is_sqlite:
        # Cancelled mid-statement (an MCP client that went away): that connection is not reused.
        task = asyncio.create_task(db.read_steps(_sleeping()))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    for _ in range(40):
        found = await bearers.endpoint_by_hash(db, token_hash(token))
        assert found is not None and found.id == endpoint.id


async def test_read_steps_cannot_write(db: Database) -> None:
    if not db.is_sqlite:
        pytest.skip("on PostgreSQL reads share the pool's connections; the read-only guard is SQLite's")

    def write() -> Steps[None]:
        yield Human.__table__.delete(), {}

    await add_human(db, "ada")
    with pytest.raises(DBAPIError, match=r"readonly|read-only|query_only"):
        await db.read_steps(write())
    async with db.read() as s:
        assert len((await s.scalars(select(Human))).all()) == 1
