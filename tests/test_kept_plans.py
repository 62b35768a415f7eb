"""Statements PostgreSQL may keep a plan for stay index lookups as the tables grow (issue 12).

Completes, replies and ingest's group commit run on the connections where PostgreSQL keeps a
generic plan (``Database.run_postgresql(generic_plans=True)``). A generic plan is costed without the
call's values, on the statistics of when it was made: made while the tables were small, it may be a
sequential scan or a hash join over a whole table, and it is kept as the table grows until the
next ANALYZE. Measured on a complete whose plan was kept at 50 todos: 0.7 ms then, 189 ms per
complete once 300,000 finished todos and their attempts had been added (autovacuum held off), and
0.6 ms with the settings these tests check. So those connections rule out sequential scans and
hash and merge joins (``KEYED_PLAN_SETTINGS``): each of their statements finds its rows by key.
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

from switchboard import connections, reply, todos
from switchboard.db import Database, PostgreSQLRun
from switchboard.engines import KEYED_PLAN_SETTINGS
from switchboard.services import Services
from switchboard.testing import (
    FakeProvider,
    claimed_todo,
    forge_address,
    github_headers,
    human_and_endpoint,
    make_webhook,
    post,
)

# Plan nodes a kept plan must not hold: each reads a whole table (or its whole index) whatever the
# statement's keys.
WHOLE_TABLE = {"Seq Scan", "Hash Join", "Merge Join"}


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
    """Every node of a JSON plan, e.g. ``Seq Scan on attempts``."""
    here = plan["Node Type"] + (f" on {plan['Relation Name']}" if "Relation Name" in plan else "")
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
    # The claims' connections plan every call (their pick depends on the data) and keep the defaults.
    assert set((await db.run_postgresql(settings)).values()) == {"on"}


async def test_kept_plans_of_ingest_replies_and_completes_find_rows_by_key(
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

    # A signed GitHub comment delivery (the group commit), a reply and a complete.
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    body = fixture_bytes("github/issue_comment/created.payload.json")
    status, answer, _ = await post(base_url, token, body, github_headers(secret, body, "issue_comment"))
    assert status == 202 and answer["todos"], answer
    owner, endpoint = await human_and_endpoint(db)
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

    url = database_url.replace("postgresql+asyncpg://", "postgresql://")
    plans = await _generic_plans(url, kept, KEYED_PLAN_SETTINGS)
    whole = {sql[:80]: [n for n in nodes if _kind(n) in WHOLE_TABLE] for sql, nodes in plans.items()}
    assert {sql: found for sql, found in whole.items() if found} == {}
    # Without the settings, the same statements on these (small) tables do get such plans: the
    # hazard the settings remove, and what makes this test able to fail.
    defaults = await _generic_plans(url, kept, {})
    assert any(_kind(n) in WHOLE_TABLE for nodes in defaults.values() for n in nodes)
