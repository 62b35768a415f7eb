"""A database crash answers 503, never 500 (issue 13, item 14).

A real ``switchboard serve`` on a PRIVATE PostgreSQL cluster (``initdb`` and the postmaster on a free
port in a temporary directory, run as the ``postgres`` user: ``bench/pgcluster.py``; never the
machine's shared server) takes signed GitHub deliveries from concurrent senders that re-send until
acknowledged, as GitHub does. The cluster is stopped three times under that load (``pg_ctl stop
-m immediate``; SIGKILL of the postmaster and every backend; ``pg_ctl stop -m fast``) and restarted,
which walks the server through every outage state: refused connections, "the database system is
starting up / shutting down", connections dropped mid-statement. While it is down, an MCP tool call
and an API call are answered ``unavailable`` / 503 with ``Retry-After``.

Then: every acknowledged delivery is stored (once), no answer was anything but 202/200/503, every
503 carried ``Retry-After``, and the server log holds no traceback.

Runs on the PostgreSQL pass only (``SWITCHBOARD_TEST_DATABASE_URL``); on SQLite it is skipped.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import func, select

from switchboard.db import Database
from switchboard.models import Event, Todo
from switchboard.owners import Owner, add_human
from switchboard.services import Services, build_services
from switchboard.settings import Settings
from switchboard.testing import (
    TEST_ENCRYPTION_KEY,
    ServeProcess,
    connect,
    engine_name,
    github_headers,
    make_webhook,
    serve_process,
    vend,
)

pytestmark = pytest.mark.skipif(
    engine_name() != "postgresql",
    reason="crashes a private PostgreSQL cluster: runs on the PostgreSQL pass only",
)

ISSUE = json.loads(
    (Path(__file__).parent / "fixtures" / "github" / "issues" / "opened.payload.json").read_text()
)
DELIVERIES = 400
SENDERS = 8
RETRY_PAUSE = 0.05
# The whole run (sending, two crashes, recovery) must end well inside this.
RUN_SECONDS = 45.0
DOWN_SECONDS = 1.0
ALLOWED = {200, 202, 503}


@pytest.fixture
async def cluster() -> AsyncIterator[Any]:
    try:
        from bench.pgcluster import find_bindir, private_cluster
    except ImportError as exc:  # pragma: no cover - the repository always has bench/
        pytest.skip(f"bench/pgcluster.py is not importable: {exc}")
    try:
        find_bindir()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    async with private_cluster() as pg:
        yield pg


class Senders:
    """Delivers each body until it is acknowledged, recording every answer."""

    def __init__(self, base_url: str, token: str, secret: str) -> None:
        self.url = f"{base_url}/webhooks/{token}"
        self.secret = secret
        self.statuses: Counter[int] = Counter()
        self.missing_retry_after = 0
        self.acked: set[str] = set()
        self.queue: asyncio.Queue[int] = asyncio.Queue()
        for n in range(DELIVERIES):
            self.queue.put_nowait(n)

    def body(self, n: int) -> bytes:
        # A distinct body per delivery: forge deliveries also dedupe on the body's hash.
        return json.dumps({**ISSUE, "switchboard_test_delivery": n}).encode()

    async def worker(self, http: aiohttp.ClientSession) -> None:
        while True:
            try:
                n = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            delivery, body = f"crash-{n:05d}", self.body(n)
            headers = github_headers(self.secret, body, "issues", delivery)
            while True:
                try:
                    async with http.post(self.url, data=body, headers=headers) as resp:
                        await resp.read()
                        status = resp.status
                        if status == 503 and "Retry-After" not in resp.headers:
                            self.missing_retry_after += 1
                except aiohttp.ClientError:
                    status = -1  # no answer at all: the server must never do that
                self.statuses[status] += 1
                if status in (200, 202):
                    self.acked.add(delivery)
                    break
                await asyncio.sleep(RETRY_PAUSE)


async def world(url: str) -> tuple[str, str, str, str, Any]:
    """Through the same functions as the CLI, on the private cluster: a github webhook (ingest
    token and signing secret), a human's API token, an endpoint's MCP token and row."""
    settings = Settings(database_url=url, secret_encryption_key=TEST_ENCRYPTION_KEY)
    services: Services = build_services(settings)
    try:
        token, secret, _ = await make_webhook(services, "github")
        human, api_token = await add_human(services.db, "ops")
        endpoint, mcp_token = await vend(services.db, owner=Owner(human_id=human.id))
    finally:
        await services.db.dispose()
    assert secret
    return token, secret, api_token, mcp_token, endpoint


async def wait_for(condition: Any, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def outage_probes(server: ServeProcess, api_token: str, mcp_token: str) -> None:
    """While the database is down: an API call and an MCP tool call are answered 503 unavailable
    with Retry-After (MCP checks the endpoint's token in the database before every request)."""
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "claim_next", "arguments": {}},
    }
    async with aiohttp.ClientSession() as http:
        for path, token, body in (("/api/v1/humans/me", api_token, None), ("/mcp", mcp_token, call)):
            headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
            method = http.get if body is None else http.post
            async with method(f"{server.base_url}{path}", headers=headers, json=body) as resp:
                assert resp.status == 503, (path, resp.status, await resp.text())
                assert (await resp.json())["error"] == "unavailable", path
                assert int(resp.headers["Retry-After"]) > 0, path


