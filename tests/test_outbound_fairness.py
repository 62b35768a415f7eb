"""Outbound fairness (issue 13, item 3): one tenant's flood of replies to a host that never answers
must not starve another tenant's reply to a healthy host, and a dial that never got a slot ends
``failed``/``connect_failed`` (nothing sent, retryable), never ``unknown``.

The stalled host is a TCP server on 127.0.0.1 that accepts, reads the request and never answers
(plain HTTP, so a dial that got a connection really did write its request). The healthy host is the
TLS Slack stand-in. The client is the production one, with its real pool and the limits under test;
only the timeouts are shortened so the test takes seconds.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import pytest
from sqlalchemy import func, select

from switchboard import connections as conn
from switchboard import reply
from switchboard.models import Reply
from switchboard.outbound import Outbound, _Slots
from switchboard.owners import Owner, add_human
from switchboard.services import Services
from switchboard.tenancy import vend_endpoint
from switchboard.testing import (
    FakeProvider,
    StalledHost,
    claimed_todo,
    forge_address,
    human_and_endpoint,
    slack_address,
)
from switchboard.testing.tls import tls

# Past the connect budget a waiting dial gives up; past the total timeout a sent one is unknown.
# The total is long enough that the flood's first dials are still hanging when tenant B replies,
# even on a busy machine where the flood's 120 database writes take seconds.
CONNECT_BUDGET = 0.5
TOTAL = 8.0


@pytest.fixture
def stalled(stalled_host: StalledHost) -> StalledHost:
    return stalled_host


@pytest.fixture
def settings_overrides(stalled: StalledHost, fake_slack: FakeProvider) -> dict[str, Any]:
    # github.com replies go to the stalled host; Slack replies to the healthy stand-in.
    return {"github_api_url": stalled.base_url, "slack_api_url": f"{fake_slack.base_url}/api"}


async def _tenant_a_flood(services: Services, size: int) -> list[tuple[Any, str]]:
    """Tenant A: one github.com connection and ``size`` claimed todos over enough endpoints that
    no endpoint's token bucket (30) refuses; returns (endpoint, todo id) per reply to send."""
    human, _ = await add_human(services.db, "tenant-a")
    owner = Owner(human_id=human.id)
    await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret="gh-flood-credential-Zq81Lp"
    )
    work = []
    for i in range(size):
        if i % 30 == 0:
            endpoint, _ = await vend_endpoint(
                services.db, name=f"a-agent-{i}", owner=owner, families=["reply"]
            )
        todo = await claimed_todo(services.db, endpoint, forge_address("github", "github.com", number=i + 1))
        work.append((endpoint, todo.id))
    return work


async def _count_rows(services: Services) -> int:
    async with services.db.read() as s:
        return int(await s.scalar(select(func.count()).select_from(Reply)) or 0)


