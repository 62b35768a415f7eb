"""A captured forge delivery replayed under a fresh delivery id is a duplicate (issue 13 item 11).

GitHub and Gitea sign only the body; the delivery id travels in a header the signature does not
cover. A verified delivery whose key came from a header also dedupes on the body's hash, so the
replay answers as the duplicate of the original and mints nothing, while the forge's own
redelivery (same id, same body) still answers as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

from fixtures.ingest_kit import fixture_bytes
from sqlalchemy import select

from switchboard.models import Event
from switchboard.services import Services
from switchboard.testing import counts, gitea_headers, github_headers, make_webhook, post


async def test_a_github_body_replayed_with_a_fresh_delivery_id_is_a_duplicate(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    body = fixture_bytes("github/issue_comment/created.payload.json")
    status, first, _ = await post(
        base_url, token, body, github_headers(secret, body, "issue_comment", "id-1")
    )
    assert status == 202 and first["disposition"] == "routed" and first["created"] == 1

    # The attacker's copy: same bytes, same signature, a delivery id never seen.
    status, replay, _ = await post(
        base_url, token, body, github_headers(secret, body, "issue_comment", "id-2")
    )
    assert status == 202 and replay["disposition"] == "duplicate" and replay["created"] == 0
    assert [t["id"] for t in replay["todos"]] == [t["id"] for t in first["todos"]]

    # GitHub's own Redeliver: the same id and body, answered as before.
    status, again, _ = await post(
        base_url, token, body, github_headers(secret, body, "issue_comment", "id-1")
    )
    assert status == 202 and again["disposition"] == "duplicate"
    assert [t["id"] for t in again["todos"]] == [t["id"] for t in first["todos"]]
    assert await counts(services) == (1, 1)
    async with services.db.read() as s:
        (event,) = (await s.scalars(select(Event))).all()
    # The body's key exactly as it has always been written: events stored before and after a change
    # must agree, or a replay across an upgrade would be new.
    assert event.delivery_key == "id-1"
    assert event.secondary_key == "body-sha256:" + hashlib.sha256(body).hexdigest()


async def test_a_gitea_body_replayed_with_a_fresh_delivery_id_is_a_duplicate(
    services: Services, base_url: str
) -> None:
    token, secret, _ = await make_webhook(services, "gitea")
    assert secret is not None
    body = fixture_bytes("gitea/issue_comment.created.json")
    headers = gitea_headers(secret, body, "issue_comment", delivery="11111111-1111-4111-8111-111111111111")
    status, first, _ = await post(base_url, token, body, headers)
    assert status == 202 and first["created"] == 1
    headers = gitea_headers(secret, body, "issue_comment", delivery="22222222-2222-4222-8222-222222222222")
    status, replay, _ = await post(base_url, token, body, headers)
    assert status == 202 and replay["disposition"] == "duplicate"
    assert [t["id"] for t in replay["todos"]] == [t["id"] for t in first["todos"]]
    assert await counts(services) == (1, 1)


async def test_replays_racing_the_original_store_it_once(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    body = fixture_bytes("github/issues/opened.payload.json")
    answers = await asyncio.gather(
        *(post(base_url, token, body, github_headers(secret, body, "issues", f"race-{n}")) for n in range(8))
    )
    assert {status for status, _, _ in answers} == {202}
    assert sorted(a["disposition"] for _, a, _ in answers) == ["duplicate"] * 7 + ["routed"]
    assert await counts(services) == (1, 1)


async def test_different_bodies_are_different_deliveries(services: Services, base_url: str) -> None:
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    for n in (1, 2):
        body = json.dumps({"action": "opened", "issue": {"number": n, "title": "same title"}}).encode()
        status, answer, _ = await post(
            base_url, token, body, github_headers(secret, body, "issues", f"d-{n}")
        )
        assert status == 202 and answer["disposition"] == "routed"
    assert await counts(services) == (2, 2)


async def test_an_unsigned_sender_may_repeat_a_body_under_new_ids(services: Services, base_url: str) -> None:
    # A generic sender's URL is its only trust: the same alert twice, under two ids, is two alerts.
    token, _, _ = await make_webhook(services, "generic")
    for n in (1, 2):
        status, answer, _ = await post(
            base_url, token, b'{"alert": "disk full"}', {"X-Delivery-Id": f"a-{n}"}
        )
        assert status == 202 and answer["disposition"] == "routed"
    assert await counts(services) == (2, 2)
