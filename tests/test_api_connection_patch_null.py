"""``PATCH /connections/{id}``: absent is unchanged, and a ``null`` the document accepts is never
silently ignored (docs/api.md: "Nothing is ever ignored"). ``config: null`` clears the config, as it
makes none on ``POST /connections``; it used to answer 200 and leave the old config in place."""

from __future__ import annotations

from typing import Any

import aiohttp

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.db import Database


async def test_patch_config_null_clears_it_as_create_does(db: Database, base_url: str) -> None:
    _, token = await tenancy.add_human(db, "alice")
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, body: Any = None) -> Any:
            async with http.request(method, f"{base_url}{PREFIX}{path}", json=body, headers=headers) as r:
                assert r.status < 300, (method, path, r.status, await r.text())
                return (await r.json())["connection"]

        made = await call(
            "POST",
            "/connections",
            {"kind": "github", "name": "gh", "account_key": "github.com", "secret": "s3cr3t", "config": None},
        )
        assert made["config"] == {}
        cid = made["id"]
        assert (await call("PATCH", f"/connections/{cid}", {"config": {"a": 1}}))["config"] == {"a": 1}
        # Absent: unchanged.
        assert (await call("PATCH", f"/connections/{cid}", {"name": "gh2"}))["config"] == {"a": 1}
        # null: cleared, in the answer and as stored.
        assert (await call("PATCH", f"/connections/{cid}", {"config": None}))["config"] == {}
        assert (await call("GET", f"/connections/{cid}"))["config"] == {}
