"""The MCP floor: a bare ``mcp`` SDK server with two no-op tools named ``claim_next`` and ``complete``.

The anchor of the over-MCP rows in ``bench/claim.py``: the SDK version Switchboard uses, on its own
stack (the low-level ``Server``, ``streamable_http_app()`` with stateful sessions and JSON answers
as Switchboard gives them, served by uvicorn), answering the same tool names with results of the
same shape and size as Switchboard's (a claimed todo of the benchmark's backlog; ``complete`` the
finished todo), and no database, no auth, no validation. What a claimer measures against it is
the protocol's own cost per cycle: the JSON-RPC framing, the Streamable HTTP transport and the
SDK's dispatch.

``claim_next`` takes ``max`` (1-50) and then answers ``{"todos": [...]}``, so the ``max=10`` floor
is measured too. Run as ``python -m bench.bare_mcp`` with ``SWITCHBOARD_HOST``/``SWITCHBOARD_PORT``.

``BENCH_FLOOR_DELAY_MS`` (default 0) makes every tool call wait that long before it answers, doing
nothing: ``bench/calls.py`` uses it to show what waiting alone (as for a database's answer) costs
the server and the client.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.lowlevel.server import Server
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

_ids = itertools.count()


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def _todo(state: str) -> dict[str, Any]:
    """A todo as Switchboard's ``claim_next``/``complete`` return one for the benchmark backlog."""
    now = datetime.now(UTC)
    todo: dict[str, Any] = {
        "id": f"td_bench{next(_ids):012d}",
        "queue": "default",
        "source": "bench",
        "kind": "bench",
        "title": "bench todo",
        "state": state,
        "attempt": 1,
        "max_attempts": 5,
        "lease_expires_at": _stamp(now + timedelta(minutes=5)) if state == "claimed" else None,
        "next_retry_at": None,
        "dead_letter": False,
        "created_at": _stamp(now - timedelta(days=30)),
        "updated_at": _stamp(now),
        "payload_size": 2,
        "reply_to": None,
        "replies": {"count": 0, "last_state": None, "last_permalink": None},
    }
    if state == "claimed":
        todo["payload"] = {}
    return todo


def _schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}


TOOLS = [
    types.Tool(
        name="claim_next",
        description="No-op: answers a claimed todo (or max of them) without any store.",
        input_schema=_schema(
            {
                "queue": {"type": "string"},
                "lease_seconds": {"type": "integer"},
                "fence": {"type": "boolean"},
                "max": {"type": "integer", "minimum": 1, "maximum": 50},
            }
        ),
    ),
    types.Tool(
        name="complete",
        description="No-op: answers the todo as done without any store.",
        input_schema=_schema(
            {"todo_id": {"type": "string"}, "result": {}, "summary": {"type": "string"}}, ("todo_id",)
        ),
    ),
]


def _result(body: dict[str, Any]) -> types.CallToolResult:
    # The same two representations Switchboard sends: text content and structured content.
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(body, ensure_ascii=False))],
        structured_content=body,
    )


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


DELAY_SECONDS = float(os.environ.get("BENCH_FLOOR_DELAY_MS", "0")) / 1000


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    if DELAY_SECONDS > 0:
        await asyncio.sleep(DELAY_SECONDS)
    if params.name == "claim_next":
        if "max" in arguments:
            return _result({"todos": [_todo("claimed") for _ in range(int(arguments["max"]))]})
        return _result({"todo": _todo("claimed")})
    if params.name == "complete":
        done = _todo("done")
        done["id"] = str(arguments.get("todo_id", done["id"]))
        return _result(done)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"unknown tool {params.name}")],
        structured_content={"error": "invalid_argument", "message": "unknown tool"},
        is_error=True,
    )


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


def main() -> None:
    host = os.environ.get("SWITCHBOARD_HOST", "127.0.0.1")
    port = int(os.environ.get("SWITCHBOARD_PORT", "8080"))
    server: Server[Any] = Server(
        "bare-floor", version="0.0.0", on_list_tools=list_tools, on_call_tool=call_tool
    )
    # Answered as Switchboard answers (one JSON body per request, not an event stream; stateful
    # sessions), so the floor is the same protocol work and the ratio compares like with like.
    app = server.streamable_http_app(
        json_response=True,
        stateless_http=False,
        host=host,
        custom_starlette_routes=[Route("/healthz", healthz)],
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
