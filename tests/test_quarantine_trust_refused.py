""" "Trust and release" that is refused changes nothing: over the operator API, a release with
``trust: true`` that fails (a queue the endpoint is not granted, a routing run that cannot happen)
answers its 4xx and leaves the webhook's trusted actors as they were. The trust was added in a
transaction of its own first, so the refused release still widened who may make work."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.endpoints import revoke_endpoint
from switchboard.intake_config import trust_for_create
from switchboard.services import Services
from switchboard.testing import github_headers, post

FIXTURE = Path(__file__).parent / "fixtures" / "github" / "issue_comment" / "created.payload.json"


async def _call(base_url: str, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    data = json.dumps(body).encode() if body is not None else None
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, f"{base_url}{PREFIX}{path}", data=data, headers=headers) as r,
    ):
        return r.status, await r.json()


async def _held_delivery(services: Services, base_url: str) -> tuple[str, str, str, str]:
    """A GitHub webhook trusting octocat, and a held comment of Codertocat's: (human token, webhook
    id, held todo id, endpoint slug)."""
    human, token = await tenancy.add_human(services.db, "ada")
    owner = tenancy.Owner(human_id=human.id)
    endpoint, _ = await tenancy.vend_endpoint(services.db, name="ada-agent", owner=owner, queues=["default"])
    created = await tenancy.create_webhook(
        services.db,
        services.vault,
        services.providers,
        endpoint_slug=endpoint.slug,
        source="github",
        trust=trust_for_create(services.providers, "github", {"logins": ["octocat"]}),
    )
    assert created.secret is not None
    body = FIXTURE.read_bytes()
    headers = github_headers(created.secret, body, "issue_comment", str(uuid.uuid4()))
    status, answer, _ = await post(base_url, created.ingest_token, body, headers)
    assert status == 202 and answer["disposition"] == "quarantined", answer
    status, listed = await _call(base_url, token, "GET", "/quarantine")
    assert status == 200
    return token, created.webhook.id, listed["todos"][0]["id"], endpoint.slug


async def _trusted(base_url: str, token: str, webhook_id: str) -> Any:
    status, answer = await _call(base_url, token, "GET", f"/webhooks/{webhook_id}")
    assert status == 200
    return answer["webhook"]["trust"]


async def test_trust_and_release_to_a_queue_not_granted_trusts_nobody(
    services: Services, base_url: str
) -> None:
    token, webhook_id, held_id, _ = await _held_delivery(services, base_url)
    for queue in ("triage", "Not A Queue!"):
        status, answer = await _call(
            base_url, token, "POST", f"/quarantine/{held_id}/release", {"trust": True, "queue": queue}
        )
        assert 400 <= status < 500 and answer["error"] in ("not_granted", "invalid_argument"), answer
        assert await _trusted(base_url, token, webhook_id) == {"logins": ["octocat"], "match": "sender"}
    # Still held, and a release that can happen trusts and releases as before.
    status, answer = await _call(
        base_url, token, "POST", f"/quarantine/{held_id}/release", {"trust": True, "queue": "default"}
    )
    assert status == 200 and answer["trusted"] == ["Codertocat"], answer


async def test_trust_and_release_that_cannot_run_routing_trusts_nobody(
    services: Services, base_url: str
) -> None:
    token, webhook_id, held_id, slug = await _held_delivery(services, base_url)
    # The webhook's only endpoint is revoked: routing has nowhere to deliver (409).
    await revoke_endpoint(services.db, slug)
    status, answer = await _call(base_url, token, "POST", f"/quarantine/{held_id}/release", {"trust": True})
    assert status == 409 and answer["error"] == "conflict", answer
    assert await _trusted(base_url, token, webhook_id) == {"logins": ["octocat"], "match": "sender"}
