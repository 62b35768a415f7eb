from __future__ import annotations

import aiohttp

from switchboard import tenancy


async def test_healthz_reports_the_engine(base_url: str, services) -> None:
    async with aiohttp.ClientSession() as http, http.get(f"{base_url}/healthz") as resp:
        assert resp.status == 200
        assert (await resp.json())["database"] == services.db.dialect


async def test_vend_endpoint_stores_only_the_token_hash(db) -> None:
    owner = await tenancy.resolve_owner(db, human=(await tenancy.add_human(db, "ada"))[0].handle)
    endpoint, token = await tenancy.vend_endpoint(db, name="Ada's agent", owner=owner)
    assert token.startswith("sbk_") and endpoint.slug == "ada-s-agent"
    assert (await tenancy.endpoint_by_token(db, token)).id == endpoint.id


async def test_a_provider_secret_with_control_characters_is_refused(services) -> None:
    import pytest

    from switchboard.errors import SwitchboardError

    human, _ = await tenancy.add_human(services.db, "bo")
    owner = await tenancy.resolve_owner(services.db, human=human.handle)
    await tenancy.vend_endpoint(services.db, name="bo", owner=owner)
    new = await tenancy.create_webhook(
        services.db, services.vault, services.providers, endpoint_slug="bo", source="stripe"
    )
    for bad in ("whsec_a\x00b", "whsec_\x1b[31m", "two words", ""):
        with pytest.raises(SwitchboardError, match="printable"):
            await tenancy.set_webhook_secret(
                services.db, services.vault, services.providers, new.webhook.id, bad
            )
    webhook = await tenancy.get_webhook(services.db, new.webhook.id)
    assert webhook.secret_state == "awaiting"


def test_ids_made_in_one_process_increase_even_within_a_millisecond() -> None:
    from switchboard.ids import new_id

    ids = [new_id("td") for _ in range(5000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
