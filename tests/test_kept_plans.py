"""Statements PostgreSQL may keep a plan for stay index lookups as the tables grow (issue 12).

Claims, completes, replies and ingest's group commit run on the connections where PostgreSQL keeps
a generic plan (``Database.run_postgresql(generic_plans=True)``). A generic plan is costed without
the call's values, on the statistics of when it was made: made while the tables were small, it may
be a sequential scan or a hash join over a whole table, and it is kept as the table grows until the
next ANALYZE. Measured on a complete whose plan was kept at 50 todos: 0.7 ms then, 189 ms per
complete once 300,000 finished todos and their attempts had been added (autovacuum held off), and
0.6 ms with the settings these tests check. So those connections rule out sequential scans and
hash and merge joins (``KEYED_PLAN_SETTINGS``). Made before a table had any statistics, a claim's
plan walked a whole pending-only index instead (320 ms a claim at 300,000 pending), which no
setting rules out: the statements are written so that none can (migration 0011), and these tests
refuse an index scan without an index condition too.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import asyncpg
import pytest
from fixtures.ingest_kit import fixture_bytes
from sqlalchemy import func, select

from switchboard import connections, reply, tenancy, todos
from switchboard.db import Database, PostgreSQLRun
from switchboard.engines import KEYED_PLAN_SETTINGS
from switchboard.services import Services
from switchboard.testing import (
    FakeProvider,
    add_todo,
    claimed_todo,
    forge_address,
    github_headers,
    human_and_endpoint,
    make_webhook,
    post,
)
from switchboard.todos.create import new_todo_row
from switchboard.todos.statements import claimable_postgresql

# Plan nodes a kept plan must not hold: each reads a whole table (or its whole index) whatever the
# statement's keys.
WHOLE_TABLE = {"Seq Scan", "Hash Join", "Merge Join"}
# An index walked from end to end reads as much as the rows it covers: a pending-only index as much
# as the backlog. A claim's plan kept before the todos table had statistics walked the doorbell's
# small ``ix_todos_ring`` whole: 320 ms a claim once 300,000 were pending (migration 0011).
INDEX_SCANS = {"Index Scan", "Index Only Scan", "Bitmap Index Scan"}
WHOLE_INDEX = " without a condition"


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    """The GitHub API base points at the stand-in."""
    return fake_api_settings


def _text(value: Any) -> str:
    """``value`` as PostgreSQL's text input of a parameter (arrays as array literals)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        quoted = ('"' + _text(v).replace("\\", "\\\\").replace('"', '\\"') + '"' for v in value)
        return "{" + ",".join("NULL" if v is None else q for v, q in zip(value, quoted, strict=True)) + "}"
    return str(value)


def _literal(value: Any) -> str:
    return "NULL" if value is None else "'" + _text(value).replace("'", "''") + "'"


def _kind(node: str) -> str:
    return node.split(" on ")[0]


def _nodes(plan: dict[str, Any]) -> list[str]:
    """Every node of a JSON plan, e.g. ``Seq Scan on attempts``; an index scan with no index
    condition (a walk of the whole index) as ``Index Scan without a condition on todos``."""
    kind = plan["Node Type"]
    if kind in INDEX_SCANS and "Index Cond" not in plan:
        kind += WHOLE_INDEX
    here = kind + (f" on {plan['Relation Name']}" if "Relation Name" in plan else "")
    return [here, *(node for child in plan.get("Plans", []) for node in _nodes(child))]


async def _generic_plans(
    url: str, statements: dict[str, list[Any]], settings: dict[str, str]
) -> dict[str, list[str]]:
    """The generic plan PostgreSQL makes for each statement (``PREPARE`` + ``EXPLAIN EXECUTE`` under
    ``plan_cache_mode=force_generic_plan``) on a connection with ``settings``."""
    conn = await asyncpg.connect(url, server_settings={**settings, "plan_cache_mode": "force_generic_plan"})
    plans: dict[str, list[str]] = {}
    try:
        for n, (sql, args) in enumerate(statements.items()):
            await conn.execute(f"PREPARE kept_{n} AS {sql}")
            values = ", ".join(_literal(arg) for arg in args)
            explained = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE kept_{n}({values})")
            plans[sql] = _nodes(json.loads(explained)[0]["Plan"])
    finally:
        await conn.close()
    return plans


