"""Review of the delivery pages: redeliver's confirmation page is for a delivery of this webhook only."""

from __future__ import annotations

import json

import aiohttp
from sqlalchemy import select

from switchboard import tenancy
from switchboard.models import Event
from switchboard.services import Services
from switchboard.testing import github_headers, make_webhook, post, ui_login

BODY = json.dumps({"action": "opened", "issue": {"number": 1, "title": "t"}}).encode()


async def test_redeliver_asks_only_about_a_delivery_of_this_webhook(
    services: Services, base_url: str
) -> None:
    _, token = await tenancy.add_human(services.db, "ada")
    _, _, mine = await make_webhook(services, "github")
    # Bob's webhook has a stored delivery; its id is not Ada's to redeliver.
    bob_ingest, bob_secret, _ = await make_webhook(services, "github", owner="bob", endpoint="bob-agent")
    assert bob_secret is not None
    status, answer, _ = await post(base_url, bob_ingest, BODY, github_headers(bob_secret, BODY, "issues"))
    assert status == 202, answer
    async with services.db.read() as s:
        bobs = await s.scalar(select(Event.id))
    assert bobs is not None
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await ui_login(http, base_url, token)
        for delivery in (bobs, "ev_01jzzzzzzzzzzzzzzzzzzzzzzz"):
            url = f"{base_url}/ui/webhooks/{mine}/deliveries/{delivery}/redeliver"
            async with http.get(url, allow_redirects=False) as resp:
                page = await resp.text()
            # No "Redeliver this delivery?" page with a "Yes" button for a delivery that is not
            # there: a 404 like every other page about it.
            assert resp.status == 404, (delivery, resp.status)
            assert "Yes, redeliver it" not in page
