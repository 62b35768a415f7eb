"""The benchmarks' lean MCP client (``bench/lean_mcp.py``) speaks to the real ``/mcp`` as the SDK
client does: the same results for the same calls, a refusal stops it with the server's code, and
it reads the answers of both of Switchboard's paths (its own tool calls and the SDK's transport).
A benchmark row measured with it is only worth something if this holds."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from bench.lean_mcp import LeanError, lean_session
from switchboard.db import Database
from switchboard.mcp import MCP_SERVICE
from switchboard.testing import add_todo, connect, vend


def _stable(todo: dict[str, Any]) -> dict[str, Any]:
    """A todo without what differs between two claims of the same kind (ids, times, leases)."""
    return {k: v for k, v in todo.items() if not k.endswith(("_at", "id", "token")) and k != "id"}


async def _drain(call: Any) -> list[dict[str, Any]]:
    """claim_next max=2 until empty, completing each todo; what came back, in order."""
    seen: list[dict[str, Any]] = []
    while True:
        got = await call("claim_next", max=2)
        if got.get("empty"):
            return seen
        for todo in got["todos"]:
            done = await call("complete", todo_id=todo["id"], result={"ok": True, "s": "é"})
            assert done["state"] == "done"
            seen.append(_stable(todo))


@pytest.mark.parametrize("direct", [True, False], ids=["direct-path", "sdk-path"])
async def test_the_lean_client_reads_what_the_sdk_client_reads(
    db: Database, server: TestServer, base_url: str, direct: bool
) -> None:
    server.app[MCP_SERVICE].answer_tool_calls = direct
    ep, token = await vend(db)
    for n in range(3):
        await add_todo(db, ep, title=f"lean {n}", payload={"n": n, "text": "héllo </channel>"})
    async with lean_session(base_url, token) as lean:
        assert {t["name"] for t in await lean.list_tools()} >= {"claim_next", "complete"}
        by_lean = await _drain(lean.call)
        with pytest.raises(LeanError, match="invalid_argument"):
            await lean.call("complete")
    assert [t["title"] for t in by_lean] == ["lean 0", "lean 1", "lean 2"]

    for n in range(3):
        await add_todo(db, ep, title=f"lean {n}", payload={"n": n, "text": "héllo </channel>"})
    async with connect(base_url, token, ep) as sdk:
        by_sdk = await _drain(sdk.ok)
    assert by_lean == by_sdk


async def test_a_bad_token_stops_the_lean_client_at_the_handshake(base_url: str) -> None:
    with pytest.raises(LeanError, match="HTTP 401"):
        async with lean_session(base_url, "sbk_not-a-token"):
            raise AssertionError("the handshake was not refused")
