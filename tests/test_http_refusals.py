"""A request aiohttp's HTTP parser refuses, sent as raw bytes over a socket: the answer is a JSON
error like every other (it was a plain-text 400 that quoted the offending line back: the ingest
token in a request line, the bearer token in an ``Authorization`` header), the connection is
closed, nothing is stored, and the server goes on serving."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from switchboard.http_refusals import parser_reason, refusal
from switchboard.services import Services
from switchboard.testing import counts, make_webhook, vend


async def exchange(base_url: str, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` on a fresh connection; the answer's status, headers and body, read to the close."""
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(raw)
        await writer.drain()
        # The refusal closes the connection (aiohttp answers as HTTP/1.0), so reading to the end
        # finishes: a refusal that kept the connection open fails here after 5 s.
        answer = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def cases(ingest_token: str, bearer: str) -> dict[str, tuple[bytes, str]]:
    """Malformed requests, each with the reason its answer gives."""
    return {
        "a control byte after a bearer token": (
            b"GET /api/v1/todos HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + bearer.encode()
            + b"\x01\r\n\r\n",
            "Invalid header value char",
        ),
        "a request line past the parser's limit": (
            b"POST /webhooks/" + ingest_token.encode() + b"?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
            "Got more than 8190 bytes when reading",
        ),
        "a header line past the parser's limit": (
            b"GET /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + bearer.encode()
            + b"a" * 9000
            + b"\r\n\r\n",
            "Got more than 8190 bytes when reading",
        ),
        "a control byte in the ingest path": (
            b"POST /webhooks/"
            + ingest_token.encode()
            + b"\x01 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
            "Invalid char in url path",
        ),
        "a chunk size that is not hexadecimal": (
            b"POST /webhooks/" + ingest_token.encode() + b" HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
            "Invalid character in chunk size",
        ),
        "not a method": (b"GARBAGE\r\n\r\n", "Invalid method encountered"),
        "a space in a header name": (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
            "Invalid header token",
        ),
    }


@pytest.mark.parametrize("case", list(cases("", "")))
async def test_a_request_the_parser_refuses_is_answered_in_json_without_what_it_quoted(
    case: str, services: Services, base_url: str
) -> None:
    ingest_token, _, _ = await make_webhook(services, "generic")
    _, bearer = await vend(services.db)
    raw, reason = cases(ingest_token, bearer)[case]

    status, headers, body = await exchange(base_url, raw)

    assert status == 400
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body) == {"error": "invalid_argument", "message": f"malformed HTTP request: {reason}"}
    assert ingest_token.encode() not in body and bearer.encode() not in body
    assert await counts(services) == (0, 0)
    # The server is unharmed: the next request on a new connection is served.
    async with aiohttp.ClientSession() as http, http.get(f"{base_url}/healthz") as resp:
        assert resp.status == 200


@pytest.mark.parametrize(
    "message",
    [
        "Bad status line 'POST /webhooks/wh_secret HTTP/1.1'",
        "Invalid HTTP header: b'Authorization: Bearer sbk_secret'",
        "Got more than 8190 bytes when reading: bytearray(b'/webhooks/wh_secret').",
        "Invalid header value char:\n\n  b'Cookie: sb_session=secret'\n     ^",
        "b'sbk_secret' at the start",
        "",
    ],
)
def test_the_reason_never_carries_what_the_parser_quoted(message: str) -> None:
    exc = aiohttp.http_exceptions.BadHttpMessage(message)
    reason = parser_reason(exc)
    assert "secret" not in reason and "'" not in reason
    assert reason  # never empty: the class's name at least


def test_an_exception_that_escaped_the_app_says_nothing_of_itself() -> None:
    body = refusal(500, RuntimeError("token sbk_secret in a message"))
    assert body == {"error": "internal", "message": "internal error"}
