"""Connection tests share the outbound pool with every tenant's replies, so they take their owner's
in-flight slots as replies do: one tenant firing many tests at a host that never answers holds its
own slots, and another tenant's reply to a healthy host is still sent."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import pytest

from switchboard import connections as conn
from switchboard import reply
from switchboard.outbound import Outbound
from switchboard.services import Services
from switchboard.testing import FakeProvider, StalledHost, claimed_todo, human_and_endpoint, slack_address
from switchboard.testing.tls import tls

CONNECT_BUDGET = 0.5
TOTAL = 6.0
POOL = 6


@pytest.fixture
def settings_overrides(stalled_host: StalledHost, fake_slack: FakeProvider) -> dict[str, Any]:
    # Tenant A's github.com tests go to the stalled host; tenant B's Slack reply to the stand-in.
    return {"github_api_url": stalled_host.base_url, "slack_api_url": f"{fake_slack.base_url}/api"}


async def test_a_flood_of_connection_tests_leaves_another_tenants_reply_sent(
    services: Services, stalled_host: StalledHost, fake_slack: FakeProvider
) -> None:
    host = stalled_host
    # A small pool, one host allowed all of it: what several stalled hosts do to the real one.
    services.outbound = client = Outbound(
        allow_http=True,
        allow_cidrs=[ipaddress.ip_network("127.0.0.0/8")],
        ssl_context=tls().client,
        connect_timeout=CONNECT_BUDGET,
        total_timeout=TOTAL,
        pool_limit=POOL,
        limit_per_host=POOL,
        limit_per_owner=2,
    )
    try:
        a_owner, _ = await human_and_endpoint(services.db, "tenant-a")
        a_conn = await conn.create_connection(
            services, a_owner, kind="github", name="gh", account_key=None, secret="gh-flood-" + "Zq81Lp"
        )
        b_owner, b_endpoint = await human_and_endpoint(services.db, "tenant-b")
        await conn.create_connection(
            services, b_owner, kind="slack", name="slack", account_key="T0TEST", secret="xoxb-b-" + "Hq72Ws9"
        )
        b_todo = await claimed_todo(services.db, b_endpoint, slack_address())

        loop = asyncio.get_running_loop()
        tests = [
            asyncio.create_task(conn.test_connection(services, a_owner, a_conn["id"]))
            for _ in range(3 * POOL)
        ]
        started = loop.time()
        while host.open_now < 2:
            assert loop.time() - started < TOTAL - 2, "the tests did not reach the stalled host"
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)

        b = await reply.send_reply(services, b_endpoint, b_todo.id, "Done: fixed in #12.")
        assert b["state"] == "sent", b
        assert len(fake_slack.posts()) == 1
        verdicts = await asyncio.gather(*tests)
    finally:
        await client.close()
    assert all(v["ok"] is False and v["error_class"] == "network" for v in verdicts), verdicts
