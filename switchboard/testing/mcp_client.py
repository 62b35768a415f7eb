"""Drive the real ``/mcp`` as an agent does, with the official MCP SDK client.

``connect()`` opens a real Streamable HTTP session (the SDK client, the endpoint's bearer token) and
records every ``notifications/claude/channel`` doorbell it hears: the SDK drops notification methods
it does not know, so a ``NotificationBinding`` registers the method with the session.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
from mcp.client import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, ConfigDict

from switchboard.models import Endpoint

# For tests that speak /mcp by hand (requests the SDK client would never send): the Accept header the
# transport asks for, an ``initialize`` request, and a session opened with them.
MCP_ACCEPT = "application/json, text/event-stream"
MCP_INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "qa", "version": "1"},
    },
}


async def open_raw_session(http: aiohttp.ClientSession, base_url: str, token: str) -> dict[str, str]:
    """Initialize a session on ``/mcp`` over ``http``; the headers a request of that session sends."""
    headers = {"Authorization": f"Bearer {token}", "Accept": MCP_ACCEPT, "Content-Type": "application/json"}
    async with http.post(f"{base_url}/mcp", json=MCP_INITIALIZE, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        session_id = resp.headers["Mcp-Session-Id"]
        await resp.read()
    return {**headers, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-06-18"}


class ChannelParams(BaseModel):
    """A doorbell's params: the text the agent is shown and the ids in ``meta``."""

    model_config = ConfigDict(extra="allow")
    content: str
    meta: dict[str, Any] = {}


class ChannelListener(ClientExtension):
    """Hears doorbells; ``rings`` receives each notification's params in arrival order."""

    identifier = "com.anthropic/claude-channel-test"

    def __init__(self) -> None:
        self.rings: asyncio.Queue[ChannelParams] = asyncio.Queue()

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/claude/channel", params_type=ChannelParams, handler=self._heard
            )
        ]

    async def _heard(self, params: ChannelParams) -> None:
        await self.rings.put(params)

    async def next_ring(self, timeout: float = 2.0) -> ChannelParams:
        return await asyncio.wait_for(self.rings.get(), timeout)

    async def silence(self, seconds: float) -> bool:
        """True if no ring arrives within ``seconds``."""
        try:
            await asyncio.wait_for(self.rings.get(), seconds)
        except TimeoutError:
            return True
        return False


@dataclass
class Agent:
    """A connected agent. ``ok`` asserts the tool succeeded and returns its structured result;
    ``error`` asserts a tool error of the documented shape (``{"error", "message"}``) and returns it."""

    client: Client
    listener: ChannelListener
    endpoint: Endpoint

    async def call(self, tool: str, /, **arguments: Any) -> types.CallToolResult:
        return await self.client.call_tool(tool, arguments)

    async def ok(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        result = await self.call(tool, **arguments)
        assert not result.is_error, f"{tool} failed: {result.content}"
        assert isinstance(result.structured_content, dict)
        return result.structured_content

    async def error(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        result = await self.call(tool, **arguments)
        assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
        body = result.structured_content
        assert isinstance(body, dict) and set(body) >= {"error", "message"}
        text = result.content[0]
        assert isinstance(text, types.TextContent)
        assert text.text == f"{body['error']}: {body['message']}"
        return body


def http_client(token: str) -> httpx2.AsyncClient:
    """An HTTP client sending the bearer token on every request; reads may wait long (the GET stream)."""
    return httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=300.0)
    )


@asynccontextmanager
async def connect(
    base_url: str, token: str, endpoint: Endpoint, *, mode: str = "legacy"
) -> AsyncIterator[Agent]:
    """A live session on ``/mcp`` (``mode="legacy"``: the handshake, stateful, with the GET stream;
    ``mode="2026-07-28"``: the newest, stateless revision)."""
    listener = ChannelListener()
    async with http_client(token) as http:
        transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(transport, mode=mode, extensions=[listener], cache=None) as client:
            yield Agent(client=client, listener=listener, endpoint=endpoint)
