"""Review of the webhook edit page: a refused edit comes back as the edit page with what was typed."""

from __future__ import annotations

import html
import re

import aiohttp

from switchboard import tenancy
from switchboard.services import Services
from switchboard.testing import make_webhook, ui_login

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


async def test_a_refused_edit_keeps_the_typed_name_and_description(services: Services, base_url: str) -> None:
    _, token = await tenancy.add_human(services.db, "ada")
    _, _, webhook_id = await make_webhook(services, "github")
    # A name pasted with a non-breaking space (not one line of printable text: refused), and a
    # description typed next to it.
    name, description = "acme\u00a0api issues", "triage for the API team, set up by Ada"
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await ui_login(http, base_url, token)
        async with http.get(f"{base_url}/ui/webhooks/{webhook_id}/edit") as resp:
            found = CSRF_RE.search(await resp.text())
        assert found is not None
        form = {"csrf": found.group(1), "name": name, "description": description}
        async with http.post(
            f"{base_url}/ui/webhooks/{webhook_id}/edit", data=form, allow_redirects=False
        ) as resp:
            page = await resp.text()
    assert resp.status == 400
    assert "the name must be one line of printable text" in page
    # Still the edit form, filled with what was typed, so the person fixes the name and saves.
    assert f'action="/ui/webhooks/{webhook_id}/edit"' in page
    values = [
        html.unescape(v)
        for v in re.findall(r'<input[^>]*name="(?:name|description)"[^>]*value="([^"]*)"', page)
    ]
    assert values == [name, description]
    assert (await tenancy.get_webhook(services.db, webhook_id)).description is None
