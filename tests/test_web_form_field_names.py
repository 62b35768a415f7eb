"""Review of the web UI's form handling: malformed forms are refused with a 4xx page, never a 500."""

from __future__ import annotations

import re

import aiohttp
import pytest

from switchboard import tenancy
from switchboard.services import Services
from switchboard.testing import ui_login

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')
UTF7 = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-7"}


@pytest.mark.parametrize("value", ["a%00b", "%2B2AA-"], ids=["nul-value", "surrogate-value"])
async def test_a_field_named_with_a_lone_surrogate_is_refused_not_a_500(
    services: Services, base_url: str, value: str
) -> None:
    # In utf-7, "+2AA-" is a lone surrogate: a field *name* made of one, with a value that is refused
    # (NUL, or a lone surrogate itself), must come back as a 400 page like any unreadable form.
    _, token = await tenancy.add_human(services.db, "ada")
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await ui_login(http, base_url, token)
        async with http.get(f"{base_url}/ui/teams") as resp:
            found = CSRF_RE.search(await resp.text())
        assert found is not None
        body = f"csrf={found.group(1)}&+2AA-={value}".encode()
        async with http.post(f"{base_url}/ui/teams", data=body, headers=UTF7, allow_redirects=False) as resp:
            page = await resp.text()
            assert resp.status == 400, page
            assert "Invalid input" in page

        # The login form reads its fields the same way.
        async with http.post(f"{base_url}/ui/login", data=body, headers=UTF7, allow_redirects=False) as resp:
            assert resp.status == 400, await resp.text()
