"""A refusal on a webhook's page (docs/web.md, "Webhook") comes back in the card of the form that was
sent: a refused trusted-actors setting under **Trusted actors**, a refused rule set under **Routing
rules**, never one shown as the other's."""

from __future__ import annotations

import re

import aiohttp

from switchboard import tenancy
from switchboard.services import Services
from switchboard.testing import make_webhook, ui_login

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
REFUSED = '<div class="refusal" role="alert">'


def card(page: str, heading: str) -> str:
    """The page from ``<h2>heading</h2>`` to the next ``<h2>``."""
    start = page.index(f"<h2>{heading}</h2>")
    end = page.find("<h2>", start + 1)
    return page[start : end if end != -1 else len(page)]


async def test_a_refusal_shows_in_the_card_of_the_form_that_was_sent(
    services: Services, base_url: str
) -> None:
    _, token = await tenancy.add_human(services.db, "ada")
    _, _, webhook_id = await make_webhook(services, "github", trust={"logins": ["octocat"]})
    page_url = f"{base_url}/ui/webhooks/{webhook_id}"
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await ui_login(http, base_url, token)
        async with http.get(page_url) as resp:
            found = CSRF_RE.search(await resp.text())
        assert found is not None
        csrf = found.group(1)

        # Allow all with a list typed next to it: the trusted actors' form is refused.
        form = {"csrf": csrf, "trust": "allow_all", "actors": "mallory"}
        async with http.post(f"{page_url}/trust", data=form, allow_redirects=False) as resp:
            assert resp.status == 400
            page = await resp.text()
        trust, rules = card(page, "Trusted actors"), card(page, "Routing rules")
        assert REFUSED in trust and "invalid_trust" in trust and "mallory" in trust
        # The rule set was not sent, and nothing says it was refused.
        assert REFUSED not in rules and "invalid_trust" not in rules

        # A rule set that is not JSON: the rules' form is refused, the trusted actors are untouched.
        form = {"csrf": csrf, "do": "preview", "rules": "{not json"}
        async with http.post(f"{page_url}/rules", data=form, allow_redirects=False) as resp:
            assert resp.status == 400
            page = await resp.text()
        trust, rules = card(page, "Trusted actors"), card(page, "Routing rules")
        assert REFUSED in rules and "invalid_rule" in rules and "{not json" in rules
        assert REFUSED not in trust and "invalid_rule" not in trust
