"""An unknown field is refused by name (docs/api.md, "Requests and errors"), whatever the name: one
holding a lone surrogate (a ``\\ud800`` escape) is a 400 like any other, never a 500 from writing the
name back into the error as text no UTF-8 answer can carry."""

from __future__ import annotations

import json

import aiohttp

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.db import Database


async def _post(base_url: str, token: str, path: str, raw: bytes) -> tuple[int, str, bytes]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base_url}{PREFIX}{path}", data=raw, headers=headers) as r:
            return r.status, r.content_type, await r.read()


async def test_an_unknown_field_named_with_a_lone_surrogate_is_a_400(db: Database, base_url: str) -> None:
    _, token = await tenancy.add_human(db, "alice")
    for raw in (b'{"\\ud800": 1}', b'{"slug": "ops", "x\\udfff": true}'):
        status, content_type, body = await _post(base_url, token, "/teams", raw)
        assert (status, content_type) == (400, "application/json"), (raw, status, body)
        answer = json.loads(body)  # UTF-8 JSON, as every answer
        assert answer["error"] == "invalid_argument" and "unknown field" in answer["message"], answer
        assert "\\ud800" in answer["message"] or "\\udfff" in answer["message"], answer
    # Nothing was made by the refused requests.
    assert await tenancy.list_teams(db) == []
