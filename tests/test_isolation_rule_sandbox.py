"""The rule sandbox's workers are shared by every tenant's webhooks: one tenant whose deliveries keep
the workers busy (slow rules, sent in bursts) must not turn another tenant's deliveries into rule
faults, held in quarantine because "no rule sandbox worker came free" (docs/routing.md, "The
sandbox": the delivery of a rule that runs too long is quarantined, not everyone else's)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.services import Services
from switchboard.testing import post

# A rule that runs until its time limit stops it (its worker is killed and replaced).
SPIN = "reduce range(0; 1000000000) as $i (0; . + 1) > 0"
FLOOD = 24


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"rule_workers": 2, "rule_timeout_ms": 300, "rule_budget_ms": 1500}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _tenant(
    services: Services, http: aiohttp.ClientSession, base_url: str, handle: str, expr: str
) -> str:
    """A human with an endpoint and a generic webhook whose one rule is ``expr``; its ingest token."""
    _, token = await tenancy.add_human(services.db, handle)
    await tenancy.vend_endpoint(
        services.db, name=f"{handle} bot", owner=await tenancy.resolve_owner(services.db, human=handle)
    )
    made = await tenancy.create_webhook(
        services.db, services.vault, services.providers, endpoint_slug=f"{handle}-bot", source="generic"
    )
    rules = {"rules": [{"id": "only", "expr": expr, "action": {"type": "queue"}}]}
    async with http.put(
        f"{base_url}{PREFIX}/webhooks/{made.webhook.id}/rules",
        json=rules,
        headers={"Authorization": f"Bearer {token}"},
    ) as r:
        assert r.status == 200, await r.text()
    return made.ingest_token


async def _deliver(base_url: str, token: str, n: int) -> dict[str, Any]:
    body = json.dumps({"n": n}).encode()
    status, answer, _ = await post(base_url, token, body, {"Content-Type": "application/json"})
    assert status == 202, answer
    return answer


async def test_one_tenants_slow_rules_do_not_quarantine_another_tenants_deliveries(
    services: Services, server: Any, base_url: str, http: aiohttp.ClientSession
) -> None:
    busy = await _tenant(services, http, base_url, "busy", SPIN)
    quiet = await _tenant(services, http, base_url, "quiet", "true")
    # The busy tenant's burst is in flight (its deliveries waiting for the workers) ...
    flood = [asyncio.create_task(_deliver(base_url, busy, n)) for n in range(FLOOD)]
    await asyncio.sleep(0.2)
    # ... when the quiet tenant's one delivery arrives: its rule is instant, and it is routed.
    answer = await _deliver(base_url, quiet, 0)
    assert answer["disposition"] == "routed", answer
    assert [t["endpoint"] for t in answer["todos"]] == ["quiet-bot"]
    # The busy tenant's own deliveries are held as rule faults: its rule, its problem.
    assert {a["disposition"] for a in await asyncio.gather(*flood)} == {"faulted"}
