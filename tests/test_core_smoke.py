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
