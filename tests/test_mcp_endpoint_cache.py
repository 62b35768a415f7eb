"""The endpoint cache behind ``/mcp`` authentication (``switchboard.mcp.endpoint_cache``): lifecycle
tool calls are served from memory, everything else reads the row, and a revocation is obeyed
whether this process made it, heard of it (PostgreSQL ``NOTIFY``) or only finds it on its
revocation pass."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from switchboard import config_changes, tenancy
from switchboard.db import Database, utcnow
from switchboard.mcp import MCP_SERVICE, McpService
from switchboard.mcp.endpoint_cache import EndpointCache
from switchboard.mcp.tool_calls import parse
from switchboard.models import Endpoint
from switchboard.testing import ServeProcesses, add_todo, engine_name, vend

VERSION = "2025-11-25"
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "qa", "version": "1"}},
}


def _call(name: str, **arguments: Any) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    ).encode()


@dataclass
class Session:
    """One stateful session spoken to in raw HTTP, so a 401 is seen as it is."""

    http: aiohttp.ClientSession
    url: str
    headers: dict[str, str]

    async def call(self, name: str, **arguments: Any) -> tuple[int, dict[str, Any]]:
        """(HTTP status, the tool's structured answer, or the refusal's body)."""
        async with self.http.post(self.url, data=_call(name, **arguments), headers=self.headers) as resp:
            body = await resp.json()
        return resp.status, body["result"]["structuredContent"] if resp.status == 200 else body


@asynccontextmanager
async def session(base_url: str, token: str) -> AsyncIterator[Session]:
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base_url}/mcp", json=INIT, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            headers = {**headers, "Mcp-Session-Id": resp.headers["Mcp-Session-Id"]}
            headers["MCP-Protocol-Version"] = VERSION
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with http.post(f"{base_url}/mcp", json=initialized, headers=headers) as resp:
            assert resp.status == 202
        yield Session(http, f"{base_url}/mcp", headers)


def _service(server: TestServer) -> McpService:
    return server.app[MCP_SERVICE]


async def _eventually_refused(agent: Session, seconds: float = 10.0) -> None:
    """A lifecycle call is answered 401 within ``seconds`` (and nothing is claimed meanwhile)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        status, body = await agent.call("claim_next")
        if status == 401:
            assert body["error"] == "unauthorized"
            return
        assert (status, body) == (200, {"empty": True})
        assert asyncio.get_running_loop().time() < deadline, "the revocation was never obeyed"
        await asyncio.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# What may be served from memory


@pytest.mark.parametrize(
    ("method", "body", "expected"),
    [
        ("POST", _call("claim_next"), True),
        ("POST", _call("complete", todo_id="td_1", result={"ok": True}), True),
        ("POST", _call("release", todo_id="td_1"), True),
        ("POST", _call("list_todos"), False),
        ("POST", _call("get_todo", todo_id="td_1"), False),
        ("POST", _call("reply", todo_id="td_1", text="hi"), False),
        ("POST", _call("create_connection", kind="x"), False),
        ("POST", json.dumps(INIT).encode(), False),
        ("POST", b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}', False),
        ("POST", b"[" + _call("claim_next") + b"]", False),
        ("POST", b'{"method": "tools/call", "params": "claim_next"}', False),
        ("POST", b"not json", False),
        ("POST", b"\xff\xfe", False),
        ("POST", _call("complete", todo_id="td_1", result="x" * 70_000), False),
        ("GET", _call("claim_next"), False),
        ("DELETE", b"", False),
    ],
)
def test_only_a_lifecycle_tool_call_may_be_served_from_memory(
    method: str, body: bytes, expected: bool
) -> None:
    call = parse(method, body)
    assert (call is not None and call.lifecycle) is expected


async def test_a_kept_endpoint_is_read_once_and_refused_once_it_expires(db: Database) -> None:
    ep, token = await vend(db)
    cache = EndpointCache()
    first = await cache.endpoint(db, token, cached=True)
    assert first is not None and first.id == ep.id and cache.reads == 1
    again = await cache.endpoint(db, token, cached=True)
    assert again is not None and again.id == ep.id and (cache.reads, cache.hits) == (1, 1)
    # Not a lifecycle call: the row is read every time.
    assert await cache.endpoint(db, token, cached=False) is not None and cache.reads == 2
    # Expiry is judged at the call, from the kept row and the clock.
    async with db.write() as s:
        row = await s.get(Endpoint, ep.id)
        assert row is not None
        row.expires_at = utcnow() + timedelta(hours=1)
    assert await cache.endpoint(db, token, cached=False) is not None
    assert await cache.endpoint(db, token, cached=True, now=utcnow() + timedelta(hours=2)) is None
    assert await cache.endpoint(db, "sbk_unknown", cached=True) is None
    assert await cache.endpoint(db, "not-a-token", cached=True) is None


