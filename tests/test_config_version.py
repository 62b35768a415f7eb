"""``webhooks.config_version``: the database moves it on whenever a webhook, one of its routes or an
endpoint it delivers to changes, however the change is made (migration 0010). Ingest's writer
trusts it to know a delivery was decided on the webhook as it is now (``ingest_config``), so every
kind of change is checked here, made by Switchboard's own functions and by raw SQL alike."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg
import pytest
from sqlalchemy import text

from switchboard import tenancy, webhook_ops
from switchboard.services import Services
from switchboard.testing import engine_name, make_webhook


async def _version(services: Services, webhook_id: str) -> int:
    async with services.db.read() as s:
        return int(
            (
                await s.execute(
                    text("SELECT config_version FROM webhooks WHERE id = :id"), {"id": webhook_id}
                )
            ).scalar_one()
        )


async def _raw(services: Services, sql: str) -> None:
    # Straight to the database: no ``config_changes.changing``, so nothing but the triggers knows.
    async with services.db.write() as s:
        await s.execute(text(sql))


async def _world(services: Services) -> tuple[str, str]:
    """Ada's generic webhook routed to bob's endpoint too, and a second webhook of ada's with no
    routes: (the routed webhook's id, the other's)."""
    _, _, routed = await make_webhook(services, "generic")
    _, _, other = await make_webhook(services, "generic")
    await tenancy.add_human(services.db, "bob")
    bob = await tenancy.resolve_owner(services.db, human="bob")
    await tenancy.vend_endpoint(services.db, name="bob-agent", owner=bob)
    await tenancy.vend_endpoint(services.db, name="bob-spare", owner=bob)
    await tenancy.add_route(services.db, routed, "bob-agent")
    return routed, other


CHANGES: dict[str, str] = {
    "a webhook column": "UPDATE webhooks SET description = 'changed' WHERE id = '{routed}'",
    "a routed endpoint revoked": "UPDATE endpoints SET state = 'revoked' WHERE slug = 'bob-agent'",
    "a routed endpoint's queues": "UPDATE endpoints SET queues = '[]' WHERE slug = 'bob-agent'",
    "a route deleted": "DELETE FROM routes WHERE webhook_id = '{routed}'",
    "a route moved to another endpoint": (
        "UPDATE routes SET endpoint_id = (SELECT id FROM endpoints WHERE slug = 'bob-spare')"
        " WHERE webhook_id = '{routed}'"
    ),
}


@pytest.mark.parametrize("change", list(CHANGES))
async def test_a_change_made_with_raw_sql_moves_the_version_of_the_webhooks_it_concerns(
    services: Services, change: str
) -> None:
    routed, other = await _world(services)
    before, other_before = await _version(services, routed), await _version(services, other)
    await _raw(services, CHANGES[change].format(routed=routed))
    assert await _version(services, routed) > before
    # A change to a route or to bob's endpoints does not concern ada's other webhook.
    if change != "a webhook column":
        assert await _version(services, other) == other_before


async def test_an_owner_endpoint_change_moves_every_webhook_it_owns(services: Services) -> None:
    routed, other = await _world(services)
    before = (await _version(services, routed), await _version(services, other))
    await _raw(services, "UPDATE endpoints SET name = 'renamed' WHERE slug = 'ada-agent'")
    after = (await _version(services, routed), await _version(services, other))
    assert after[0] > before[0] and after[1] > before[1]


async def test_an_unrelated_endpoint_change_moves_nothing(services: Services) -> None:
    routed, other = await _world(services)
    before = (await _version(services, routed), await _version(services, other))
    await _raw(services, "UPDATE endpoints SET name = 'renamed' WHERE slug = 'bob-spare'")
    await _raw(services, "DELETE FROM endpoints WHERE slug = 'bob-spare'")
    assert (await _version(services, routed), await _version(services, other)) == before


async def test_a_new_route_moves_the_version(services: Services) -> None:
    routed, _ = await _world(services)
    before = await _version(services, routed)
    await tenancy.add_route(services.db, routed, "bob-spare")
    assert await _version(services, routed) > before


Change = Callable[[Services, str], Awaitable[object]]


async def _pause(services: Services, webhook_id: str) -> None:
    await webhook_ops.update_webhook(services.db, webhook_id, paused=True)


async def _revoke(services: Services, webhook_id: str) -> None:
    await tenancy.revoke_endpoint(services.db, "bob-agent")


@pytest.mark.parametrize("change", [_pause, _revoke], ids=["pause", "revoke"])
async def test_switchboards_own_changes_move_the_version(services: Services, change: Change) -> None:
    routed, _ = await _world(services)
    before = await _version(services, routed)
    await change(services, routed)
    assert await _version(services, routed) > before


async def test_a_secret_rotation_moves_the_version(services: Services) -> None:
    _, _, github = await make_webhook(services, "github")
    before = await _version(services, github)
    await tenancy.rotate_webhook_secret(services.db, services.vault, services.providers, github)
    assert await _version(services, github) > before


# Statements that concern two webhooks at once, made so that a plain scan would meet the second
# webhook first: the endpoint owning both (the first webhook's row moved after the second's by an
# update), and the routes of both to one endpoint (the second webhook's route added first).
TWO_AT_ONCE = {
    "an endpoint change": "UPDATE endpoints SET name = 'renamed' WHERE slug = 'ada-agent'",
    "a routes deletion": (
        "DELETE FROM routes WHERE endpoint_id = (SELECT id FROM endpoints WHERE slug = 'bob-agent')"
    ),
}


@pytest.mark.skipif(engine_name() != "postgresql", reason="PostgreSQL's row locks")
@pytest.mark.parametrize("change", list(TWO_AT_ONCE))
async def test_a_change_to_two_webhooks_waits_for_the_writers_share_locks_instead_of_deadlocking(
    services: Services, database_url: str, change: str
) -> None:
    """The writer share-locks its batch's webhooks in id order; the triggers lock the webhooks a
    statement concerns in the same order, so a change that concerns two webhooks waits for a batch
    that holds one of them and wants the other, rather than deadlocking with it."""
    _, _, first = await make_webhook(services, "generic")
    _, _, second = await make_webhook(services, "generic")
    assert first < second
    await tenancy.add_human(services.db, "bob")
    bob = await tenancy.resolve_owner(services.db, human="bob")
    await tenancy.vend_endpoint(services.db, name="bob-agent", owner=bob)
    await tenancy.add_route(services.db, second, "bob-agent")
    await tenancy.add_route(services.db, first, "bob-agent")
    await _raw(services, f"UPDATE webhooks SET description = 'moved' WHERE id = '{first}'")
    url = database_url.replace("postgresql+asyncpg://", "postgresql://")
    batch, other = await asyncpg.connect(url), await asyncpg.connect(url)
    try:
        share = "SELECT id FROM webhooks WHERE id = $1 FOR SHARE"
        async with batch.transaction():
            await batch.execute(share, first)
            changing = asyncio.create_task(other.execute(TWO_AT_ONCE[change]))
            await asyncio.sleep(0.3)
            assert not changing.done()  # waiting for the first webhook's share lock
            # Had the change locked the second webhook first, this would deadlock (PostgreSQL
            # aborts one of the two after deadlock_timeout).
            await asyncio.wait_for(batch.execute(share, second), 10)
        await asyncio.wait_for(changing, 10)
    finally:
        await batch.close()
        await other.close()
