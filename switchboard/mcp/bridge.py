"""aiohttp <-> ASGI: the bridge that hands one aiohttp request to the SDK's ASGI transport.

aiohttp serves ``/mcp`` and the SDK's Streamable HTTP transport is an ASGI app, so each request is
bridged here rather than by mounting an ASGI server: the route stays on the one aiohttp port with
the rest of the app, and it authenticates before the SDK sees anything. The body is delivered once,
then ``receive()`` blocks until the response is finished or the client has gone, which is what the
SDK's streaming responses (the GET notification stream, SSE answers to a POST) expect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any

from aiohttp import web

# The ASGI types as the SDK's transport (and Starlette) declare them: a scope and every message are
# mutable mappings. The bridge builds plain dicts, which are such mappings.
ASGIScope = MutableMapping[str, Any]
ASGIMessage = MutableMapping[str, Any]
ASGIReceive = Callable[[], Awaitable[ASGIMessage]]
ASGISend = Callable[[ASGIMessage], Awaitable[None]]
ASGIApp = Callable[[ASGIScope, ASGIReceive, ASGISend], Awaitable[None]]


async def run_asgi(
    request: web.Request,
    body: bytes,
    app: ASGIApp,
    extra_scope: dict[str, Any],
    on_start: Callable[[int], None] | None = None,
) -> web.StreamResponse:
    """Run one ASGI request/response cycle on an aiohttp request.

    ``receive()`` delivers the body once and then blocks until the response is finished or the
    client has left (answering ``http.disconnect``), as streaming ASGI apps expect.
    """
    done = asyncio.Event()
    body_sent = False
    response: web.StreamResponse | None = None

    def client_gone() -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        while not done.is_set() and not client_gone():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 0.5)
        return {"type": "http.disconnect"}

    # The SDK answers a few refusals (a method it does not serve, an Accept it cannot meet) with
    # an empty or plain-text body; those are collected and answered as a JSON-RPC error instead.
    plain_error: dict[str, Any] = {}
    # Any answer but an event stream (a tool call's JSON answer, a 202) is one body: it is
    # collected and sent whole after the handler returns (headers and body in one write), rather
    # than streamed (a write for the headers, each chunk and the end).
    whole: dict[str, Any] = {}

    async def send(message: ASGIMessage) -> None:
        nonlocal response
        if done.is_set():
            return
        try:
            if message["type"] == "http.response.start":
                status, headers = message["status"], message.get("headers", [])
                if on_start is not None:
                    on_start(status)
                content_type = b"".join(v for k, v in headers if k.lower() == b"content-type").lower()
                if status >= 400 and b"json" not in content_type:
                    allow = b"".join(v for k, v in headers if k.lower() == b"allow")
                    plain_error.update(status=status, body=b"", allow=allow.decode("latin-1"))
                    return
                if not content_type.startswith(b"text/event-stream"):
                    whole.update(status=status, headers=headers, body=[])
                    return
                response = web.StreamResponse(status=status)
                for key, value in headers:
                    response.headers.add(key.decode("latin-1"), value.decode("latin-1"))
                await response.prepare(request)
            elif message["type"] == "http.response.body" and plain_error:
                plain_error["body"] = (plain_error["body"] + message.get("body", b""))[:500]
                if not message.get("more_body", False):
                    done.set()
            elif message["type"] == "http.response.body" and whole:
                whole["body"].append(message.get("body", b""))
                if not message.get("more_body", False):
                    body = b"".join(whole["body"])
                    if whole["status"] >= 400:
                        body = _without_echo(body)
                    response = web.Response(status=whole["status"], body=body)
                    for key, value in whole["headers"]:
                        # aiohttp sets the length of the body it sends itself.
                        if key.lower() != b"content-length":
                            response.headers.add(key.decode("latin-1"), value.decode("latin-1"))
                    done.set()
            elif message["type"] == "http.response.body" and response is not None:
                chunk = message.get("body", b"")
                if chunk:
                    await response.write(chunk)
                if not message.get("more_body", False):
                    await response.write_eof()
                    done.set()
        except ConnectionError:
            # The client left mid-response: stop writing; receive() now reports the disconnect.
            done.set()

    peer = request.transport.get_extra_info("peername") if request.transport else None
    # The listening socket, as an ASGI server reports it (not the Host header, which the client
    # writes and may give any port, or none that parses).
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1"),
        "root_path": "",
        # The query as sent, percent-encoded: aiohttp's ``query_string`` is decoded text, which
        # may hold any character.
        "query_string": request.rel_url.raw_query_string.encode("ascii", "replace"),
        # Last-Event-ID asks for a replay, which needs an event store this server does not keep
        # (the SDK then answers nothing at all): the client gets a fresh stream instead, and the
        # doorbell re-rings the pending todos a newly opened stream missed.
        "headers": [
            (key.lower(), value) for key, value in request.raw_headers if key.lower() != b"last-event-id"
        ],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(sock[:2]) if isinstance(sock, tuple) else None,
        "state": {},
        **extra_scope,
    }
    try:
        await app(scope, receive, send)
    finally:
        done.set()
    if plain_error:
        status = plain_error["status"]
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "error"
        text = plain_error["body"].decode("utf-8", "replace").strip() or phrase
        error = jsonrpc_error(status, text[:200])
        if plain_error["allow"]:
            error.headers["Allow"] = plain_error["allow"]
        return error
    if response is None:
        return web.json_response(
            {"error": "internal", "message": "no response from the MCP transport"}, status=500
        )
    return response


def _without_echo(body: bytes) -> bytes:
    """A refusal's JSON body without the SDK's account of a message it could not validate:
    pydantic's, which quotes the request (a connection's secret, say) and links its own docs. The
    status and the JSON-RPC code stay."""
    try:
        answer = json.loads(body)
    except ValueError:
        return body
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict) and str(error.get("message", "")).startswith("Validation error"):
        error["message"] = "Invalid Request: the body is not one valid JSON-RPC message"
        error.pop("data", None)
        return json.dumps(answer).encode()
    return body


def jsonrpc_error(status: int, message: str, code: int = -32600) -> web.Response:
    """A JSON-RPC error with no id: every refusal on ``/mcp`` is JSON, whoever makes it."""
    return web.json_response(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, status=status
    )
