"""A lean MCP client for load: the protocol's messages over Streamable HTTP, without the SDK.

The official SDK client spends about 1 ms of CPU on each tool call (its transport, the streams and
tasks it hands each message through, the validation into models). Beside a server on the same two
cores that makes the over-MCP rows a measure of the client as much as of the server, as the Python
senders are for ingest, which is why ingest's rows use wrk. This client is to the SDK client what wrk
is to the Python senders: the same requests on the wire, at a fraction of the cost, so that a row
shows what the server can do.

What it sends is what the SDK client sends in its ``legacy`` mode: ``initialize`` (protocol
revision ``2025-11-25``, the newest reachable by the handshake), ``notifications/initialized``,
then each ``tools/call`` as a JSON-RPC POST with the session's ``Mcp-Session-Id`` and
``Mcp-Protocol-Version`` headers and ``Accept: application/json, text/event-stream``; ``DELETE``
at the end. It reads a JSON answer or an event stream's ``message`` events, and refuses anything
else (an error status, a JSON-RPC error, a tool error, an answer to another id) with the server's
words. It does not open the GET notification stream, which the specification leaves to the client:
the claim rows ring no doorbell. It is a benchmark driver, not part of Switchboard.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson

PROTOCOL_VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


class LeanError(RuntimeError):
    """The server refused or answered something this client does not read."""


class LeanSession:
    """One MCP session on ``url`` (``…/mcp``), opened by ``lean_session``."""

    def __init__(self, http: aiohttp.ClientSession, url: str, token: str) -> None:
        self.http = http
        self.url = url
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Accept": ACCEPT,
            "Content-Type": "application/json",
        }
        self._ids = itertools.count(1)
        # The server's session id, from the answer to ``initialize``.
        self.session_id: str | None = None

    async def _post(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """POST one JSON-RPC message; the answer to a request (None for a notification)."""
        async with self.http.post(self.url, data=orjson.dumps(message), headers=self.headers) as response:
            body = await response.read()
            if response.status == 202 and "id" not in message:
                return None
            if response.status != 200:
                raise LeanError(f"{message.get('method')}: HTTP {response.status}: {body[:300]!r}")
            kind = response.headers.get("Content-Type", "")
            self.session_id = self.session_id or response.headers.get("Mcp-Session-Id")
        answer = _answer(body, kind, message.get("id"))
        if "error" in answer:
            raise LeanError(f"{message.get('method')}: {answer['error']}")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise LeanError(f"{message.get('method')}: no result in {body[:300]!r}")
        return result

    async def open(self) -> None:
        result = await self._post(
            {
                "jsonrpc": "2.0",
                "id": next(self._ids),
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "switchboard-bench-lean", "version": "1"},
                },
            }
        )
        assert result is not None
        if self.session_id:
            self.headers["Mcp-Session-Id"] = self.session_id
        self.headers["Mcp-Protocol-Version"] = str(result.get("protocolVersion", PROTOCOL_VERSION))
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def list_tools(self) -> list[dict[str, Any]]:
        result = await self._post({"jsonrpc": "2.0", "id": next(self._ids), "method": "tools/list"})
        assert result is not None
        return list(result.get("tools") or [])

    async def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        """A tool's structured result; a tool error stops the benchmark with its words."""
        result = await self._post(
            {
                "jsonrpc": "2.0",
                "id": next(self._ids),
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
        )
        assert result is not None
        body = result.get("structuredContent")
        if result.get("isError") or not isinstance(body, dict):
            raise LeanError(f"{name} failed: {body or result.get('content')}")
        return body

    async def close(self) -> None:
        if "Mcp-Session-Id" in self.headers:
            async with self.http.delete(self.url, headers=self.headers) as response:
                await response.read()


def _answer(body: bytes, kind: str, wanted: Any) -> dict[str, Any]:
    """The JSON-RPC answer with id ``wanted`` from a JSON body or an event stream."""
    if kind.startswith("application/json"):
        answer = orjson.loads(body)
        if isinstance(answer, dict) and answer.get("id") == wanted:
            return answer
        raise LeanError(f"an answer to another request: {body[:300]!r}")
    if kind.startswith("text/event-stream"):
        for event in body.split(b"\n\n"):
            data = b"\n".join(line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:"))
            if not data:
                continue
            message = orjson.loads(data)
            if isinstance(message, dict) and message.get("id") == wanted:
                return message
        raise LeanError(f"no answer in the event stream: {body[:300]!r}")
    raise LeanError(f"an answer of type {kind!r}: {body[:300]!r}")


@asynccontextmanager
async def lean_session(base_url: str, token: str) -> AsyncIterator[LeanSession]:
    """An open session on ``base_url``'s ``/mcp``, on a connection of its own (as an agent has)."""
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as http:
        session = LeanSession(http, f"{base_url}/mcp", token)
        await session.open()
        try:
            yield session
        finally:
            await session.close()
