"""An integer query parameter (``?limit=N``) is written in ASCII digits, as the OpenAPI document's
``integer`` says. A digit of another script (a full-width five, U+FF15; an Arabic-Indic five,
U+0665) is ``400 invalid_argument`` like any other word: it used to be read as the number it stands
for, so a page of 5 was answered where the client's own parser (and the document) saw no number."""

from __future__ import annotations

import aiohttp

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.db import Database


async def test_a_limit_in_non_ascii_digits_is_refused(db: Database, base_url: str) -> None:
    _, token = await tenancy.add_human(db, "alice")
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        for path in ("/todos", "/endpoints", "/teams", "/quarantine"):
            # Full-width 5, Arabic-Indic 5, 1 and an Arabic-Indic 0, superscript 2.
            for limit in ("\uff15", "\u0665", "1\u0660", "\u00b2"):
                url = f"{base_url}{PREFIX}{path}"
                async with http.get(url, params={"limit": limit}, headers=headers) as r:
                    answer = await r.json()
                    assert (r.status, answer.get("error")) == (400, "invalid_argument"), (path, limit, answer)
                    assert "'limit'" in answer["message"], answer
            # ASCII digits still page.
            async with http.get(f"{base_url}{PREFIX}{path}", params={"limit": "5"}, headers=headers) as r:
                assert r.status == 200, (path, await r.text())