@pytest.mark.parametrize(
    ("flood", "per_host", "per_owner", "cap"),
    [
        # The per-owner cap holds tenant A to 8 dials in flight, whatever the hosts.
        pytest.param(120, 20, 8, 8, id="owner-cap"),
        # A tenant under no owner cap still gets only the host's connections; the rest of the
        # flood waits in the host's queue for the connect budget and ends connect_failed.
        pytest.param(30, 4, 100, 4, id="host-cap"),
    ],
)
async def test_a_stalled_host_flood_leaves_another_tenants_reply_sent(
    services: Services,
    stalled: StalledHost,
    fake_slack: FakeProvider,
    flood: int,
    per_host: int,
    per_owner: int,
    cap: int,
) -> None:
    services.outbound = client = Outbound(
        allow_http=True,
        allow_cidrs=[ipaddress.ip_network("127.0.0.0/8")],
        ssl_context=tls().client,
        connect_timeout=CONNECT_BUDGET,
        total_timeout=TOTAL,
        limit_per_host=per_host,
        limit_per_owner=per_owner,
    )
    try:
        work = await _tenant_a_flood(services, flood)
        b_owner, b_endpoint = await human_and_endpoint(services.db, "tenant-b")
        await conn.create_connection(
            services, b_owner, kind="slack", name="slack", account_key="T0TEST", secret="xoxb-b-Hq72Ws9"
        )
        b_todo = await claimed_todo(services.db, b_endpoint, slack_address())

        loop = asyncio.get_running_loop()
        started = loop.time()
        tasks = [
            asyncio.create_task(reply.send_reply(services, endpoint, todo_id, f"flood {n}"))
            for n, (endpoint, todo_id) in enumerate(work)
        ]
        # Every flood reply has its pending row (so tenant B does not queue behind A's database
        # writes) and the stalled host holds its share of connections.
        while await _count_rows(services) < flood or stalled.open_now < cap:
            assert loop.time() - started < TOTAL - 3, "the flood did not reach the stalled host in time"
            await asyncio.sleep(0.02)

        b_started = loop.time()
        b = await reply.send_reply(services, b_endpoint, b_todo.id, "Done: fixed in #12.")
        b_seconds = loop.time() - b_started
        assert b["state"] == "sent", b
        assert b_seconds < 2.5, f"tenant B waited {b_seconds:.2f} s behind tenant A's flood"
        # The flood's first dials are still waiting on the stalled host: B did not wait them out.
        assert stalled.open_now > 0 and not all(t.done() for t in tasks)
        assert len(fake_slack.posts()) == 1

        results = await asyncio.gather(*tasks)
    finally:
        await client.close()

    outcomes = [(r["state"], r.get("error_class")) for r in results]
    assert set(outcomes) <= {("unknown", "network"), ("failed", "network")}, outcomes
    async with services.db.read() as s:
        rows = (await s.scalars(select(Reply).where(Reply.todo_id != b_todo.id))).all()
    codes = {(row.state, row.error_code) for row in rows}
    assert codes <= {("unknown", "no_answer"), ("failed", "connect_failed")}, codes
    unknown = sum(row.state == "unknown" for row in rows)
    failed = sum(row.state == "failed" for row in rows)
    # Only a dial that wrote its request may be unknown; the surplus never got to send.
    assert 0 < unknown <= stalled.with_request
    assert failed >= flood - 2 * cap, (unknown, failed)
    assert stalled.most_open <= cap
    assert client.owner_dials(b_owner.human_id or "") == 0


async def test_owner_slots_are_first_come_first_served_and_forgotten() -> None:
    slots = _Slots(per_key=2)
    await slots.acquire("a", 0.1)
    await slots.acquire("a", 0.1)
    with pytest.raises(TimeoutError):
        await slots.acquire("a", 0.05)
    # Another owner is not affected by a's full house.
    await slots.acquire("b", 0.1)
    order: list[int] = []

    async def waiter(n: int) -> None:
        await slots.acquire("a", 1.0)
        order.append(n)

    waiters = [asyncio.create_task(waiter(n)) for n in range(2)]
    await asyncio.sleep(0.01)
    slots.release("a")
    slots.release("a")
    await asyncio.gather(*waiters)
    assert order == [0, 1] and slots.in_use("a") == 2
    for key in ("a", "a", "b"):
        slots.release(key)
    assert slots.in_use("a") == slots.in_use("b") == 0
    assert not slots._held and not slots._waiters


async def test_the_limits_come_from_settings(services: Services) -> None:
    from switchboard.outbound import from_settings
    from switchboard.settings import Settings

    settings = Settings(
        database_url=services.settings.database_url,
        outbound_limit_per_host=3,
        outbound_limit_per_owner=2,
        outbound_connect_seconds=1.5,
    )
    client = from_settings(settings)
    assert (client.limit_per_host, client.connect_timeout) == (3, 1.5)
    assert client._owners.per_key == 2
    await client.close()
