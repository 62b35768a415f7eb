"""Requests to /mcp that the bridge to the SDK must answer without a 500 or an echo, each of which
once got one: a query string beyond Latin-1, a bearer token whose bytes are not UTF-8, a Host header
whose port is no port (each a 500, ``bridge.run_asgi`` and ``bearers.bearer_token``), and a message
the SDK cannot validate (answered with pydantic's account of it, which quoted the request: a
connection's secret included)."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import aiohttp
import pytest

from switchboard.services import Services
from switchboard.testing import MCP_ACCEPT, MCP_INITIALIZE, open_raw_session, vend


async def _raw_post(base_url: str, target: bytes, headers: bytes, body: bytes) -> bytes:
    """One request written byte for byte (header bytes no HTTP client library would send)."""
    url = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(
            b"POST "
            + target
            + b" HTTP/1.1\r\n"
            + headers
            + b"Content-Length: "
            + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + body
        )
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


# -- 1. query string ----------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["x=%E2%82%AC", "q=%E6%97%A5%E6%9C%AC"])
async def test_a_query_string_beyond_latin1_is_not_a_500(
    services: Services, base_url: str, query: str
) -> None:
    # bridge.run_asgi encodes aiohttp's *decoded* query string as Latin-1.
    _, token = await vend(services.db)
    headers = {"Authorization": f"Bearer {token}", "Accept": MCP_ACCEPT, "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base_url}/mcp?{query}", json=MCP_INITIALIZE, headers=headers) as resp:
            assert resp.status < 500, await resp.text()
        # On an established session too (every request goes through the bridge).
        session = await open_raw_session(http, base_url, token)
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        async with http.post(f"{base_url}/mcp?{query}", json=ping, headers=session) as resp:
            assert resp.status < 500, await resp.text()


# -- 2. undecodable bearer token ----------------------------------------------------------------


@pytest.mark.parametrize("token", [b"sbk_\xff\xfe", b"sbk_\xc3"])
async def test_a_token_that_is_not_utf8_is_401_not_500(
    services: Services, base_url: str, token: bytes
) -> None:
    # aiohttp hands undecodable header bytes on as lone surrogates; token_hash() encodes as UTF-8.
    data = await _raw_post(
        base_url,
        b"/mcp",
        b"Host: x\r\nAccept: " + MCP_ACCEPT.encode() + b"\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + token + b"\r\n",
        json.dumps(MCP_INITIALIZE).encode(),
    )
    assert data.startswith(b"HTTP/1.1 401"), data[:200]


# -- 3. Host header with a bad port -------------------------------------------------------------


@pytest.mark.parametrize("host", [b"example.com:abc", b"example.com:99999"])
async def test_a_host_header_with_a_bad_port_is_not_a_500(
    services: Services, base_url: str, host: bytes
) -> None:
    # bridge.run_asgi reads request.url.port for the ASGI scope's "server"; yarl raises ValueError.
    _, token = await vend(services.db)
    data = await _raw_post(
        base_url,
        b"/mcp",
        b"Host: " + host + b"\r\nAccept: " + MCP_ACCEPT.encode() + b"\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + token.encode() + b"\r\n",
        json.dumps(MCP_INITIALIZE).encode(),
    )
    assert not data.startswith(b"HTTP/1.1 5"), data[:300]


# -- 4. the SDK's validation error echoes the request, secret included ------------------------

SECRET = "ghp_" + "R3v13wS3cr3tR3v13wS3cr3tR3v13wS3cr3tXYZ"


@pytest.mark.parametrize("shape", ["batch", "jsonrpc_1_0", "no_method"])
async def test_an_invalid_message_is_not_answered_with_its_own_content(
    services: Services, base_url: str, shape: str
) -> None:
    _, token = await vend(services.db, families=["connections"])
    call: object = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "create_connection",
            "arguments": {"kind": "github", "name": "gh", "account_key": "github.com", "secret": SECRET},
        },
    }
    if shape == "batch":  # JSON-RPC batching, as the 2025-03-26 revision allowed
        call = [call]
    elif shape == "jsonrpc_1_0":
        call["jsonrpc"] = "1.0"  # type: ignore[index]
    else:
        del call["method"]  # type: ignore[attr-defined]
    async with aiohttp.ClientSession() as http:
        headers = await open_raw_session(http, base_url, token)
        async with http.post(f"{base_url}/mcp", json=call, headers=headers) as resp:
            assert 400 <= resp.status < 500
            text = await resp.text()
    answer = json.loads(text)
    assert answer["error"]["code"] in (-32600, -32602)
    # No fragment of the secret (pydantic's input_value keeps the last ~25 characters of the body).
    for i in range(len(SECRET) - 12):
        assert SECRET[i : i + 12] not in text, text[:600]
    assert "input_value" not in text and "errors.pydantic.dev" not in text
