"""An empty list names nothing, so where the API would read it as "left out" it is refused
(docs/api.md: nothing is ever ignored), as an empty ``queue`` already is:

* ``"queues": []`` on ``POST /endpoints`` vended an endpoint granted the ``default`` queue, one
  the caller never asked for;
* ``"targets": []`` or ``"endpoints": []`` on ``POST /connections`` and ``PATCH /connections/{id}``
  (an allowlist admitting nothing, as a caller reads it) stored no allowlist at all, so the
  connection served every repository, channel and endpoint of its scope.

Each is now ``400 invalid_argument`` naming the field, nothing is written, and the OpenAPI document
says ``minItems: 1``. ``null`` still clears an allowlist."""

from __future__ import annotations

from typing import Any

import aiohttp

from switchboard import tenancy
from switchboard.api import PREFIX, openapi_document
from switchboard.db import Database


async def test_an_empty_list_is_refused_where_it_would_widen_a_grant(db: Database, base_url: str) -> None:
    token = (await tenancy.add_human(db, "alice"))[1]
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
            async with http.request(method, f"{base_url}{PREFIX}{path}", json=body, headers=headers) as r:
                return r.status, await r.json()

        def refused(answer: tuple[int, Any], field: str) -> None:
            status, body = answer
            assert (status, body.get("error")) == (400, "invalid_argument"), (field, answer)
            assert repr(field) in body["message"], body

        refused(await call("POST", "/endpoints", {"name": "bot", "queues": []}), "queues")
        assert (await call("GET", "/endpoints"))[1]["endpoints"] == []
        status, vended = await call("POST", "/endpoints", {"name": "bot", "queues": ["ci"]})
        assert status == 201 and vended["endpoint"]["queues"] == ["ci"], vended

        connection = {"kind": "github", "name": "gh", "account_key": "github.com", "secret": "ghp_x1y2z3"}
        for field in ("targets", "endpoints"):
            refused(await call("POST", "/connections", {**connection, field: []}), field)
        assert (await call("GET", "/connections"))[1]["connections"] == []

        status, made = await call(
            "POST", "/connections", {**connection, "targets": ["acme/*"], "endpoints": ["bot"]}
        )
        assert status == 201, made
        path = f"/connections/{made['connection']['id']}"
        for field in ("targets", "endpoints"):
            refused(await call("PATCH", path, {field: []}), field)
        kept = (await call("GET", path))[1]["connection"]
        assert (kept["targets"], kept["endpoints"]) == (["acme/*"], ["bot"]), kept
        # null still clears an allowlist, as documented.
        status, cleared = await call("PATCH", path, {"targets": None, "endpoints": None})
        assert status == 200, cleared
        assert (cleared["connection"]["targets"], cleared["connection"]["endpoints"]) == (None, None)

    document = openapi_document()
    for path, method, fields in (
        ("/endpoints", "post", ("queues",)),
        ("/connections", "post", ("targets", "endpoints")),
        ("/connections/{id}", "patch", ("targets", "endpoints")),
    ):
        body = document["paths"][PREFIX + path][method]["requestBody"]
        schema = body["content"]["application/json"]["schema"]
        for field in fields:
            assert schema["properties"][field]["minItems"] == 1, (path, field)
