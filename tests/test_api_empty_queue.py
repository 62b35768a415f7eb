"""``queue`` on ``POST /todos`` and ``POST /webhooks`` names a queue of the endpoint; left out, the
endpoint's first is taken. An empty one names no queue: ``400 invalid_argument`` (as on a
quarantine release), never read as "left out" (docs/api.md: nothing is ever ignored). It used to put
the todo, or the webhook's deliveries, on the first queue without a word."""

from __future__ import annotations

from typing import Any

import aiohttp

from switchboard import tenancy
from switchboard.api import PREFIX
from switchboard.db import Database


async def test_an_empty_queue_is_refused_on_push_and_webhook_create(db: Database, base_url: str) -> None:
    token = (await tenancy.add_human(db, "alice"))[1]
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
            async with http.request(method, f"{base_url}{PREFIX}{path}", json=body, headers=headers) as r:
                return r.status, await r.json()

        assert (await call("POST", "/endpoints", {"name": "bot", "queues": ["ci", "triage"]}))[0] == 201
        for path, body in (
            ("/todos", {"endpoint": "bot", "title": "t", "queue": ""}),
            ("/webhooks", {"endpoint": "bot", "source": "generic", "queue": ""}),
        ):
            status, answer = await call("POST", path, body)
            assert (status, answer["error"]) == (400, "invalid_argument"), (path, answer)
            assert "queue" in answer["message"], answer
        # Nothing was made; left out, the first queue is taken.
        assert (await call("GET", "/todos"))[1]["todos"] == []
        assert (await call("GET", "/webhooks"))[1]["webhooks"] == []
        status, pushed = await call("POST", "/todos", {"endpoint": "bot", "title": "t"})
        assert status == 201 and pushed["todo"]["queue"] == "ci", pushed