async def test_a_change_heard_empties_the_cache_and_dead_endpoints_are_not_kept(db: Database) -> None:
    ep, token = await vend(db)
    cache = EndpointCache()
    await cache.endpoint(db, token, cached=True)
    assert cache.endpoint_ids() == {ep.id}
    config_changes.changed()
    assert cache.endpoint_ids() == set()
    await cache.endpoint(db, token, cached=True)
    assert cache.reads == 2
    cache.forget([ep.id])
    assert cache.endpoint_ids() == set()
    await tenancy.revoke_endpoint(db, ep.slug)
    assert await cache.endpoint(db, token, cached=True) is None
    assert cache.endpoint_ids() == set()


async def test_a_lifecycle_loop_over_mcp_reads_the_endpoint_once(
    db: Database, server: TestServer, base_url: str
) -> None:
    ep, token = await vend(db)
    for _ in range(3):
        await add_todo(db, ep)
    cache = _service(server).endpoints
    async with session(base_url, token) as agent:
        status, _ = await agent.call("list_todos")
        assert status == 200
        reads = cache.reads
        for _ in range(3):
            status, got = await agent.call("claim_next")
            assert status == 200
            status, done = await agent.call("complete", todo_id=got["todo"]["id"])
            assert status == 200 and done["state"] == "done"
        assert cache.reads == reads and cache.hits >= 6
        status, _ = await agent.call("list_todos")
        assert status == 200 and cache.reads == reads + 1


# ---------------------------------------------------------------------------------------------
# Revocation


async def test_a_revocation_in_this_process_refuses_the_very_next_lifecycle_call(
    db: Database, server: TestServer, base_url: str
) -> None:
    ep, token = await vend(db)
    todo = await add_todo(db, ep)
    async with session(base_url, token) as agent:
        status, got = await agent.call("claim_next")
        assert status == 200 and got["todo"]["id"] == todo.id
        await tenancy.revoke_endpoint(db, ep.slug)
        status, body = await agent.call("complete", todo_id=todo.id)
        assert status == 401 and body["error"] == "unauthorized"


async def test_a_revocation_nobody_told_this_process_of_acts_on_nothing_and_is_found_by_the_pass(
    db: Database, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the CLI on SQLite, or a notification not yet delivered: the kept row still says live."""
    ep, token = await vend(db)
    held, waiting = await add_todo(db, ep), await add_todo(db, ep)
    async with session(base_url, token) as agent:
        status, got = await agent.call("claim", todo_id=held.id)
        assert status == 200 and got["state"] == "claimed"
        with monkeypatch.context() as quiet:
            # Neither this process's own signal nor a NOTIFY (heard() calls changed()) gets through.
            quiet.setattr(config_changes, "changed", lambda: None)
            await tenancy.revoke_endpoint(db, ep.slug)
            # The revocation dead-lettered every open todo: whatever the kept row says, a
            # lifecycle call finds nothing to claim and cannot finish what was held.
            status, body = await agent.call("claim_next")
            assert status == 401 or body == {"empty": True}
            status, body = await agent.call("complete", todo_id=held.id)
            assert status == 401 or body["error"] == "conflict"
            status, body = await agent.call("claim", todo_id=waiting.id)
            assert status == 401 or body["error"] == "conflict"
            # Every other call reads the row: refused at once.
            status, body = await agent.call("list_todos")
            assert status == 401 and body["error"] == "unauthorized"
            # The revocation pass (every second) re-reads the kept endpoints.
            await _eventually_refused(agent)
            assert ep.id not in _service(server).endpoints.endpoint_ids()


@pytest.mark.skipif(engine_name() != "postgresql", reason="NOTIFY reaches other processes on PostgreSQL")
async def test_a_revocation_in_another_process_is_heard_on_postgresql(
    db: Database,
    server: TestServer,
    base_url: str,
    switchboard_serve: ServeProcesses,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ep, token = await vend(db)
    await add_todo(db, ep)
    service = _service(server)

    async def no_pass() -> int:
        return 0

    # Without the revocation pass, only the notification can tell this process.
    monkeypatch.setattr(service, "sweep_revoked", no_pass)
    async with session(base_url, token) as agent:
        status, got = await agent.call("claim_next")
        assert status == 200 and "todo" in got
        status, got = await agent.call("claim_next")
        assert (status, got) == (200, {"empty": True})
        hits = service.endpoints.hits
        status, _ = await agent.call("claim_next")
        assert status == 200 and service.endpoints.hits == hits + 1
        # The operator's CLI, another process: it commits and NOTIFYs, nothing else.
        revoked = await switchboard_serve.new(name="cli").cli("endpoint", "revoke", ep.slug)
        assert revoked["endpoint"]["state"] == "revoked"
        await _eventually_refused(agent)
        assert ep.id not in service.endpoints.endpoint_ids()
