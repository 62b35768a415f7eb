"""``POST /todos`` takes ``payload``: "any JSON value (default {})", as the OpenAPI document says
(its schema has no type, so null is one). A ``null`` payload used to be refused with "field
'payload' must be any JSON value"; it is the default, ``{}``, as ``switchboard todo push --payload
null`` makes it."""

from __future__ import annotations

from typing import Any

import aiohttp

from switchboard import tenancy
from switchboard.api import PREFIX, openapi_document
from switchboard.db import Database


async def test_push_with_a_null_payload_makes_the_default_payload(db: Database, base_url: str) -> None:
    schema = openapi_document()["paths"][f"{PREFIX}/todos"]["post"]["requestBody"]["content"]
    assert "type" not in schema["application/json"]["schema"]["properties"]["payload"]  # null included
    _, token = await tenancy.add_human(db, "alice")
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
            async with http.request(method, f"{base_url}{PREFIX}{path}", json=body, headers=headers) as r:
                return r.status, await r.json()

        assert (await call("POST", "/endpoints", {"name": "bot"}))[0] == 201
        status, made = await call("POST", "/todos", {"endpoint": "bot", "title": "t", "payload": None})
        assert status == 201, made
        status, shown = await call("GET", f"/todos/{made['todo']['id']}")
        assert status == 200 and shown["todo"]["payload"] == {}, shown
