"""Every string the operator API refuses past a length says that length in the OpenAPI document
(``maxLength``), as docs/api.md promises ("a string over its documented maxLength is 400
invalid_argument naming the field"). An endpoint's name, a connection's name, account key and
secret, a webhook's instance and provider secret, and the todo filters (``search``, ``queue``, …)
were refused past their bound with no bound in the document, so a client checking its input
against the document sent values the server then refused."""

from __future__ import annotations

from typing import Any

import aiohttp

from switchboard import tenancy
from switchboard.api import PREFIX, openapi_document
from switchboard.db import Database

# (method, path as documented, where the field is, field, its bound)
BOUNDS = (
    ("post", "/endpoints", "body", "name", 200),
    ("post", "/webhooks", "body", "instance", 300),
    ("put", "/webhooks/{id}/secret", "body", "secret", 512),
    ("post", "/connections", "body", "name", 100),
    ("post", "/connections", "body", "account_key", 300),
    ("post", "/connections", "body", "secret", 4096),
    ("patch", "/connections/{id}", "body", "name", 100),
    ("post", "/connections/{id}/rotate", "body", "secret", 4096),
    ("get", "/todos", "query", "search", 200),
    ("get", "/todos", "query", "queue", 300),
    ("get", "/todos", "query", "place", 300),
    ("post", "/todos/requeue", "body", "search", 200),
    ("post", "/todos/requeue", "body", "kind", 300),
)


def _documented(method: str, path: str, where: str, field: str) -> Any:
    entry = openapi_document()["paths"][PREFIX + path][method]
    if where == "query":
        return next(p["schema"] for p in entry["parameters"] if p["name"] == field).get("maxLength")
    schema = entry["requestBody"]["content"]["application/json"]["schema"]
    return schema["properties"][field].get("maxLength")


async def test_every_bounded_string_documents_its_bound(db: Database, base_url: str) -> None:
    undocumented = [
        (method, path, field, bound)
        for method, path, where, field, bound in BOUNDS
        if _documented(method, path, where, field) != bound
    ]
    assert undocumented == [], undocumented

    token = (await tenancy.add_human(db, "alice"))[1]
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, body: Any = None, **params: str) -> tuple[int, Any]:
            async with http.request(
                method, f"{base_url}{PREFIX}{path}", json=body, params=params, headers=headers
            ) as r:
                return r.status, await r.json()

        assert (await call("POST", "/endpoints", {"name": "e" * 200}))[0] == 201
        _, hook = await call("POST", "/webhooks", {"endpoint": "e" * 63, "source": "slack"})
        hook_path = f"/webhooks/{hook['webhook']['id']}/secret"
        assert (await call("PUT", hook_path, {"secret": "s" * 512}))[0] == 200
        connection = {"kind": "github", "name": "n" * 100, "account_key": "github.com", "secret": "x" * 4096}
        status, made = await call("POST", "/connections", connection)
        assert status == 201, made
        one = f"/connections/{made['connection']['id']}"
        assert (await call("GET", "/todos", search="s" * 200, queue="q" * 300))[0] == 200

        over = (
            ("POST", "/endpoints", {"name": "e" * 201}, {}, "name"),
            ("PUT", hook_path, {"secret": "s" * 513}, {}, "secret"),
            ("POST", "/connections", {**connection, "name": "m" * 101}, {}, "name"),
            ("POST", "/connections", {**connection, "name": "k", "secret": "x" * 4097}, {}, "secret"),
            ("PATCH", one, {"name": "n" * 101}, {}, "name"),
            ("POST", f"{one}/rotate", {"secret": "y" * 4097}, {}, "secret"),
            ("GET", "/todos", None, {"search": "s" * 201}, "search"),
            ("POST", "/todos/requeue", {"kind": "k" * 301, "dry_run": True}, {}, "kind"),
        )
        for method, path, body, params, field in over:
            status, answer = await call(method, path, body, **params)
            assert (status, answer["error"]) == (400, "invalid_argument"), (method, path, field, answer)
            assert repr(field) in answer["message"], (method, path, answer)
        # Nothing was made or changed by the refused requests.
        assert len((await call("GET", "/endpoints"))[1]["endpoints"]) == 1
        assert (await call("GET", one))[1]["connection"]["name"] == "n" * 100
