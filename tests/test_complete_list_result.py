"""Review: ``complete`` keeps a ``result`` that is a JSON array, as the agent sent it.

On PostgreSQL the completes of one endpoint go as one statement, their results passed as an array
of JSON values. A result that was itself a list was read by the driver as a further dimension of
that array, which ``unnest`` flattens: the todo kept only the list's first item, and completes
combined in one statement were handed one another's items.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from switchboard import todos
from switchboard.db import Database
from switchboard.testing import add_todo, connect, vend

RESULTS: list[Any] = [
    ["a", "b"],
    [],
    [["nested"], {"k": [1, 2]}],
    [None],
    {"items": ["x", "y"]},
    "just text",
    7,
]


@pytest.mark.parametrize("result", RESULTS)
async def test_a_result_is_kept_whole_over_mcp(db: Database, base_url: str, result: Any) -> None:
    endpoint, token = await vend(db)
    todo = await add_todo(db, endpoint)
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        await agent.ok("complete", todo_id=todo.id, result=result, summary="done")
        detail = await agent.ok("get_todo", todo_id=todo.id)
    assert detail["result"] == result
    assert detail["attempts"][-1]["summary"] == "done"


async def test_completes_made_together_keep_their_own_results(db: Database) -> None:
    endpoint, _ = await vend(db)
    made = [await add_todo(db, endpoint, title=f"t{i}") for i in range(8)]
    for todo in made:
        await todos.claim(db, endpoint, todo.id)
    # Each its own list: completes of one endpoint arriving together share one statement.
    results = [[f"{todo.id}-first", f"{todo.id}-second"] for todo in made]
    await asyncio.gather(
        *(todos.complete(db, endpoint, t.id, result=r) for t, r in zip(made, results, strict=True))
    )
    for todo, result in zip(made, results, strict=True):
        assert (await todos.get_todo(db, endpoint, todo.id))["result"] == result
