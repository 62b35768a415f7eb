"""Ingest serves webhooks from a per-process cache; a change to a webhook, a route or an endpoint takes
effect on the very next delivery: made in the same process, by the CLI (another process, both
engines), or by another ``switchboard serve`` process (PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from sqlalchemy import update

from switchboard import tenancy
from switchboard.db import utcnow
from switchboard.ingest import INGEST_CONFIGS
from switchboard.models import Endpoint
from switchboard.services import Services
from switchboard.testing import (
    ServeProcess,
    ServeProcesses,
    counts,
    engine_name,
    github_headers,
    make_webhook,
    post,
)
from switchboard.vault import VaultError

_numbers = iter(range(1, 1_000_000))


def _issue() -> bytes:
    n = next(_numbers)
    return json.dumps({"action": "opened", "issue": {"number": n, "title": f"issue {n}"}}).encode()


async def _github(base_url: str, token: str, secret: str) -> tuple[int, dict[str, Any]]:
    body = _issue()
    headers = github_headers(secret, body, "issues", f"delivery-{next(_numbers)}")
    status, answer, _ = await post(base_url, token, body, headers)
    return status, answer


async def _generic(base_url: str, token: str) -> tuple[int, dict[str, Any]]:
    n = next(_numbers)
    status, answer, _ = await post(
        base_url, token, json.dumps({"n": n}).encode(), {"X-Delivery-Id": f"g-{n}"}
    )
    return status, answer


def _endpoints(answer: dict[str, Any]) -> list[str]:
    return [t["endpoint"] for t in answer["todos"]]


async def _second_endpoint(services: Services, slug: str, owner: str = "ada") -> None:
    owner_scope = await tenancy.resolve_owner(services.db, human=owner)
    await tenancy.vend_endpoint(services.db, name=slug, owner=owner_scope)


# ---------------------------------------------------------------------------------------------
# In the same process


async def test_a_known_webhook_is_served_from_the_cache(
    services: Services, server: TestServer, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    cache = server.app[INGEST_CONFIGS]
    # (On PostgreSQL the LISTEN connection opening empties the cache once more, when it opens.)
    for _ in range(20):
        reads = cache.reads
        assert (await _github(base_url, token, secret))[0] == 202
        if cache.reads == reads:
            break
    for _ in range(3):
        assert (await _github(base_url, token, secret))[0] == 202
    assert cache.reads == reads and cache.hits >= 3


async def test_changes_in_this_process_take_effect_on_the_next_delivery(
    services: Services, server: TestServer, base_url: str
) -> None:
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    db = services.db
    assert (await _github(base_url, token, secret))[0] == 202

    # A new secret verifies at once. (The one it replaced may still verify for a while, so the
    # first secret is tried after a second rotation, which leaves it neither current nor previous.)
    rotate = tenancy.rotate_webhook_secret
    assert (await _github(base_url, token, await rotate(db, services.vault, services.providers, webhook_id)))[
        0
    ] == 202
    new_secret = await rotate(db, services.vault, services.providers, webhook_id)
    assert (await _github(base_url, token, new_secret))[0] == 202
    assert (await _github(base_url, token, secret))[0] == 401

    await _second_endpoint(services, "ada-second")
    await tenancy.add_route(db, webhook_id, "ada-second")
    status, answer = await _github(base_url, token, new_secret)
    assert status == 202 and _endpoints(answer) == ["ada-agent", "ada-second"]

    await tenancy.revoke_endpoint(db, "ada-second")
    status, answer = await _github(base_url, token, new_secret)
    assert status == 202 and _endpoints(answer) == ["ada-agent"]

    await tenancy.revoke_endpoint(db, "ada-agent")
    status, answer = await _github(base_url, token, new_secret)
    assert status == 503 and answer["error"] == "unavailable"

    await tenancy.delete_webhook(db, webhook_id)
    status, answer = await _github(base_url, token, new_secret)
    assert status == 404 and answer["error"] == "not_found"


async def test_the_signing_secret_is_opened_once_per_configuration(
    services: Services, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deliveries to a cached webhook reuse its opened secret; a rotation is a new configuration,
    whose secret is opened again, and a secret that cannot be opened is tried again each time."""
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    vault, opened = services.vault, []
    real_open = vault.open

    def counting_open(blob: bytes, key_id: str, aad: bytes) -> str:
        opened.append(aad)
        return real_open(blob, key_id, aad)

    monkeypatch.setattr(vault, "open", counting_open)
    for _ in range(5):
        assert (await _github(base_url, token, secret))[0] == 202
    assert len(opened) <= 2  # the first read, and once more if the LISTEN connection emptied the cache
    before = len(opened)
    for _ in range(5):
        assert (await _github(base_url, token, secret))[0] == 202
    assert len(opened) == before

    new_secret = await tenancy.rotate_webhook_secret(services.db, vault, services.providers, webhook_id)
    assert (await _github(base_url, token, new_secret))[0] == 202
    assert len(opened) > before

    def failing_open(blob: bytes, key_id: str, aad: bytes) -> str:
        raise VaultError("stored secret failed authentication")

    # A configuration whose secret could not be opened keeps nothing: the same configuration, once
    # the secret opens again, verifies the next delivery.
    newest = await tenancy.rotate_webhook_secret(services.db, vault, services.providers, webhook_id)
    monkeypatch.setattr(vault, "open", failing_open)
    for _ in range(2):
        status, answer = await _github(base_url, token, newest)
        assert status == 503 and answer["error"] == "unavailable"
    monkeypatch.setattr(vault, "open", counting_open)
    assert (await _github(base_url, token, newest))[0] == 202


