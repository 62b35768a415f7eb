"""The installed kinds describe themselves where people choose one: ``GET /api/v1/kinds`` and the web
UI's connection form, whose account-key hints come from each kind (a kind installed later shows up
with no core change)."""

from __future__ import annotations

import html

import aiohttp
import pytest
from fixtures import memo_plugin

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.services import Services
from switchboard.testing import ui_login


@pytest.fixture
def extra_providers() -> list[object]:
    return [memo_plugin]


async def test_the_api_lists_every_installed_kind_with_its_description(
    services: Services, base_url: str
) -> None:
    _, token = await tenancy.add_human(services.db, "ada")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base_url}{PREFIX}/kinds") as resp:
            assert resp.status == 401
        async with http.get(
            f"{base_url}{PREFIX}/kinds", headers={"Authorization": f"Bearer {token}"}
        ) as resp:
            assert resp.status == 200
            kinds = await resp.json()
        async with http.get(f"{base_url}{PREFIX}/openapi.json") as resp:
            document = await resp.json()
    sources = {k["name"]: k for k in kinds["sources"]}
    connections = {k["name"]: k for k in kinds["connections"]}
    assert {"generic", "stripe", "github", "gitea", "slack", "cairn", "memo"} <= set(sources)
    assert sources["memo"]["description"] == "Memo rooms (a throwaway test provider)."
    assert (sources["stripe"]["secret"], sources["github"]["secret"], sources["generic"]["secret"]) == (
        "provider",
        "minted",
        "none",
    )
    assert connections["memo"] == {
        "name": "memo",
        "description": "A Memo bot token.",
        "account_key_hint": "the memo workspace name",
        "default_account_key": None,
        "text_limit": 1000,
        "plugin": "fixtures.memo_plugin",
    }
    assert connections["slack"]["account_key_hint"] == "the Slack team id (T0123ABCD)"
    # Operator settings are not the API's to show.
    assert "SWITCHBOARD_" not in str(kinds)
    assert document["paths"][f"{PREFIX}/kinds"]["get"]["operationId"] == "listKinds"


async def test_the_connection_form_hints_come_from_the_kinds(services: Services, base_url: str) -> None:
    _, token = await tenancy.add_human(services.db, "ada")
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as http:
        await ui_login(http, base_url, token)
        async with http.get(f"{base_url}/ui/connections") as resp:
            assert resp.status == 200
            page = html.unescape(await resp.text())
    for kind in services.providers.connections.values():
        assert f"{kind.name}: {kind.account_key_hint}" in page, kind.name
    assert "memo: the memo workspace name" in page
