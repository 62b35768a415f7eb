"""The plain kind end to end over real HTTP, as an operator and an agent meet it: a real
``switchboard serve`` (the installed package found through its entry point, its API base set by
``SWITCHBOARD_PLAIN_API_URL``), set up with the ``switchboard`` CLI; Plain's signed deliveries over
HTTP; an agent on the MCP SDK client that claims and replies; a stand-in Plain GraphQL API over TLS
that records the reply; then Plain's ``thread.email_sent`` for that reply, which mints nothing, while
a colleague's email on the same thread is still work. Runs on the test database's engine (SQLite,
or PostgreSQL with ``SWITCHBOARD_TEST_DATABASE_URL``)."""

from __future__ import annotations

from typing import Any

import aiohttp
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from plain_kit import (
    API_KEY,
    HUMAN_USER,
    MACHINE_USER,
    SIGNING_SECRET,
    THREAD,
    WORKSPACE,
    PlainAPI,
    ago,
    encode,
    event,
    plain_headers,
    sent_by_machine_user,
)

from switchboard.testing import ChannelListener, FakeProviders, ServeProcess, ServeProcesses, http_client


async def _post(
    http: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> tuple[int, Any]:
    async with http.post(url, data=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def _call(agent: Client, tool: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    result = await agent.call_tool(tool, arguments)
    assert isinstance(result.structured_content, dict), result.content
    return result.is_error, result.structured_content


async def _set_up(sb: ServeProcess) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """The operator's steps from docs/sources/plain.md: a human, an endpoint that may reply, a plain
    webhook with Plain's request-signing secret pasted, a connection for the workspace, its test."""
    await sb.cli("human", "add", "ada")
    vended = await sb.cli(
        "endpoint", "vend", "--name", "Ada agent", "--owner", "ada", "--queue", "support", "--reply"
    )
    webhook = await sb.cli(
        "webhook", "create", "--endpoint", vended["endpoint"]["slug"], "--source", "plain", "--allow-all"
    )
    assert webhook.get("secret") is None, "Plain issues the secret; Switchboard mints none"
    await sb.cli("webhook", "set-secret", webhook["webhook"]["id"], stdin=SIGNING_SECRET)
    connection = await sb.cli(
        "connection", "add", "--owner", "ada", "--kind", "plain", "--name", "acme-plain",
        "--account-key", WORKSPACE, stdin=API_KEY,
    )  # fmt: skip
    tested = await sb.cli("connection", "test", connection["connection"]["id"])
    sb.secrets += [SIGNING_SECRET, API_KEY, vended["token"], webhook["ingest_url"].rsplit("/", 1)[1]]
    return vended, webhook["ingest_url"], tested["test"]


async def test_plain_end_to_end(switchboard_serve: ServeProcesses, fake_providers: FakeProviders) -> None:
    api = PlainAPI()
    fake = await fake_providers.start("plain", answer=api)
    sb = await switchboard_serve.start({"plain_api_url": fake.base_url})
    vended, ingest_url, tested = await _set_up(sb)
    # The key's machine user is recorded: that is how its replies are recognised when they come back.
    assert tested["ok"] is True, tested
    assert tested["detail"] == f"authenticated as machine user {MACHINE_USER}"
    listener = ChannelListener()
    async with (
        aiohttp.ClientSession() as http,
        http_client(vended["token"]) as agent_http,
        Client(
            streamable_http_client(vended["mcp_url"], http_client=agent_http),
            mode="legacy",
            extensions=[listener],
        ) as agent,
    ):
        stale = encode(event(at=ago(400)))
        status, refused = await _post(http, ingest_url, stale, plain_headers(SIGNING_SECRET, stale))
        assert (status, refused["error"]) == (401, "signature_invalid")
        email = encode(event())
        status, routed = await _post(http, ingest_url, email, plain_headers(SIGNING_SECRET, email))
        assert status == 202 and routed["created"] == 1 and routed["verified"] is True, routed
        todo_id = routed["todos"][0]["id"]
        status, again = await _post(http, ingest_url, email, plain_headers(SIGNING_SECRET, email))
        assert (status, again["created"], again["todos"][0]["id"]) == (202, 0, todo_id)

        ring = await listener.next_ring(timeout=10)
        assert ring.meta["todo_id"] == todo_id and ring.meta["reply_to"] == "plain_thread"
        error, claimed = await _call(agent, "claim_next", queue="support")
        assert not error and claimed["todo"]["id"] == todo_id
        assert claimed["todo"]["title"] == "Plain email received — Can't log in (Peter Santos)"
        assert claimed["todo"]["reply_to"]["display"] == f"plain {WORKSPACE} thread {THREAD}"

        # A reply quoting a Plain key is refused before any dial.
        error, blocked = await _call(agent, "reply", todo_id=todo_id, text=f"debug with {API_KEY}")
        assert error and blocked["error"] == "secret_detected" and blocked["rule"] == "plain-api-key"
        assert api.replies == []

        text = "We've reset your session; please log in again."
        error, reply = await _call(agent, "reply", todo_id=todo_id, text=text)
        assert not error and reply["state"] == "sent", reply
        assert api.replies == [{"threadId": THREAD, "textContent": text, "markdownContent": text}]
        [post] = [r for r in fake.requests if "replyToThread" in r.json["query"]]
        assert post.auth == f"Bearer {API_KEY}"

        # Plain sends the reply on the thread's channel and reports it back: our machine user's
        # thread.email_sent is stored as our own reply, mints nothing and rings nobody.
        echo = encode(sent_by_machine_user(text))
        status, dropped = await _post(http, ingest_url, echo, plain_headers(SIGNING_SECRET, echo))
        assert status == 202 and dropped["disposition"] == "self_reply" and dropped["created"] == 0, dropped
        # A colleague answering the customer on the same thread is not our reply.
        colleague = encode(event("thread.email_sent", sender={"actorType": "user", "userId": HUMAN_USER}))
        status, answered = await _post(http, ingest_url, colleague, plain_headers(SIGNING_SECRET, colleague))
        assert status == 202 and answered["created"] == 1
        while (heard := await listener.next_ring(timeout=10)).meta["todo_id"] == todo_id:
            pass
        assert heard.meta["todo_id"] == answered["todos"][0]["id"]
        assert await listener.silence(0.5), "the echo must not ring"

    shown = await sb.cli("todo", "show", todo_id)
    assert [r["state"] for r in shown["todo"]["replies"]] == ["sent"]
    assert await sb.stop() == 0
    sb.check_log()
