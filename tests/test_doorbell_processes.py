"""Two real ``switchboard serve`` processes on one PostgreSQL database (SPEC §2, §5.3).

A delivery ingested by one process rings an agent session held by the other (LISTEN/NOTIFY), and
the background work both run (lease reaper, rings) is never done twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from switchboard import tenancy
from switchboard.db import Database
from switchboard.services import Services
from tests.conftest import TEST_ENCRYPTION_KEY, engine_name
from tests.mcp_client import Agent, connect, vend

pytestmark = pytest.mark.skipif(
    engine_name() != "postgresql", reason="several processes share one database only on PostgreSQL"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def processes(database_url: str, tmp_path: Path) -> Iterator[list[str]]:
    """Two servers on the test database; yields their base URLs."""
    procs: list[subprocess.Popen[bytes]] = []
    urls = []
    for name in ("a", "b"):
        port = _free_port()
        env = {
            **os.environ,
            "SWITCHBOARD_DATABASE_URL": database_url,
            "SWITCHBOARD_HOST": "127.0.0.1",
            "SWITCHBOARD_PORT": str(port),
            "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY,
            "SWITCHBOARD_BASE_URL": f"http://127.0.0.1:{port}",
            "SWITCHBOARD_LOG_LEVEL": "WARNING",
        }
        log = (tmp_path / f"{name}.log").open("wb")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "switchboard", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        yield urls
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _ready(urls: list[str]) -> None:
    async with aiohttp.ClientSession() as http:
        for url in urls:
            for _ in range(200):
                try:
                    async with http.get(f"{url}/healthz") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"{url} never became healthy")


async def _listening(agent: Agent) -> None:
    # The client opens its notification stream right after the handshake; give it a moment to
    # be registered by the other process before anything is sent.
    await asyncio.sleep(0.5)


@pytest.fixture
async def two(processes: list[str]) -> AsyncIterator[list[str]]:
    await _ready(processes)
    yield processes


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
