"""The OpenAPI document lists every status a route may answer (docs/api.md). A body in a
``Content-Encoding`` the server does not decode is ``415 unsupported_encoding`` on every route that
reads one (docs/api.md, "Requests and errors"), so every route's entry must list 415: it used to
list none, and a client built from the document met an answer it did not describe."""

from __future__ import annotations

import aiohttp

from switchboard import tenancy
from switchboard.api import OPERATIONS, PREFIX, openapi_document
from switchboard.db import Database


async def test_an_undecoded_content_encoding_is_a_documented_415_on_every_route(
    db: Database, base_url: str
) -> None:
    document = openapi_document()
    for op in OPERATIONS:
        responses = document["paths"][PREFIX + op.path][op.method.lower()]["responses"]
        assert "415" in responses, (op.operation_id, sorted(responses))
        assert responses["415"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/Error"
        }

    _, token = await tenancy.add_human(db, "alice")
    headers = {"Authorization": f"Bearer {token}", "Content-Encoding": "br"}
    async with aiohttp.ClientSession() as http:
        for method, path in (("POST", "/teams"), ("GET", "/teams"), ("PATCH", "/webhooks/wh_x")):
            async with http.request(method, f"{base_url}{PREFIX}{path}", data=b"{}", headers=headers) as r:
                answer = await r.json()
                assert r.status == 415 and answer["error"] == "unsupported_encoding", (method, path, answer)
