"""Tenant fairness (issue 13, item 1): MCP session limits per owner scope, a process limit that
takes from the largest holder, and the per-owner endpoint quota on every surface.

The limits are set small for these tests (settings), so a "flood" is a handful of sessions.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner
from mcp.server.streamable_http import StreamableHTTPServerTransport

from switchboard import tenancy
from switchboard.cli import main
from switchboard.db import Database
from switchboard.errors import SwitchboardError
from switchboard.mcp.doorbell import Doorbell
from switchboard.mcp.sessions import HeldSession, to_evict
from switchboard.models import Endpoint
from switchboard.services import Services

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "flood", "version": "1"},
    },
}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
PER_OWNER = 3
TOTAL = 5
ENDPOINTS = 3


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {
        "max_sessions_per_owner": PER_OWNER,
        "max_sessions": TOTAL,
        "max_endpoints_per_owner": ENDPOINTS,
    }


# ---------------------------------------------------------------------------------------------
# The choice of sessions to close (pure)


def _held(
    endpoint: str, owner: str, last_active: float, *, busy: int = 0, stream: bool = False
) -> HeldSession:
    session = HeldSession(
        id=f"{owner}-{endpoint}-{last_active}",
        endpoint_id=endpoint,
        queues=("default",),
        transport=StreamableHTTPServerTransport(mcp_session_id=None),
        owner_id=owner,
        busy=busy,
        last_active=last_active,
    )
    session.stream_open = stream
    return session


def test_an_owner_at_its_limit_loses_its_least_recently_used_idle_session_on_any_endpoint() -> None:
    a1 = _held("ep-a1", "A", 1.0, stream=True)  # oldest, but listening: not idle
    a2 = _held("ep-a2", "A", 2.0)
    a3 = _held("ep-a3", "A", 3.0)
    b1 = _held("ep-b1", "B", 0.5)
    chosen = to_evict([a1, a2, a3, b1], "ep-a4", "A", per_endpoint=64, per_owner=3, total=100)
    assert chosen == [(a2, "owner")]
    # With none idle, the least recently used goes all the same: an owner never locks itself out.
    busy = [_held("ep-a1", "A", 1.0, busy=1), _held("ep-a2", "A", 2.0, stream=True)]
    assert to_evict(busy, "ep-a1", "A", per_endpoint=64, per_owner=2, total=100) == [(busy[0], "owner")]


def test_the_process_limit_takes_from_the_largest_holder_never_the_newcomer() -> None:
    flood = [_held(f"ep-a{i}", "A", float(i)) for i in range(4)]
    b1 = _held("ep-b1", "B", 0.1)
    chosen = to_evict([*flood, b1], "ep-c1", "C", per_endpoint=64, per_owner=10, total=5)
    assert chosen == [(flood[0], "process")]
    # A limit lowered below what is held evicts down to it, still from the largest holder.
    chosen = to_evict([*flood, b1], "ep-b1", "B", per_endpoint=64, per_owner=10, total=3)
    assert [(s.owner_id, why) for s, why in chosen] == [("A", "process"), ("A", "process"), ("A", "process")]


def test_the_endpoint_limit_comes_first_and_nothing_is_evicted_below_every_limit() -> None:
    same = [_held("ep-a1", "A", 2.0), _held("ep-a1", "A", 1.0), _held("ep-a2", "A", 0.5)]
    assert to_evict(same, "ep-a1", "A", per_endpoint=2, per_owner=10, total=100) == [(same[1], "endpoint")]
    assert to_evict(same, "ep-b1", "B", per_endpoint=2, per_owner=10, total=100) == []


# ---------------------------------------------------------------------------------------------
# Over real /mcp


async def _open(http: aiohttp.ClientSession, base_url: str, token: str) -> str:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    async with http.post(f"{base_url}/mcp", json=INIT, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        return resp.headers["Mcp-Session-Id"]


async def _alive(http: aiohttp.ClientSession, base_url: str, token: str, session_id: str) -> bool:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}", "Mcp-Session-Id": session_id}
    async with http.post(f"{base_url}/mcp", json=LIST_TOOLS, headers=headers) as resp:
        assert resp.status in (200, 404), await resp.text()
        return resp.status == 200


async def _human_with_endpoints(db: Database, handle: str, n: int) -> list[tuple[Endpoint, str]]:
    human, _ = await tenancy.add_human(db, handle)
    owner = tenancy.Owner(human_id=human.id)
    return [await tenancy.vend_endpoint(db, name=f"{handle} agent {i}", owner=owner) for i in range(n)]


async def test_one_tenants_flood_evicts_its_own_sessions_and_never_refuses_another_tenant(
    db: Database, services: Services, base_url: str, bell: Doorbell
) -> None:
    held = bell.sessions
    flooders = await _human_with_endpoints(db, "flooder", ENDPOINTS)
    async with aiohttp.ClientSession() as http:
        # Tenant A opens two sessions on each of its three endpoints: twice its limit.
        opened = [(token, await _open(http, base_url, token)) for _ in range(2) for _, token in flooders]
        assert len(held) == PER_OWNER
        alive = [await _alive(http, base_url, token, sid) for token, sid in opened]
        # Its oldest sessions made room (across its endpoints); its newest still work.
        assert alive == [False, False, False, True, True, True]

        # Tenant B's first session is accepted, and costs A nothing while the process has room.
        (_, b_token), *_ = await _human_with_endpoints(db, "bystander", 1)
        b_session = await _open(http, base_url, b_token)
        (_, c_token), *_ = await _human_with_endpoints(db, "third", 1)
        c_session = await _open(http, base_url, c_token)
        assert len(held) == TOTAL

        # The process is full: a fourth tenant still gets in; the largest holder (A) pays.
        (_, d_token), *_ = await _human_with_endpoints(db, "fourth", 1)
        d_session = await _open(http, base_url, d_token)
        assert len(held) == TOTAL
        for token, sid in ((b_token, b_session), (c_token, c_session), (d_token, d_session)):
            assert await _alive(http, base_url, token, sid)
        assert [await _alive(http, base_url, t, s) for t, s in opened[3:]] == [False, True, True]
    evicted = services.metrics.value
    assert evicted("switchboard_mcp_sessions_evicted_total", limit="owner") == 3
    assert evicted("switchboard_mcp_sessions_evicted_total", limit="process") == 1


async def test_the_least_recently_used_session_goes_first_not_the_oldest(db: Database, base_url: str) -> None:
    (_, token), *_ = await _human_with_endpoints(db, "reuser", 1)
    async with aiohttp.ClientSession() as http:
        first = await _open(http, base_url, token)
        second = await _open(http, base_url, token)
        third = await _open(http, base_url, token)
        await asyncio.sleep(0.01)  # monotonic clocks can be coarse
        assert await _alive(http, base_url, token, first)  # the oldest, but just used
        await _open(http, base_url, token)
        assert not await _alive(http, base_url, token, second)
        assert await _alive(http, base_url, token, first) and await _alive(http, base_url, token, third)


# ---------------------------------------------------------------------------------------------
# The endpoint quota


async def test_the_endpoint_quota_counts_live_endpoints_of_the_owner_scope(db: Database) -> None:
    endpoints = await _human_with_endpoints(db, "ada", ENDPOINTS)
    owner = tenancy.Owner.of(endpoints[0][0])
    with pytest.raises(SwitchboardError) as refused:
        await tenancy.vend_endpoint(db, name="one too many", owner=owner, max_per_owner=ENDPOINTS)
    assert refused.value.code == "conflict" and refused.value.http_status == 409
    assert refused.value.extra == {"quota": "endpoints_per_owner", "limit": ENDPOINTS}
    assert "SWITCHBOARD_MAX_ENDPOINTS_PER_OWNER" in refused.value.message
    # Another owner scope is not affected; a revoked endpoint frees its place.
    await _human_with_endpoints(db, "bea", 1)
    await tenancy.revoke_endpoint(db, endpoints[0][0].slug)
    await tenancy.vend_endpoint(db, name="replacement", owner=owner, max_per_owner=ENDPOINTS)
    # A team is an owner scope of its own.
    team = await tenancy.add_team(db, "ops", "ada")
    team_owner = tenancy.Owner(team_id=team.id)
    for i in range(ENDPOINTS):
        await tenancy.vend_endpoint(db, name=f"ops {i}", owner=team_owner, max_per_owner=ENDPOINTS)
    with pytest.raises(SwitchboardError):
        await tenancy.vend_endpoint(db, name="ops more", owner=team_owner, max_per_owner=ENDPOINTS)


async def test_the_api_refuses_a_vend_over_the_quota_with_409_conflict(db: Database, base_url: str) -> None:
    _, token = await tenancy.add_human(db, "ada")
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        for i in range(ENDPOINTS + 1):
            async with http.post(
                f"{base_url}/api/v1/endpoints", json={"name": f"agent {i}"}, headers=headers
            ) as resp:
                body = await resp.json()
        assert resp.status == 409, body
        assert body["error"] == "conflict" and body["quota"] == "endpoints_per_owner"
        assert body["limit"] == ENDPOINTS and "revoke one" in body["message"]


async def test_the_web_ui_shows_the_quota_refusal(db: Database, base_url: str) -> None:
    human, token = await tenancy.add_human(db, "ada")
    for i in range(ENDPOINTS):
        await tenancy.vend_endpoint(db, name=f"agent {i}", owner=tenancy.Owner(human_id=human.id))
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(f"{base_url}/ui/login") as resp:
            csrf = CSRF_RE.search(await resp.text())
        assert csrf is not None
        async with http.post(
            f"{base_url}/ui/login", data={"csrf": csrf.group(1), "token": token}, allow_redirects=False
        ) as resp:
            assert resp.status == 303
        async with http.get(f"{base_url}/ui/endpoints") as resp:
            csrf = CSRF_RE.search(await resp.text())
        assert csrf is not None
        async with http.post(
            f"{base_url}/ui/endpoints",
            data={"csrf": csrf.group(1), "name": "one too many", "owner": "me"},
            allow_redirects=False,
        ) as resp:
            page = await resp.text()
    assert resp.status == 409
    assert "may hold at most 3" in page and "revoke one first" in page


@pytest.fixture
def cli_env(database_url: str) -> dict[str, str]:
    return {
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_MAX_ENDPOINTS_PER_OWNER": "1",
    }


def test_the_cli_refuses_a_vend_over_the_quota_in_one_line(cli_env: dict[str, str]) -> None:
    runner = CliRunner(env=cli_env)
    assert runner.invoke(main, ["human", "add", "ada"], catch_exceptions=False).exit_code == 0
    first = runner.invoke(main, ["endpoint", "vend", "--name", "one", "--owner", "ada", "--json"])
    assert first.exit_code == 0 and json.loads(first.stdout)["endpoint"]["slug"] == "one"
    second = runner.invoke(main, ["endpoint", "vend", "--name", "two", "--owner", "ada"])
    assert second.exit_code == 1 and second.stdout == ""
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: conflict: "), second.stderr
    assert "may hold at most 1 (SWITCHBOARD_MAX_ENDPOINTS_PER_OWNER)" in lines[0]


async def test_a_bad_limit_fails_at_startup_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from switchboard.settings import ConfigError, load_settings

    for name in ("MAX_SESSIONS_PER_OWNER", "MAX_SESSIONS", "MAX_ENDPOINTS_PER_OWNER"):
        monkeypatch.setenv(f"SWITCHBOARD_{name}", "0")
        with pytest.raises(ConfigError, match=f"SWITCHBOARD_{name}"):
            load_settings()
        monkeypatch.delenv(f"SWITCHBOARD_{name}")
    defaults = load_settings()
    assert (defaults.max_sessions_per_owner, defaults.max_sessions, defaults.max_endpoints_per_owner) == (
        256,
        10_000,
        100,
    )