def _record_kept(db: Database, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """The statements (SQL → one call's arguments) run where PostgreSQL may keep their plans."""
    kept: dict[str, list[Any]] = {}
    real: Callable[..., Awaitable[Any]] = db.run_postgresql

    async def recording(work: Any, *, transaction: bool = False, generic_plans: bool = False) -> Any:
        if not generic_plans:
            return await real(work, transaction=transaction)

        def tap(sql: str, args: Any) -> None:
            kept.setdefault(sql, list(args))

        db.statement_taps.append(tap)
        try:
            return await real(work, transaction=transaction, generic_plans=True)
        finally:
            db.statement_taps.remove(tap)

    monkeypatch.setattr(db, "run_postgresql", recording)
    return kept


async def test_connections_that_keep_plans_rule_out_whole_table_plans(db: Database) -> None:
    if db.is_sqlite:
        pytest.skip("PostgreSQL's plan cache")
    names = list(KEYED_PLAN_SETTINGS)
    shown = select(*(func.current_setting(name).label(name) for name in names))

    async def settings(run: PostgreSQLRun) -> dict[str, str]:
        [row] = await run(shown, {})
        return {name: str(getattr(row, name)) for name in names}

    assert await db.run_postgresql(settings, generic_plans=True) == KEYED_PLAN_SETTINGS
    # The other connections plan every call and keep the defaults.
    assert set((await db.run_postgresql(settings)).values()) == {"on"}


async def test_kept_plans_of_ingest_claims_replies_and_completes_walk_indexes_by_key(
    services: Services,
    db: Database,
    base_url: str,
    guarded: Any,
    fake_github: FakeProvider,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if db.is_sqlite:
        pytest.skip("PostgreSQL's plan cache")
    kept = _record_kept(db, monkeypatch)

    # A signed GitHub comment delivery (the group commit), claims, a reply and a complete. The
    # tables are new: the plans below are made without statistics, as in a new database before
    # autovacuum's first pass, or one just restored.
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    body = fixture_bytes("github/issue_comment/created.payload.json")
    status, answer, _ = await post(base_url, token, body, github_headers(secret, body, "issue_comment"))
    assert status == 202 and answer["todos"], answer
    owner, endpoint = await human_and_endpoint(db)
    # Claims of one queue and of several (their statements differ), one todo and a batch, over a
    # backlog of 200 with no statistics: a plan kept then for a pending-only index's whole walk is
    # kept as the backlog grows.
    async with db.write() as s:
        s.add_all(
            new_todo_row(
                endpoint_id=endpoint.id,
                queue="default",
                source="manual",
                kind="manual",
                title=f"t{n}",
                payload={},
            )
            for n in range(200)
        )
    assert (await todos.claim_next(db, endpoint)) is not None
    assert "todos" in await todos.claim_next(db, endpoint, max=5)
    both, _ = await tenancy.vend_endpoint(db, name="two-queues", owner=owner, queues=["default", "triage"])
    await add_todo(db, both, title="second", queue="triage")
    assert (await todos.claim_next(db, both)) is not None
    # The lock-free look an empty claim takes (``batching.claim_rows``), of one queue and of two.
    assert await claimable_postgresql(db, endpoint_id=endpoint.id, queues=["default"])
    assert not await claimable_postgresql(db, endpoint_id=both.id, queues=["default", "triage"])
    await connections.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret="github-test-credential-Kp2Wq8"
    )
    todo = await claimed_todo(db, endpoint, forge_address("github", "github.com"))
    assert (await reply.send_reply(services, endpoint, todo.id, "Fixed."))["state"] == "sent"
    assert (await todos.complete(db, endpoint, todo.id))["state"] == "done"
    assert len(fake_github.posts()) == 1
    # The group commit's one statement: the versions, then the events and the todos inserted.
    assert any(sql.lstrip().startswith("WITH versions AS") and "INSERT INTO events" in sql for sql in kept)
    assert any("INSERT INTO REPLIES" in sql.upper() for sql in kept)
    assert any(sql.lstrip().startswith("WITH finished AS") for sql in kept)
    claims = [sql for sql in kept if sql.lstrip().startswith("WITH picked AS")]
    assert len(claims) == 2, claims
    looks = [sql for sql in kept if sql.lstrip().startswith("SELECT todos.id, todos.created_at")]
    assert len(looks) == 2, looks

    url = database_url.replace("postgresql+asyncpg://", "postgresql://")
    plans = await _generic_plans(url, kept, KEYED_PLAN_SETTINGS)
    whole = {
        sql[:80]: [n for n in nodes if _kind(n) in WHOLE_TABLE or WHOLE_INDEX in n]
        for sql, nodes in plans.items()
    }
    assert {sql: found for sql, found in whole.items() if found} == {}
    # Without the settings, the same statements on these (small) tables do get such plans: the
    # hazard the settings remove, and what makes this test able to fail.
    defaults = await _generic_plans(url, kept, {})
    assert any(_kind(n) in WHOLE_TABLE for nodes in defaults.values() for n in nodes)