async def test_an_endpoint_that_expires_while_cached_gets_no_more_todos(
    services: Services, server: TestServer, base_url: str
) -> None:
    """Expiry is judged at each delivery, not when the configuration was cached: nothing about the
    rows changes when an endpoint's time runs out."""
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    await _second_endpoint(services, "ada-brief")
    await tenancy.add_route(services.db, webhook_id, "ada-brief")
    cache = server.app[INGEST_CONFIGS]
    # The first delivery must be answered while the endpoint is live; a machine too slow for that
    # gets a longer window (setting it is a change, so the configuration is read again).
    for seconds in (1.5, 4.0, 10.0):
        expires = utcnow() + timedelta(seconds=seconds)
        async with services.db.write() as s:
            await s.execute(update(Endpoint).where(Endpoint.slug == "ada-brief").values(expires_at=expires))
        status, answer = await _github(base_url, token, secret)
        if utcnow() < expires:
            break
    assert status == 202 and _endpoints(answer) == ["ada-agent", "ada-brief"]
    reads = cache.reads
    await asyncio.sleep(max(0.0, (expires - utcnow()).total_seconds()) + 0.1)
    status, answer = await _github(base_url, token, secret)
    assert status == 202 and _endpoints(answer) == ["ada-agent"]
    # (On PostgreSQL the LISTEN connection opening may have emptied the cache once in between.)
    assert cache.reads - reads <= 1


