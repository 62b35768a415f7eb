"""A connection's ``endpoints`` allowlist on ``POST /connections`` and ``PATCH /connections/{id}``
is bounded (at most 1000 slugs, as MCP's ``create_connection`` already was), and the OpenAPI
document says so (``maxItems``), as it says ``targets``' bound of 100.

It had no bound: each slug is looked up inside the connection's write transaction, so one body of
a few MiB naming an endpoint over and over (``["bot", "bot", …]``) held the database's writer for
minutes (20,000 slugs: about 20 s on SQLite), and every other tenant's ingest, claims and completes
waited behind it. Now more than 1000 is ``400 invalid_argument`` before anything is read, and a
slug named twice is looked up once."""

from __future__ import annotations

from typing import Any

import aiohttp

from switchboard import tenancy
from switchboard.api import PREFIX, openapi_document
from switchboard.db import Database


async def test_a_connection_allowlist_is_bounded_and_documented(db: Database, base_url: str) -> None:
    for path, method in (("/connections", "post"), ("/connections/{id}", "patch")):
        body = openapi_document()["paths"][PREFIX + path][method]["requestBody"]
        schema = body["content"]["application/json"]["schema"]["properties"]
        assert (schema["endpoints"].get("maxItems"), schema["targets"].get("maxItems")) == (1000, 100), path

    token = (await tenancy.add_human(db, "alice"))[1]
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
            async with http.request(method, f"{base_url}{PREFIX}{path}", json=body, headers=headers) as r:
                return r.status, await r.json()

        assert (await call("POST", "/endpoints", {"name": "bot"}))[0] == 201
        connection = {"kind": "github", "name": "gh", "account_key": "github.com", "secret": "ghp_x1y2z3"}
        for field, many in (("endpoints", ["bot"] * 1001), ("targets", ["acme/*"] * 101)):
            status, answer = await call("POST", "/connections", {**connection, field: many})
            assert (status, answer.get("error")) == (400, "invalid_argument"), (field, answer)
            assert repr(field) in answer["message"], answer
        assert (await call("GET", "/connections"))[1]["connections"] == []

        # At the bound it is taken, each endpoint once.
        status, made = await call("POST", "/connections", {**connection, "endpoints": ["bot"] * 1000})
        assert status == 201 and made["connection"]["endpoints"] == ["bot"], made
        one = f"/connections/{made['connection']['id']}"
        status, answer = await call("PATCH", one, {"endpoints": ["bot"] * 1001})
        assert (status, answer.get("error")) == (400, "invalid_argument"), answer
        assert (await call("PATCH", one, {"endpoints": ["bot"] * 1000}))[0] == 200
