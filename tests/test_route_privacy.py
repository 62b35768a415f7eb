"""A route into another scope's endpoint keeps the source side private: the todo it minted is the
target's to read, but its detail does not name the source webhook (docs/api.md, "Routes")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.services import Services
from switchboard.testing import post


class Api:
    def __init__(self, http: aiohttp.ClientSession, base_url: str, token: str) -> None:
        self.http, self.base_url, self.token = http, base_url, token

    async def call(self, method: str, path: str) -> tuple[int, Any, str]:
        async with self.http.request(
            method, f"{self.base_url}{PREFIX}{path}", headers={"Authorization": f"Bearer {self.token}"}
        ) as r:
            text = await r.text()
            assert r.status < 500, text
            return r.status, json.loads(text), text


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_target_side_todo_detail_does_not_name_the_other_scopes_webhook(
    services: Services, server: Any, base_url: str, http: aiohttp.ClientSession
) -> None:
    """docs/api.md (routes): when the caller cannot see the webhook's scope, no answer names anything
    of that side, not the webhook. A todo a cross-scope route minted in the target's endpoint is
    the target's to read; its detail named the source webhook's id (``delivery.webhook``)."""
    db = services.db
    _, alice = await tenancy.add_human(db, "alice")
    await tenancy.add_human(db, "bob")
    await tenancy.add_team(db, "ops", "alice")
    ops = await tenancy.resolve_owner(db, team="ops")
    bob = await tenancy.resolve_owner(db, human="bob")
    await tenancy.vend_endpoint(db, name="Ops Bot", owner=ops)
    await tenancy.vend_endpoint(db, name="Bob Bot", owner=bob)
    made = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="bob-bot", source="generic"
    )
    await tenancy.add_route(db, made.webhook.id, "ops-bot")  # the operator consented for both

    status, answer, _ = await post(
        base_url, made.ingest_token, b'{"hello": "world"}', {"Content-Type": "application/json"}
    )
    assert status == 202, answer
    ops_todo = next(t["id"] for t in answer["todos"] if t["endpoint"] == "ops-bot")

    api = Api(http, base_url, alice)
    # Alice cannot see Bob's webhook at all ...
    status, _, _ = await api.call("GET", f"/webhooks/{made.webhook.id}")
    assert status == 404
    # ... nor does her own todo's detail name it.
    status, payload, text = await api.call("GET", f"/todos/{ops_todo}")
    assert status == 200
    assert made.webhook.id not in text, payload["todo"]["delivery"]
    assert payload["todo"]["delivery"] is None