async def test_a_refusal_decided_on_a_cached_copy_is_decided_again_on_the_rows(
    services: Services, server: TestServer, base_url: str
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    assert (await _generic(base_url, token))[0] == 202
    # An endpoint revoked and then (as only an operator's own tooling could) restored: the webhook's
    # cached copy said "no live target", the next delivery must see it live again.
    await tenancy.revoke_endpoint(services.db, "ada-agent")
    assert (await _generic(base_url, token))[0] == 503
    async with services.db.write() as s:
        await s.execute(update(Endpoint).where(Endpoint.slug == "ada-agent").values(state="active"))
    assert (await _generic(base_url, token))[0] == 202


# ---------------------------------------------------------------------------------------------
# From another process: the operator's CLI


@pytest.fixture
def operator(switchboard_serve: ServeProcesses) -> ServeProcess:
    """The CLI on the test's database (a process of its own; no server is launched)."""
    return switchboard_serve.new({"log_level": "WARNING"}, name="cli")


async def test_cli_changes_take_effect_on_the_next_delivery_of_a_running_server(
    services: Services, server: TestServer, base_url: str, operator: ServeProcess
) -> None:
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    await _second_endpoint(services, "ada-second")
    assert (await _github(base_url, token, secret))[0] == 202

    # Signed with a new secret: accepted at once (the cached secret is not the last word).
    assert (await _github(base_url, token, (await operator.cli("webhook", "rotate", webhook_id))["secret"]))[
        0
    ] == 202
    new_secret = (await operator.cli("webhook", "rotate", webhook_id))["secret"]
    assert (await _github(base_url, token, new_secret))[0] == 202
    # Signed with the first, which two rotations retired: refused, though the cache held it.
    assert (await _github(base_url, token, secret))[0] == 401

    await operator.cli("webhook", "route", "add", webhook_id, "--endpoint", "ada-second")
    status, answer = await _github(base_url, token, new_secret)
    assert status == 202 and _endpoints(answer) == ["ada-agent", "ada-second"]

    await operator.cli("endpoint", "revoke", "ada-second")
    status, answer = await _github(base_url, token, new_secret)
    assert status == 202 and _endpoints(answer) == ["ada-agent"]

    await operator.cli("webhook", "delete", webhook_id)
    status, answer = await _github(base_url, token, new_secret)
    assert status == 404
    # Nothing was ever stored for a revoked target or after the deletion.
    assert await counts(services) == (5, 6)


async def test_a_webhook_deleted_by_the_cli_while_cached_stores_nothing(
    services: Services, server: TestServer, base_url: str, operator: ServeProcess
) -> None:
    token, _, webhook_id = await make_webhook(services, "generic")
    assert (await _generic(base_url, token))[0] == 202
    await operator.cli("webhook", "delete", webhook_id)
    status, _ = await _generic(base_url, token)
    assert status == 404
    assert (await counts(services))[0] == 1


# ---------------------------------------------------------------------------------------------
# Between two serving processes (PostgreSQL)


@pytest.mark.skipif(
    engine_name() != "postgresql", reason="several processes share one database only on PostgreSQL"
)
async def test_changes_through_one_server_take_effect_on_the_next_delivery_to_another(
    services: Services, switchboard_serve: ServeProcesses
) -> None:
    servers = [switchboard_serve.new({"log_level": "WARNING"}, name=name) for name in ("a", "b")]
    for server in servers:
        await server.launch()
    for server in servers:
        await server.ready()
    a, b = (server.base_url for server in servers)
    _, human_token = await tenancy.add_human(services.db, "ada")
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    await _second_endpoint(services, "ada-second")
    api = {"Authorization": f"Bearer {human_token}"}

    async with aiohttp.ClientSession(headers=api) as http:

        async def call(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
            async with http.request(method, f"{a}/api/v1{path}", **kwargs) as resp:
                assert resp.status < 300, await resp.text()
                answer: dict[str, Any] = await resp.json()
                return answer

        # Both processes hold the webhook in their caches.
        for url in (a, b):
            assert (await _github(url, token, secret))[0] == 202

        rotated = (await call("POST", f"/webhooks/{webhook_id}/rotate"))["secret"]
        assert (await _github(b, token, rotated))[0] == 202
        new_secret = (await call("POST", f"/webhooks/{webhook_id}/rotate"))["secret"]
        assert (await _github(b, token, new_secret))[0] == 202
        assert (await _github(b, token, secret))[0] == 401

        await call("POST", f"/webhooks/{webhook_id}/routes", json={"endpoint": "ada-second"})
        status, answer = await _github(b, token, new_secret)
        assert status == 202 and _endpoints(answer) == ["ada-agent", "ada-second"]

        await call("POST", "/endpoints/ada-second/revoke")
        status, answer = await _github(b, token, new_secret)
        assert status == 202 and _endpoints(answer) == ["ada-agent"]

        await call("DELETE", f"/webhooks/{webhook_id}")
        assert (await _github(b, token, new_secret))[0] == 404
    for server in servers:
        server.check_log()
