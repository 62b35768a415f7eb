"""A Slack ``chat.postMessage`` answered ``200`` with a body that cannot be read (a proxy's HTML page,
an empty body, JSON nested deeper than the parser goes, JSON with no ``ok``) may have posted the
message: the reply is ``unknown`` (look at the thread before posting again), as docs/plugins.md says
of "a 200 whose answer cannot be read" and as Linear and Plain record it, never ``failed`` (which
tells the agent nothing was posted, so it posts again)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from switchboard import connections as conn
from switchboard.tenancy import Owner
from switchboard.testing import add_todo, connect, slack_address, vend

SECRET = "xoxb-unreadable-" + "Pz4Ky8Rt"
UNREADABLE = {
    "html": (b"<html><body>Accepted</body></html>", "text/html"),
    "empty": (b"", "application/json"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "application/json"),
    "no-ok": (b'{"channel": "C0456"}', "application/json"),
}


@dataclass
class SlackApi:
    """A plain-http stand-in Slack answering every call 200 with ``body``; records the paths."""

    url: str = ""
    body: tuple[bytes, str] = (b"", "application/json")
    paths: list[str] = field(default_factory=list)


@pytest.fixture
async def slack_api() -> AsyncIterator[SlackApi]:
    api = SlackApi()

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        api.paths.append(request.path)
        body, content_type = api.body
        return web.Response(status=200, body=body, content_type=content_type)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    api.url = f"http://127.0.0.1:{port}/api"
    yield api
    await runner.cleanup()


@pytest.fixture
def settings_overrides(slack_api: SlackApi) -> dict[str, Any]:
    return {"slack_api_url": slack_api.url}


@pytest.mark.parametrize("shape", sorted(UNREADABLE))
async def test_a_slack_post_answered_200_unreadably_is_unknown_not_failed(
    guarded: Any, services: Any, base_url: str, slack_api: SlackApi, shape: str
) -> None:
    slack_api.body = UNREADABLE[shape]
    endpoint, token = await vend(services.db, families=["reply"])
    await conn.create_connection(
        services, Owner.of(endpoint), kind="slack", name="s", account_key="T0TEST", secret=SECRET
    )
    todo = await add_todo(services.db, endpoint, reply_to=slack_address().as_dict(), source="slack")
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        result = await agent.ok("reply", todo_id=todo.id, text="Deployed.")
        again = await agent.ok("reply", todo_id=todo.id, text="Deployed.")
        detail = await agent.ok("get_todo", todo_id=todo.id)
    assert (result["state"], result["error_class"]) == ("unknown", "server")
    # Dialled once, never retried; the repeat is the recorded outcome.
    assert slack_api.paths == ["/api/chat.postMessage"]
    assert again == {**result, "duplicate": True}
    assert [(r["state"], r["error_code"]) for r in detail["replies"]] == [("unknown", "unreadable_answer")]


async def test_slack_ok_false_is_still_a_failure(
    guarded: Any, services: Any, base_url: str, slack_api: SlackApi
) -> None:
    slack_api.body = (b'{"ok": false, "error": "channel_not_found"}', "application/json")
    endpoint, token = await vend(services.db, families=["reply"])
    await conn.create_connection(
        services, Owner.of(endpoint), kind="slack", name="s", account_key="T0TEST", secret=SECRET
    )
    todo = await add_todo(services.db, endpoint, reply_to=slack_address().as_dict(), source="slack")
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        result = await agent.ok("reply", todo_id=todo.id, text="Deployed.")
    assert (result["state"], result["error_class"]) == ("failed", "not_found")
