"""The web UI while the database is away: an error page with 503 (``db.is_unavailable``), never a
traceback or a 500, and the pages work again once the database is back."""

from __future__ import annotations

import aiohttp

from switchboard import tenancy
from switchboard.db import Database
from switchboard.services import Services
from switchboard.testing import ui_login

# Nothing listens on port 1: every connection attempt is refused at once.
UNREACHABLE = "postgresql+asyncpg://nobody@127.0.0.1:1/none"


async def test_pages_answer_503_while_the_database_is_unreachable(services: Services, base_url: str) -> None:
    _, token = await tenancy.add_human(services.db, "ada")
    # unsafe=True: the server is an IP address (127.0.0.1), whose cookies a default jar refuses.
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await ui_login(http, base_url, token)
        real = services.db
        services.db = Database(UNREACHABLE)
        try:
            async with http.get(f"{base_url}/ui") as resp:
                assert resp.status == 503
                assert resp.content_type == "text/html"
                assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
                page = await resp.text()
            assert "The database is unavailable" in page
            assert "Traceback" not in page and "asyncpg" not in page
            # The 404 page answers too, without the viewer (whose session cannot be read).
            async with http.get(f"{base_url}/ui/no-such-page") as resp:
                assert resp.status == 404
                assert "There is no such page." in await resp.text()
        finally:
            await services.db.dispose()
            services.db = real
        # The session outlived the outage.
        async with http.get(f"{base_url}/ui", allow_redirects=False) as resp:
            assert resp.status == 200
            assert "ada" in await resp.text()
