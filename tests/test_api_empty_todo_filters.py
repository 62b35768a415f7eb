"""The todo filters of ``GET /todos`` and ``POST /todos/requeue`` (docs/api.md, "Todo filters") are
never ignored: an empty one (``"queue": ""``, ``?kind=``) names no queue, kind or endpoint, so it is
``400 invalid_argument``. It used to be read as "no filter": a bulk requeue with ``"queue": ""``
(a script's unset variable) took every dead letter of every queue."""

from __future__ import annotations

from typing import Any

import aiohttp
from sqlalchemy import update

from switchboard import tenancy, todos
from switchboard.api import PREFIX
from switchboard.db import Database
from switchboard.models import Todo
from switchboard.testing import add_todo


async def _dead_letter(db: Database, slug: str, queue: str) -> None:
    endpoint = await tenancy.get_endpoint(db, slug)
    todo = await add_todo(db, endpoint, title=f"dies in {queue}", queue=queue)
    async with db.write() as s:
        await s.execute(update(Todo).where(Todo.id == todo.id).values(max_attempts=1))
    await todos.claim(db, endpoint, todo.id)
    await todos.fail(db, endpoint, todo.id, error="boom")


async def test_an_empty_filter_is_refused_not_read_as_no_filter(db: Database, base_url: str) -> None:
    owner_token = (await tenancy.add_human(db, "alice"))[1]
    headers = {"Authorization": f"Bearer {owner_token}"}
    owner = await tenancy.resolve_owner(db, human="alice")
    await tenancy.vend_endpoint(db, name="bot", owner=owner, queues=["ci", "triage"])
    await _dead_letter(db, "bot", "ci")
    await _dead_letter(db, "bot", "triage")
    async with aiohttp.ClientSession() as http:

        async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
            async with http.request(method, f"{base_url}{PREFIX}{path}", json=body, headers=headers) as r:
                return r.status, await r.json()

        # A real filter narrows, in the preview and the listing alike.
        status, preview = await call("POST", "/todos/requeue", {"queue": "ci", "dry_run": True})
        assert (status, preview["matched"]) == (200, 1), preview
        for name in ("endpoint", "queue", "source", "kind", "search", "place"):
            status, answer = await call("POST", "/todos/requeue", {name: "", "dry_run": True})
            assert (status, answer["error"]) == (400, "invalid_argument"), (name, answer)
            assert name in answer["message"], answer
            status, answer = await call("GET", f"/todos?{name}=")
            assert (status, answer["error"]) == (400, "invalid_argument"), (name, answer)
        # Nothing was requeued by any of them.
        status, listed = await call("GET", "/todos?state=dead")
        assert status == 200 and len(listed["todos"]) == 2, listed
