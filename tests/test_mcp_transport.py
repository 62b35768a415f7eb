"""The /mcp HTTP transport below the tools: a request the SDK would answer in plain text, with an
empty body or with a 500 gets a JSON answer (a JSON-RPC error where the protocol has one)."""

from __future__ import annotations

import json

import aiohttp
import pytest

from switchboard.services import Services
from switchboard.testing import MCP_ACCEPT, open_raw_session, vend

STATELESS = "2026-07-28"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_mcp_post_with_a_wrong_content_type_gets_a_json_rpc_error(
    services: Services, base_url: str, content_type: str | None
) -> None:
    _, token = await vend(services.db)
    async with aiohttp.ClientSession() as http:
        headers = await open_raw_session(http, base_url, token)
        if content_type is None:
            headers.pop("Content-Type")
        else:
            headers["Content-Type"] = content_type
        body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode()
        async with http.post(f"{base_url}/mcp", data=body, headers=headers) as resp:
            assert resp.status == 415
            assert resp.content_type == "application/json"
            answer = await resp.json()
    assert answer["jsonrpc"] == "2.0" and answer["error"]["code"] == -32600
    assert "application/json" in answer["error"]["message"]


@pytest.mark.parametrize(
    ("method", "accept", "status"),
    [("GET", MCP_ACCEPT, 405), ("DELETE", MCP_ACCEPT, 405), ("POST", "text/html", 406)],
)
async def test_the_stateless_revision_refuses_in_json_too(
    services: Services, base_url: str, method: str, accept: str, status: int
) -> None:
    # The SDK's stateless entry answered these with an empty body.
    _, token = await vend(services.db)
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": accept,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": STATELESS,
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with aiohttp.ClientSession() as http:
        async with http.request(method, f"{base_url}/mcp", json=body, headers=headers) as resp:
            assert resp.status == status
            assert resp.content_type == "application/json"
            answer = await resp.json()
            if status == 405:
                assert "POST" in resp.headers.get("Allow", "")
    assert answer["jsonrpc"] == "2.0" and answer["error"]["message"]


async def test_a_get_stream_with_last_event_id_opens_a_fresh_stream(
    services: Services, base_url: str
) -> None:
    # No event store: the SDK answered nothing and the bridge turned that into a 500.
    _, token = await vend(services.db)
    async with aiohttp.ClientSession() as http:
        headers = await open_raw_session(http, base_url, token)
        get_headers = {**headers, "Accept": "text/event-stream", "Last-Event-ID": "no-such-event"}
        get_headers.pop("Content-Type")
        async with http.get(f"{base_url}/mcp", headers=get_headers) as resp:
            assert resp.status == 200
            assert resp.content_type == "text/event-stream"
