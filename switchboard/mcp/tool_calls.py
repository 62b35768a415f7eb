"""Tool calls on an established session, answered here rather than through the SDK's per-request
machinery.

An agent's loop is ``claim_next`` then ``complete``, over and over, each a POST on its session. The
SDK answers such a POST by building a Starlette request, validating the message into models,
opening a memory stream for the answer, handing the message to the session's dispatcher task,
spawning a task for the handler, passing the answer back through the stream and writing it out:
about half of the server's CPU for a call that touches the database once (bench/HISTORY.md,
"Changes of 2026-12-03"). A call that this module recognises is answered in the request's own task
instead, with the same handler (``tools.call``) and the SDK's own checks of what goes in and out
(``mcp_types.methods``: the request's surface for the negotiated protocol version, and the
result's sieve for it), so the agent reads exactly the answer the SDK would have sent
(tests/test_mcp_tool_calls.py compares the two paths call by call).

What is answered here, and only this: a POST whose body is one JSON-RPC request (an integer or
string ``id``) of ``tools/call`` for one of the tools (``tools.TOOLS``, granted or not: the
handler refuses what is not granted), with no members but ``name``, ``arguments`` and ``_meta`` in
its params, on a session whose handshake the SDK has accepted and whose transport is live, from a
client that accepts JSON. Anything else goes to the SDK exactly as before, which answers it as it
always has: a batch, a notification, another method, an unknown tool, an odd member, a body orjson
cannot read or might read otherwise than the SDK's parser (many brackets, a long number), a
handshake not yet done, a terminated session. The SDK's session, handshake, GET stream, doorbells
and every other request are untouched.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Any, cast

import anyio
import mcp_types as types
import orjson
import pydantic_core
from aiohttp import web
from mcp.server.streamable_http import check_accept_headers
from mcp_types import methods
from pydantic import ValidationError

from switchboard.mcp.endpoint_cache import LIFECYCLE_VERBS
from switchboard.mcp.tools import TOOLS, call
from switchboard.models import Endpoint
from switchboard.services import Services

log = logging.getLogger("switchboard.mcp")

# A body larger than this is not parsed here: the SDK takes it (a tool call is a few hundred
# bytes; a ``complete`` with a large result or a long ``reply`` pays the SDK's path).
PARSE_LIMIT_BYTES = 64 * 1024
# The SDK's parser refuses JSON nested past about 250 levels (a 400 "Parse error"), which orjson
# reads; a body with more opening brackets than this, however nested, goes to the SDK to be judged.
_FEW_BRACKETS = 200
# orjson reads an integer past 64 bits as a float, where the SDK keeps the integer: a body with a
# run of 19 digits or more (a number of that size, or digits in a string) goes to the SDK.
_LONG_NUMBER = re.compile(rb"[0-9]{19}")
METHOD = "tools/call"
_MESSAGE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_PARAMS_KEYS = frozenset({"name", "arguments", "_meta"})
# JSON-RPC's "internal error", as the SDK answers a result it cannot shape.
_INTERNAL_ERROR = -32603


@dataclass(frozen=True)
class ToolCall:
    """One ``tools/call`` of a known tool, as read from the request's body."""

    id: int | str
    name: str
    params: dict[str, Any]

    @property
    def lifecycle(self) -> bool:
        """Whether the endpoint kept in memory may serve it (``endpoint_cache``)."""
        return self.name in LIFECYCLE_VERBS


def parse(method: str, body: bytes) -> ToolCall | None:
    """The tool call ``body`` holds, or None if it is anything else (see the module's docstring:
    None sends the request to the SDK)."""
    if method != "POST" or len(body) > PARSE_LIMIT_BYTES:
        return None
    if body.count(b"[") + body.count(b"{") > _FEW_BRACKETS or _LONG_NUMBER.search(body):
        return None
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if (
        not isinstance(message, dict)
        or message.keys() - _MESSAGE_KEYS
        or message.get("jsonrpc") != "2.0"
        or message.get("method") != METHOD
    ):
        return None
    request_id = message.get("id")
    # JSON's true is a Python int; the SDK does not take a boolean id as a request.
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    params = message.get("params")
    if not isinstance(params, dict) or params.keys() - _PARAMS_KEYS:
        return None
    name = params.get("name")
    if not isinstance(name, str) or name not in TOOLS:
        return None
    return ToolCall(request_id, name, params)


def accepts_json(request: web.Request) -> bool:
    """Whether the request's ``Accept`` header admits a JSON answer, judged by the SDK's own
    transport check (wildcards count). It reads nothing but ``request.headers``, which an aiohttp
    request has too."""
    has_json, _ = check_accept_headers(cast(Any, request))
    return has_json


async def answer(
    services: Services,
    endpoint: Endpoint,
    tool_call: ToolCall,
    *,
    protocol_version: str,
    session_id: str,
) -> web.Response | None:
    """The HTTP answer to ``tool_call``, or None when the SDK must answer it (its params do not
    pass the request's surface for ``protocol_version``, which the SDK refuses in its own words)."""
    try:
        methods.validate_client_request(METHOD, protocol_version, tool_call.params)
        params = types.CallToolRequestParams.model_validate(tool_call.params, by_name=False)
    except (ValidationError, KeyError):
        return None
    result = await call(services, endpoint, params.name, params.arguments or {})
    try:
        wire = methods.serialize_server_result(
            METHOD, protocol_version, result.model_dump(by_alias=True, mode="json", exclude_none=True)
        )
        envelope: dict[str, Any] = {"jsonrpc": "2.0", "id": tool_call.id, "result": wire}
    except (ValidationError, ValueError):
        # As the SDK answers a handler's result it cannot shape (``tools.call`` makes none).
        log.exception("tool %s returned an invalid result", params.name)
        envelope = {
            "jsonrpc": "2.0",
            "id": tool_call.id,
            "error": {"code": _INTERNAL_ERROR, "message": "Handler returned an invalid result"},
        }
    try:
        body = orjson.dumps(envelope)
    except TypeError:
        # What orjson refuses and the SDK's serialiser writes (an integer beyond 64 bits).
        body = pydantic_core.to_json(envelope)
    return web.Response(body=body, content_type="application/json", headers={"mcp-session-id": session_id})


def keep_alive(idle_scope: anyio.CancelScope | None, idle_seconds: float) -> None:
    """Restart the session's idle countdown, as a request through the SDK's transport does when it
    ends (a countdown held off by an open request or GET stream, at infinity, is left so)."""
    if idle_scope is not None and not idle_scope.cancel_called and idle_scope.deadline != math.inf:
        idle_scope.deadline = anyio.current_time() + idle_seconds
