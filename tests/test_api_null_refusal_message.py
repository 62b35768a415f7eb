"""A field that takes any JSON value but null (a rule set's ``rules``: a list, or left out) refused
``null`` with "must be any JSON value", which null is: the message contradicted itself, as
``"payload": null`` once did. It now says what is wanted: a value other than null."""

from __future__ import annotations

from typing import Any

import aiohttp

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.db import Database


async def test_a_null_rule_list_is_refused_with_a_message_that_says_why(db: Database, base_url: str) -> None:
    token = (await tenancy.add_human(db, "alice"))[1]
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, body: object) -> tuple[int, Any]:
            async with http.request(method, f"{base_url}{PREFIX}{path}", json=body, headers=headers) as r:
                return r.status, await r.json()

        assert (await call("POST", "/endpoints", {"name": "bot"}))[0] == 201
        status, made = await call("POST", "/webhooks", {"endpoint": "bot", "source": "generic"})
        assert status == 201, made
        rules = f"/webhooks/{made['webhook']['id']}/rules"
        for method, path in (("PUT", rules), ("POST", f"{rules}/test")):
            status, answer = await call(method, path, {"rules": None})
            assert (status, answer["error"]) == (400, "invalid_argument"), answer
            assert answer["message"] == "field 'rules' must be a JSON value other than null", answer
