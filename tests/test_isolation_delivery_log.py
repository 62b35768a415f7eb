"""A webhook's delivery log lists the todos each delivery minted. Those a route minted in another
scope's endpoint are that scope's: the webhook's side must not watch them (their ids, their state as
the other side's agents work them) in its log, in the API, the web UI or a delivery's detail."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from switchboard import tenancy, todos
from switchboard.api import PREFIX
from switchboard.services import Services
from switchboard.testing import post, ui_login


async def test_the_log_does_not_show_another_scopes_todos(
    services: Services, server: Any, base_url: str
) -> None:
    db = services.db
    await tenancy.add_human(db, "alice")
    _, bob = await tenancy.add_human(db, "bob")
    await tenancy.add_team(db, "ops", "alice")
    ops_bot, _ = await tenancy.vend_endpoint(
        db, name="Ops Bot", owner=await tenancy.resolve_owner(db, team="ops")
    )
    await tenancy.vend_endpoint(db, name="Bob Bot", owner=await tenancy.resolve_owner(db, human="bob"))
    made = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="bob-bot", source="generic"
    )
    await tenancy.add_route(db, made.webhook.id, "ops-bot")  # the operator consented for both
    status, answer, _ = await post(
        base_url, made.ingest_token, b'{"hello": "world"}', {"Content-Type": "application/json"}
    )
    assert status == 202, answer
    ids = {t["endpoint"]: t["id"] for t in answer["todos"]}
    # Alice's agent works its todo: Bob must not see it go from pending to claimed.
    await todos.claim(db, ops_bot, ids["ops-bot"])

    headers = {"Authorization": f"Bearer {bob}"}
    log_path = f"{base_url}{PREFIX}/webhooks/{made.webhook.id}/deliveries"
    async with aiohttp.ClientSession() as http:
        async with http.get(log_path, headers=headers) as r:
            listed = json.loads(await r.text())
        [row] = listed["deliveries"]
        async with http.get(f"{log_path}/{row['id']}", headers=headers) as r:
            detail = json.loads(await r.text())["delivery"]
    for shown in (row, detail):
        assert [(t["id"], t["endpoint"], t["state"]) for t in shown["todos"]] == [
            (ids["bob-bot"], "bob-bot", "pending")
        ], shown["todos"]

    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        await ui_login(browser, base_url, bob)
        for page in (
            f"/ui/webhooks/{made.webhook.id}/deliveries",
            f"/ui/webhooks/{made.webhook.id}/deliveries/{row['id']}",
        ):
            async with browser.get(f"{base_url}{page}") as r:
                text = await r.text()
                assert r.status == 200
            assert ids["bob-bot"] in text and ids["ops-bot"] not in text, page
