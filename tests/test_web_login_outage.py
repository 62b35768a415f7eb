"""The login page while the database is away: the 503 page with ``Retry-After`` that every other
``/ui`` page answers (docs/architecture.md: every surface answers an outage with 503), never a JSON
``500 internal`` with a traceback in the log."""

from __future__ import annotations

import logging
import re

import aiohttp
import pytest

from switchboard import tenancy
from switchboard.db import Database
from switchboard.services import Services
from switchboard.testing import ui_login

# Nothing listens on port 1: every connection attempt is refused at once.
UNREACHABLE = "postgresql+asyncpg://nobody@127.0.0.1:1/none"
CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


async def answer(resp: aiohttp.ClientResponse) -> tuple[int, str, str | None, str]:
    return resp.status, resp.content_type, resp.headers.get("Retry-After"), await resp.text()


async def test_the_login_page_answers_503_while_the_database_is_unreachable(
    services: Services, base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, token = await tenancy.add_human(services.db, "ada")
    # unsafe=True: the server is an IP address (127.0.0.1), whose cookies a default jar refuses.
    async with (
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as logged_in,
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as logged_out,
    ):
        await ui_login(logged_in, base_url, token)
        # Ada's second browser has the login form open (its CSRF cookie set) before the outage.
        async with logged_out.get(f"{base_url}/ui/login") as resp:
            found = CSRF_RE.search(await resp.text())
        assert found is not None
        real = services.db
        services.db = Database(UNREACHABLE)
        caplog.set_level(logging.ERROR)
        try:
            answers = []
            # A browser whose session cookie must be looked up, e.g. following a bookmark to the
            # login page; and the login form sent with the token.
            login = f"{base_url}/ui/login"
            async with logged_in.get(f"{login}?next=/ui/endpoints", allow_redirects=False) as resp:
                answers.append(await answer(resp))
            form = {"csrf": found.group(1), "token": token}
            async with logged_out.post(login, data=form, allow_redirects=False) as resp:
                answers.append(await answer(resp))
        finally:
            await services.db.dispose()
            services.db = real
    for status, content_type, retry_after, page in answers:
        assert (status, content_type) == (503, "text/html"), page[:300]
        assert retry_after is not None
        assert "The database is unavailable" in page
        assert token not in page
    # An outage is not a bug: no traceback logged for it.
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
