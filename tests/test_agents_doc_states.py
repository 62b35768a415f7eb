"""Review: docs/agents.md names every state an agent can see on a todo.

An operator's cancel (the API, the CLI, the web UI, or quarantine's expiry) leaves a todo
``cancelled``, and the agent sees it so (``get_todo``, ``list_todos`` filters by it), but the row's
description on the agent's page listed only ``pending``, ``claimed``, ``done`` and ``failed``.
"""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from switchboard import tenancy, todos
from switchboard.db import Database
from switchboard.mcp import tools
from switchboard.testing import add_todo, connect

AGENTS_MD = Path(__file__).resolve().parent.parent / "docs" / "agents.md"


def _documented_states() -> set[str]:
    text = " ".join(AGENTS_MD.read_text().split())
    found = re.search(r"`state` \(((?:`[a-z_]+`(?:, )?)+)\)", text)
    assert found is not None, "docs/agents.md no longer describes a row's state"
    return set(re.findall(r"`([a-z_]+)`", found.group(1)))


async def test_a_cancelled_todo_is_seen_so_and_the_agents_page_says_it_can_be(
    db: Database, base_url: str
) -> None:
    human, human_token = await tenancy.add_human(db, "ada")
    endpoint, token = await tenancy.vend_endpoint(
        db, name="ada agent", owner=tenancy.Owner(human_id=human.id)
    )
    todo = await add_todo(db, endpoint)
    headers = {"Authorization": f"Bearer {human_token}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base_url}/api/v1/todos/{todo.id}/cancel", json={}, headers=headers) as resp,
    ):
        assert resp.status == 200, await resp.text()
    async with connect(base_url, token, endpoint) as agent:
        seen = await agent.ok("get_todo", todo_id=todo.id)
        listed = await agent.ok("list_todos", state="cancelled")
    assert seen["state"] == "cancelled"
    assert [row["id"] for row in listed["todos"]] == [todo.id]
    assert set(tools.TOOLS["list_todos"].input_schema["properties"]["state"]["enum"]) == set(todos.STATES)
    assert _documented_states() == set(todos.STATES)
