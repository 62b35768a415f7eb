"""Review: a todo stored with NaN or Infinity in its payload (before ingest kept such payloads as
text, or by another path) reaches the agent as docs/agents.md promises: its payload as text
(``{"body", "kept_as_text"}``), never a bare ``NaN`` token in the result's text nor a value
silently turned into ``null`` in ``structuredContent``."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import mcp_types as types

from switchboard.db import Database
from switchboard.mcp import wire
from switchboard.testing import add_todo, connect, vend


def _strict(text: str) -> Any:
    """Parse as standard JSON (as JSON.parse does): a NaN or Infinity token is an error."""

    def refuse(token: str) -> NoReturn:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def _text_and_structure(result: types.CallToolResult) -> tuple[Any, Any]:
    assert not result.is_error, result.content
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    return _strict(text.text), result.structured_content


async def test_a_stored_nan_payload_arrives_as_text_not_as_nan_or_null(db: Database, base_url: str) -> None:
    ep, token = await vend(db)
    poison = await add_todo(db, ep, payload={"score": float("nan"), "range": [float("inf")], "n": 1})
    fine = await add_todo(db, ep, payload={"ok": 1})
    async with connect(base_url, token, ep) as agent:
        parsed, structured = _text_and_structure(await agent.call("get_todo", todo_id=poison.id))
        for payload in (parsed["payload"], structured["payload"]):
            assert payload["kept_as_text"] == wire.UNSENDABLE, payload
            assert "NaN" in payload["body"] and "Infinity" in payload["body"]

        parsed, structured = _text_and_structure(await agent.call("claim_next", max=5, fence=True))
        for batch in (parsed["todos"], structured["todos"]):
            payloads = {t["id"]: t["payload"] for t in batch}
            assert payloads[fine.id] == {"ok": 1}
            assert payloads[poison.id]["kept_as_text"] == wire.UNSENDABLE
        # The claims are the agent's, and it can finish them.
        for todo in structured["todos"]:
            await agent.ok("complete", todo_id=todo["id"], lease_token=todo["lease_token"])
