"""A provider answer nested deeper than the JSON parser goes is an answer we cannot read, like any
other non-JSON body: a GitHub ``201 Created`` so answered is still ``sent`` (the comment exists), a
connection test still gets the provider's verdict, never ``unknown``/``provider_error``, and the
SDK's ``Response.json`` (which the GraphQL kinds read themselves) says None."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from switchboard import connections as conn
from switchboard import reply
from switchboard.provider import Response
from switchboard.testing import claimed_todo, forge_address, guarded_client, human_and_endpoint

# Well inside the 1 MiB answer cap, far deeper than Python's recursion limit.
DEEP = b"[" * 200_000 + b"]" * 200_000


@pytest.fixture
async def deep_api() -> AsyncIterator[str]:
    """An http stand-in that answers every request with deeply nested JSON (201 to a POST)."""

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        status = 201 if request.method == "POST" else 200
        return web.Response(status=status, body=DEEP, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
def settings_overrides(deep_api: str) -> dict[str, Any]:
    return {"github_api_url": deep_api}


@pytest.fixture
async def plain_http(services: Any) -> AsyncIterator[None]:
    services.outbound = client = guarded_client(allow_http=True)
    yield
    await client.close()


async def test_a_201_with_deeply_nested_json_is_sent(services: Any, db: Any, plain_http: None) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret="gh-test-" + "Qm7Tz1"
    )
    todo = await claimed_todo(db, endpoint, forge_address("github", "github.com"))
    result = await reply.send_reply(services, endpoint, todo.id, "hi")
    assert result["state"] == "sent", result
    assert "error_class" not in result


async def test_a_connection_test_answered_with_deeply_nested_json_gets_a_verdict(
    services: Any, db: Any, plain_http: None
) -> None:
    owner, _ = await human_and_endpoint(db)
    made = await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret="gh-test-" + "Qm7Tz1"
    )
    verdict = await conn.test_connection(services, owner, made["id"])
    assert verdict["ok"] is True, verdict


def test_the_sdk_reads_a_too_deep_answer_as_no_json() -> None:
    """Linear and Plain read ``resp.json()`` themselves: a RecursionError escaped to the core."""
    assert Response(status=200, headers={}, body=DEEP).json() is None
