"""Review: ``complete``'s 1 MiB bound on ``result`` counts the result's bytes, as documented.

The bound was checked on ``json.dumps(result)``, which writes every non-ASCII character as a
six-character ``\\uXXXX`` escape: a result of 300,000 CJK characters (900 KB in UTF-8, the size it is
stored and sent at) was refused "larger than 1 MiB", and any text outside ASCII met the bound at a
third of it or less.
"""

from __future__ import annotations

from switchboard import todos
from switchboard.db import Database
from switchboard.testing import add_todo, connect, vend


async def test_a_result_under_1_mib_of_utf8_is_kept_and_one_over_is_refused(
    db: Database, base_url: str
) -> None:
    endpoint, token = await vend(db)
    kept, refused = await add_todo(db, endpoint), await add_todo(db, endpoint)
    text = "中" * 300_000  # 900,000 bytes of UTF-8
    assert len(text.encode()) < todos.RESULT_MAX_BYTES
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=kept.id)
        done = await agent.ok("complete", todo_id=kept.id, result={"translation": text})
        assert done["state"] == "done"
        assert (await agent.ok("get_todo", todo_id=kept.id))["result"] == {"translation": text}

        await agent.ok("claim", todo_id=refused.id)
        too_big = await agent.error(
            "complete", todo_id=refused.id, result={"translation": text + "中" * 50_000}
        )
        assert too_big == {"error": "invalid_argument", "message": "result is larger than 1 MiB"}
        # Nothing was written: the claim still stands.
        assert (await agent.ok("get_todo", todo_id=refused.id))["state"] == "claimed"
