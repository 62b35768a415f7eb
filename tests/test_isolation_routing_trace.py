"""A todo that a cross-scope route minted is the target's to read, but the routing trace it carries
is the webhook's side: its rules' ids and names, the endpoints they name (the webhook's own among
them) and who released it from quarantine. A reader who cannot see the webhook's scope gets none of
it (docs/api.md, "Scopes and roles": no answer names anything of that side)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.services import Services
from switchboard.testing import post, ui_login

RULES = {
    "rules": [
        {
            "id": "bob-private-rule",
            "name": "Bob's private triage",
            "expr": "true",
            "action": {"type": "queue", "endpoints": ["bob-bot", "ops-bot"]},
        }
    ]
}


async def _call(
    http: aiohttp.ClientSession, base_url: str, token: str, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with http.request(method, f"{base_url}{PREFIX}{path}", json=body, headers=headers) as r:
        text = await r.text()
        assert r.status < 500, text
        return r.status, json.loads(text)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_route_target_does_not_see_the_webhook_sides_routing_trace(
    services: Services, server: Any, base_url: str, http: aiohttp.ClientSession
) -> None:
    db = services.db
    _, alice = await tenancy.add_human(db, "alice")
    _, bob = await tenancy.add_human(db, "bob")
    await tenancy.add_team(db, "ops", "alice")
    ops = await tenancy.resolve_owner(db, team="ops")
    await tenancy.vend_endpoint(db, name="Ops Bot", owner=ops)
    await tenancy.vend_endpoint(db, name="Bob Bot", owner=await tenancy.resolve_owner(db, human="bob"))
    made = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="bob-bot", source="generic"
    )
    await tenancy.add_route(db, made.webhook.id, "ops-bot")  # the operator consented for both
    status, _ = await _call(http, base_url, bob, "PUT", f"/webhooks/{made.webhook.id}/rules", RULES)
    assert status == 200

    status, answer, _ = await post(
        base_url, made.ingest_token, b'{"hello": "world"}', {"Content-Type": "application/json"}
    )
    assert status == 202, answer
    ids = {t["endpoint"]: t["id"] for t in answer["todos"]}

    # Bob, who owns the webhook, reads how his rules decided his own todo.
    status, mine = await _call(http, base_url, bob, "GET", f"/todos/{ids['bob-bot']}")
    assert status == 200 and mine["todo"]["routing"]["rule"] == "bob-private-rule"

    # Alice reads her team's todo, and nothing of Bob's rules or endpoint.
    status, theirs = await _call(http, base_url, alice, "GET", f"/todos/{ids['ops-bot']}")
    assert status == 200
    text = json.dumps(theirs)
    for secret in ("bob-private-rule", "Bob's private triage", "bob-bot"):
        assert secret not in text, theirs["todo"]["routing"]
    assert theirs["todo"]["routing"] is None

    # Nor does her todo's page in the web UI.
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        await ui_login(browser, base_url, alice)
        async with browser.get(f"{base_url}/ui/todos/{ids['ops-bot']}") as r:
            page = await r.text()
            assert r.status == 200
    for secret in ("bob-private-rule", "Bob&#x27;s private triage", "Bob's private triage", "bob-bot"):
        assert secret not in page
