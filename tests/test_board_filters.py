"""Review of the board: a filter value that is refused is dropped alone, the others still apply."""

from __future__ import annotations

import re

import aiohttp

from switchboard import tenancy
from switchboard.db import Database
from switchboard.testing import add_todo, ui_login


def _titles(page: str) -> list[str]:
    return re.findall(r'<a href="/ui/todos/[^"]+">([^<]+)</a>', page)


async def test_a_too_long_search_keeps_the_other_filters(db: Database, base_url: str) -> None:
    _, token = await tenancy.add_human(db, "ada")
    owner = await tenancy.resolve_owner(db, human="ada")
    bot, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner, queues=["default", "ci"])
    await add_todo(db, bot, title="Build red", queue="ci")
    await add_todo(db, bot, title="Issue opened", queue="default")
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await ui_login(http, base_url, token)
        # A search pasted from a long title (over the 200 characters a search may have), with a queue.
        async with http.get(f"{base_url}/ui", params={"queue": "ci", "q": "x" * 201}) as resp:
            page = await resp.text()
    assert resp.status == 400 and "search must be a string of at most 200" in page
    # The search is dropped with its message; the queue the person chose still filters the board
    # and is still chosen in the form.
    assert _titles(page) == ["Build red"]
    assert '<option value="ci" selected>' in page


async def test_the_search_ignores_case_beyond_ascii_on_every_engine(db: Database, base_url: str) -> None:
    # "Title contains (any case)": SQLite's own lower() folds ASCII letters only, so `über` did not
    # find "Über die Brücke" there (PostgreSQL's did).
    _, token = await tenancy.add_human(db, "ada")
    owner = await tenancy.resolve_owner(db, human="ada")
    bot, _ = await tenancy.vend_endpoint(db, name="bot", owner=owner, queues=["default"])
    await add_todo(db, bot, title="Über die Brücke")
    await add_todo(db, bot, title="Résumé ÉTÉ")
    await add_todo(db, bot, title="Plain title")
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await ui_login(http, base_url, token)
        found = {}
        for search in ("über", "BRÜCKE", "été", "plain"):
            async with http.get(f"{base_url}/ui", params={"q": search}) as resp:
                assert resp.status == 200
                found[search] = _titles(await resp.text())
    assert found == {
        "über": ["Über die Brücke"],
        "BRÜCKE": ["Über die Brücke"],
        "été": ["Résumé ÉTÉ"],
        "plain": ["Plain title"],
    }