async def test_a_crashed_and_restarted_postgres_loses_nothing_and_answers_only_503(
    cluster: Any, tmp_path: Path
) -> None:
    server = serve_process(
        {
            "database_url": cluster.url,
            "secret_encryption_key": TEST_ENCRYPTION_KEY,
            # The per-webhook flood guard would answer some of the load 429.
            "ingest_rate": 0,
            "log_level": "INFO",
        },
        tmp_path / "serve.log",
    )
    await server.start()  # serve migrates the empty database first
    token, secret, api_token, mcp_token, endpoint = await world(cluster.url)
    server.secrets += [secret, api_token, mcp_token]
    senders = Senders(server.base_url, token, secret)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        async with (
            connect(server.base_url, mcp_token, endpoint) as agent,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        ):
            workers = [asyncio.create_task(senders.worker(http)) for _ in range(SENDERS)]
            try:
                # Crash 1: an immediate shutdown, as `pg_ctl stop -m immediate` does it.
                await wait_for(lambda: len(senders.acked) >= DELIVERIES // 4, RUN_SECONDS, "a quarter acked")
                await cluster.run("pg_ctl", "stop", "-D", str(cluster.datadir), "-m", "immediate")
                await cluster.process.wait()
                await outage_probes(server, api_token, mcp_token)
                await asyncio.sleep(DOWN_SECONDS)
                await cluster.start()
                # Crash 2: SIGKILL of the postmaster and every backend (a power cut).
                await wait_for(lambda: len(senders.acked) >= DELIVERIES // 2, RUN_SECONDS, "half acked")
                await cluster.kill9()
                await asyncio.sleep(DOWN_SECONDS)
                await cluster.start()
                # Crash 3: a fast shutdown, which ends every session mid-statement (AdminShutdown).
                await wait_for(lambda: len(senders.acked) >= DELIVERIES * 3 // 4, RUN_SECONDS, "3/4 acked")
                await cluster.run("pg_ctl", "stop", "-D", str(cluster.datadir), "-m", "fast")
                await cluster.process.wait()
                await asyncio.sleep(DOWN_SECONDS)
                await cluster.start()
                await asyncio.wait_for(asyncio.gather(*workers), RUN_SECONDS)
            finally:
                for worker in workers:
                    worker.cancel()
            # The MCP session opened before the crashes works again.
            claimed = await agent.call("claim_next")
            assert not claimed.is_error, claimed.content
    finally:
        await server.stop()
    elapsed = loop.time() - started

    assert -1 not in senders.statuses, f"requests went unanswered: {senders.statuses}"
    assert set(senders.statuses) <= ALLOWED, f"answers other than 202/200/503: {senders.statuses}"
    assert senders.statuses[503] > 0, "the crashes were not seen: the test proved nothing"
    assert senders.missing_retry_after == 0
    assert len(senders.acked) == DELIVERIES, f"only {len(senders.acked)} acknowledged in {elapsed:.0f} s"

    db = Database(cluster.url)
    try:
        async with db.read() as s:
            stored = set((await s.scalars(select(Event.delivery_key))).all())
            todos = int(await s.scalar(select(func.count()).select_from(Todo)) or 0)
    finally:
        await db.dispose()
    lost = senders.acked - stored
    assert not lost, f"{len(lost)} acknowledged deliveries were lost"
    assert todos == DELIVERIES, f"{todos} todos for {DELIVERIES} deliveries"
    # No traceback, and no secret, in everything the server logged through both crashes.
    server.check_log()
