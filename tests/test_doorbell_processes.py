"""Two real ``switchboard serve`` processes on one PostgreSQL database (SPEC §2, §5.3).

A delivery ingested by one process rings an agent session held by the other (LISTEN/NOTIFY), and
the background work both run (lease reaper, rings) is never done twice.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from switchboard import tenancy
from switchboard.db import Database
from switchboard.services import Services
from switchboard.testing import Agent, ServeProcesses, connect, engine_name, vend

pytestmark = pytest.mark.skipif(
    engine_name() != "postgresql", reason="several processes share one database only on PostgreSQL"
)


@pytest.fixture
async def two(switchboard_serve: ServeProcesses) -> list[str]:
    """Two healthy servers on the test database; their base URLs."""
    servers = [switchboard_serve.new({"log_level": "WARNING"}, name=name) for name in ("a", "b")]
    for server in servers:
        await server.launch()
    for server in servers:
        await server.ready()
    return [server.base_url for server in servers]


async def _listening(agent: Agent) -> None:
    # The client opens its notification stream right after the handshake; give it a moment to
    # be registered by the other process before anything is sent.
    await asyncio.sleep(0.5)


async def _deliver(services: Services, url: str, slug: str, n: int) -> list[str]:
    hook = await tenancy.create_webhook(
        services.db, services.vault, services.providers, endpoint_slug=slug, source="generic"
    )
    ids = []
    async with aiohttp.ClientSession() as http:
        for i in range(n):
            async with http.post(
                f"{url}/webhooks/{hook.ingest_token}", json={"n": i}, headers={"X-Delivery-Id": f"d{i}"}
            ) as resp:
                assert resp.status == 202, await resp.text()
                ids += [t["id"] for t in (await resp.json())["todos"]]
    return ids


async def test_a_delivery_to_one_process_rings_a_session_on_the_other(
    db: Database, services: Services, two: list[str]
) -> None:
    process_a, process_b = two
    ep, token = await vend(db)
    async with connect(process_b, token, ep) as agent:
        await _listening(agent)
        [todo_id] = await _deliver(services, process_a, ep.slug, 1)
        ring = await agent.listener.next_ring(timeout=3.0)
        assert ring.meta["todo_id"] == todo_id and ring.meta["source"] == "generic"
        assert await agent.listener.silence(1.0)


async def test_two_processes_ring_each_todo_once_and_reap_once(
    db: Database, services: Services, two: list[str]
) -> None:
    process_a, process_b = two
    ep, token = await vend(db)
    async with connect(process_a, token, ep) as on_a, connect(process_b, token, ep) as on_b:
        await _listening(on_a)
        ids = await _deliver(services, process_a, ep.slug, 4)

        async def drain(agent: Agent) -> list[str]:
            heard = []
            while not await _quiet(agent, heard):
                pass
            return heard

        heard_a, heard_b = await asyncio.gather(drain(on_a), drain(on_b))
        # Unicast across processes: every todo rung exactly once, somewhere.
        assert sorted(heard_a + heard_b) == sorted(ids)

        # Both processes run the lease reaper; the expired lease is processed once.
        todo_id = ids[0]
        await on_b.ok("claim", todo_id=todo_id, lease_seconds=1)
        for _ in range(50):
            await asyncio.sleep(0.1)
            detail = await on_a.ok("get_todo", todo_id=todo_id)
            if detail["state"] == "pending":
                break
        assert [a["outcome"] for a in detail["attempts"]] == ["expired"]
        assert detail["attempt"] == 1
        # And it is rung once more, by one process.
        rings = [r for r in await _collect(on_a, 2.5) + await _collect(on_b, 0.1) if r == todo_id]
        assert rings == [todo_id]


async def _quiet(agent: Agent, heard: list[str]) -> bool:
    try:
        ring = await agent.listener.next_ring(timeout=1.5)
    except TimeoutError:
        return True
    heard.append(ring.meta["todo_id"])
    return False


async def _collect(agent: Agent, seconds: float) -> list[str]:
    heard: list[str] = []
    deadline = asyncio.get_running_loop().time() + seconds
    while (left := deadline - asyncio.get_running_loop().time()) > 0:
        try:
            heard.append((await agent.listener.next_ring(timeout=left)).meta["todo_id"])
        except TimeoutError:
            break
    return heard
