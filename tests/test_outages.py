"""Every surface while the database is unreachable or refuses writes: a JSON ``unavailable`` (503
over HTTP, a tool error over MCP), never a 500 or a traceback; nothing half-done; the sender's retry
stored once the database is back; a background job that logs the outage once, and its end."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import aiohttp
import pytest
from sqlalchemy import func, select

from switchboard import tenancy
from switchboard.app import Job, run_periodically
from switchboard.db import Database
from switchboard.models import Todo
from switchboard.services import Services
from switchboard.testing import MCP_ACCEPT, MCP_INITIALIZE, add_todo, connect, vend

UNREACHABLE = "postgresql+asyncpg://nobody@127.0.0.1:1/none"


async def test_mcp_answers_503_json_while_the_database_is_unreachable(
    services: Services, base_url: str
) -> None:
    _, token = await vend(services.db)
    real = services.db
    services.db = Database(UNREACHABLE)
    try:
        async with aiohttp.ClientSession() as http:
            headers = {
                "Authorization": f"Bearer {token}",
                "Accept": MCP_ACCEPT,
                "Content-Type": "application/json",
            }
            async with http.post(f"{base_url}/mcp", json=MCP_INITIALIZE, headers=headers) as resp:
                assert resp.status == 503
                assert (await resp.json())["error"] == "unavailable"
    finally:
        await services.db.dispose()
        services.db = real


async def test_ingest_answers_503_json_while_the_database_is_unreachable(
    services: Services, base_url: str
) -> None:
    db = services.db
    await tenancy.add_human(db, "ada")
    await tenancy.vend_endpoint(db, name="ada-agent", owner=await tenancy.resolve_owner(db, human="ada"))
    created = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="ada-agent", source="generic"
    )
    services.db = Database(UNREACHABLE)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base_url}/webhooks/{created.ingest_token}", json={"a": 1}) as resp:
                assert resp.status == 503
                answer = await resp.json()
        assert answer["error"] == "unavailable"
        assert created.ingest_token not in json.dumps(answer)
    finally:
        await services.db.dispose()
        services.db = db
    # The sender's retry, once the database is back, is stored.
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base_url}/webhooks/{created.ingest_token}", json={"a": 1}) as resp:
            assert resp.status == 202 and (await resp.json())["created"] == 1


async def test_a_tool_call_on_a_read_only_database_is_unavailable(
    services: Services, base_url: str, tmp_path: Any
) -> None:
    if services.db.dialect != "sqlite":
        pytest.skip("a read-only SQLite file stands in for a database refusing writes")
    endpoint, token = await vend(services.db)
    todo = await add_todo(services.db, endpoint)
    path = services.db.url.split("///", 1)[1]
    real = services.db
    async with connect(base_url, token, endpoint) as agent:
        services.db = Database(f"sqlite+aiosqlite:///file:{path}?mode=ro&uri=true")
        try:
            error = await agent.error("claim", todo_id=todo.id)
        finally:
            await services.db.dispose()
            services.db = real
        assert error["error"] == "unavailable"
        # Nothing was half-done: the todo can be claimed once the database takes writes again.
        assert (await agent.ok("claim", todo_id=todo.id))["state"] == "claimed"


async def test_a_background_task_logs_a_database_outage_once_without_a_traceback(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    passes: list[str] = []
    down_a_while, up_a_while = asyncio.Event(), asyncio.Event()

    async def pass_(svc: Services) -> None:
        passes.append(svc.db.url)
        if len(passes) >= 5:
            down_a_while.set()
        if len(passes) >= 8:
            up_a_while.set()
        async with svc.db.read() as s:
            await s.execute(select(func.count()).select_from(Todo))

    real = services.db
    services.db = Database(UNREACHABLE)
    caplog.set_level(logging.INFO, logger="switchboard")
    task = asyncio.create_task(run_periodically(Job("qa-probe", 0.01, lambda: pass_(services))))
    try:
        await asyncio.wait_for(down_a_while.wait(), 10)
        await services.db.dispose()
        services.db = real
        await asyncio.wait_for(up_a_while.wait(), 10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if services.db is not real:
            await services.db.dispose()
            services.db = real
    records = [r for r in caplog.records if "qa-probe" in r.getMessage()]
    assert [r.levelname for r in records] == ["WARNING", "INFO"], [r.getMessage() for r in records]
    assert all(r.exc_info is None for r in records)
