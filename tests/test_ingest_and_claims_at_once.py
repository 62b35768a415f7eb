"""Ingest and claims at once, on one server (issue 12): deliveries arrive over HTTP while agents
drain the queue over MCP with the SDK client.

On PostgreSQL the claims and ingest's group commit share one pool of connections (the one whose
statements keep their plans); on SQLite every write goes through the one writer. Either way, under
both loads at once, every delivery answered 202 must become exactly one todo, each todo must be
claimed and completed exactly once, and no request may fail.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import aiohttp
from fixtures.ingest_kit import fixture
from sqlalchemy import func, select

from switchboard.db import Database
from switchboard.models import Attempt, Event, Todo
from switchboard.services import Services
from switchboard.testing import connect, github_headers, make_webhook, vend

DELIVERIES = 240
SENDERS = 16
AGENTS = 4


async def test_deliveries_and_claims_at_once_lose_nothing_and_claim_nothing_twice(
    services: Services, db: Database, base_url: str
) -> None:
    endpoint, token = await vend(db)
    ingest_token, secret, _ = await make_webhook(services, "github", endpoint=endpoint.slug)
    assert secret is not None
    template = fixture("github/issues/opened.payload.json")

    def delivery(n: int) -> tuple[bytes, dict[str, str]]:
        # A body of its own each (the body's hash is a delivery key too), and an id of its own.
        body = json.dumps({**template, "issue": {**template["issue"], "number": 10_000 + n}}).encode()
        return body, github_headers(secret, body, "issues", f"mixed-{n}")

    answered: dict[int, int] = {}
    sent = asyncio.Event()

    async def sender(http: aiohttp.ClientSession, mine: range) -> None:
        for n in mine:
            body, headers = delivery(n)
            async with http.post(f"{base_url}/webhooks/{ingest_token}", data=body, headers=headers) as resp:
                answered[n] = resp.status
                if resp.status == 202:
                    assert (await resp.json())["created"] == 1

    async def senders() -> None:
        async with aiohttp.ClientSession() as http:
            await asyncio.gather(*(sender(http, range(s, DELIVERIES, SENDERS)) for s in range(SENDERS)))
        while_sending.append(len(completed))
        sent.set()

    completed: list[str] = []
    while_sending: list[int] = []

    async def agent() -> None:
        async with connect(base_url, token, endpoint) as session:
            while True:
                batch = await session.ok("claim_next", max=3, fence=True)
                if not batch["todos"]:
                    if sent.is_set() and len(completed) >= sum(s == 202 for s in answered.values()):
                        return
                    await asyncio.sleep(0.01)
                    continue
                for todo in batch["todos"]:
                    done = await session.ok("complete", todo_id=todo["id"], lease_token=todo["lease_token"])
                    assert done["state"] == "done"
                    completed.append(todo["id"])

    async with asyncio.timeout(120):
        await asyncio.gather(senders(), *(agent() for _ in range(AGENTS)))

    # The two loads overlapped: agents completed todos while deliveries were still arriving.
    assert while_sending[0] > 0, while_sending
    # Every delivery was stored and answered as stored: the shared pool made nobody wait forever
    # nor fail.
    assert Counter(answered.values()) == {202: DELIVERIES}
    # Each todo claimed and completed once, by one agent, in one attempt.
    assert len(completed) == len(set(completed)) == DELIVERIES
    async with db.read() as s:
        assert await s.scalar(select(func.count()).select_from(Event)) == DELIVERIES
        states = await s.execute(select(Todo.state, func.count()).group_by(Todo.state))
        assert {row[0]: row[1] for row in states} == {"done": DELIVERIES}
        attempts = await s.execute(select(Attempt.todo_id, func.count()).group_by(Attempt.todo_id))
        assert {row[0]: row[1] for row in attempts} == dict.fromkeys(completed, 1)
