"""The linear kind end to end over real HTTP, as an operator and an agent meet it: a real
``switchboard serve`` (the installed package found through its entry point, its API base set by
``SWITCHBOARD_LINEAR_API_URL``), set up with the ``switchboard`` CLI; Linear's signed deliveries
over HTTP; an agent on the MCP SDK client that claims and replies; a stand-in Linear GraphQL API
over TLS that records the comment; then that comment coming back as a Linear delivery, which mints
nothing. Runs on the test database's engine (SQLite, or PostgreSQL with
``SWITCHBOARD_TEST_DATABASE_URL``)."""

from __future__ import annotations

from typing import Any

import aiohttp
from linear_kit import (
    API_KEY,
    ISSUE,
    ORG,
    SIGNING_SECRET,
    LinearAPI,
    comment_event,
    encode,
    issue_event,
    linear_headers,
)
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

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


async def _set_up(sb: ServeProcess) -> tuple[dict[str, Any], str]:
    """The operator's steps from docs/sources/linear.md: a human, an endpoint that may reply, a linear
    webhook with Linear's signing secret pasted, a connection for the organisation, its test."""
    await sb.cli("human", "add", "ada")
    vended = await sb.cli(
        "endpoint", "vend", "--name", "Ada agent", "--owner", "ada", "--queue", "triage", "--reply"
    )
    webhook = await sb.cli(
        "webhook", "create", "--endpoint", vended["endpoint"]["slug"], "--source", "linear", "--allow-all"
    )
    assert webhook.get("secret") is None, "Linear issues the secret; Switchboard mints none"
    await sb.cli("webhook", "set-secret", webhook["webhook"]["id"], stdin=SIGNING_SECRET)
    connection = await sb.cli(
        "connection", "add", "--owner", "ada", "--kind", "linear", "--name", "acme-linear",
        "--account-key", ORG.upper(), stdin=API_KEY,
    )  # fmt: skip
    assert connection["connection"]["account_key"] == ORG
    tested = await sb.cli("connection", "test", connection["connection"]["id"])
    assert tested["test"]["ok"] is True, tested
    sb.secrets += [SIGNING_SECRET, API_KEY, vended["token"], webhook["ingest_url"].rsplit("/", 1)[1]]
    return vended, webhook["ingest_url"]


async def test_linear_end_to_end(switchboard_serve: ServeProcesses, fake_providers: FakeProviders) -> None:
    api = LinearAPI()
    fake = await fake_providers.start("linear", answer=api)
    sb = switchboard_serve.new({"linear_api_url": fake.base_url})
    listed = await sb.cli("plugins")
    [plugin] = [p for p in listed["plugins"] if p["name"] == "linear"]
    assert plugin["status"] == "loaded" and plugin["package"] == "switchboard-linear"
    [setting] = [s for k in plugin["kinds"] for s in k.get("settings", [])]
    assert (setting["name"], setting["value"], setting["from"]) == (
        "SWITCHBOARD_LINEAR_API_URL",
        fake.base_url,
        "environment",
    )

    await sb.launch()
    vended, ingest_url = await _set_up(sb)
    await sb.ready()
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
        issue = encode(issue_event())
        status, refused = await _post(http, ingest_url, issue, linear_headers("not-the-secret", issue))
        assert (status, refused["error"]) == (401, "signature_invalid")
        headers = linear_headers(SIGNING_SECRET, issue)
        status, routed = await _post(http, ingest_url, issue, headers)
        assert status == 202 and routed["created"] == 1 and routed["verified"] is True, routed
        todo_id = routed["todos"][0]["id"]
        # Linear retrying the same delivery (same Linear-Delivery) makes nothing new.
        status, again = await _post(http, ingest_url, issue, headers)
        assert (status, again["created"], again["todos"][0]["id"]) == (202, 0, todo_id)

        ring = await listener.next_ring(timeout=10)
        assert ring.meta["todo_id"] == todo_id and ring.meta["reply_to"] == "linear_comment"
        error, claimed = await _call(agent, "claim_next", queue="triage")
        assert not error and claimed["todo"]["id"] == todo_id
        assert claimed["todo"]["title"] == "Linear ENG-42 created — Login fails with SSO"
        assert claimed["todo"]["reply_to"]["display"] == f"linear {ORG} issue {ISSUE}"

        # A reply quoting a Linear key is refused before any dial.
        error, blocked = await _call(agent, "reply", todo_id=todo_id, text=f"try with {API_KEY}")
        assert error and blocked["error"] == "secret_detected" and blocked["rule"] == "linear-api-key"
        assert api.comments == []

        text = "Reproduced; the fix is in review."
        error, reply = await _call(agent, "reply", todo_id=todo_id, text=text)
        assert not error and reply["state"] == "sent", reply
        [comment] = api.comments
        assert (comment["issueId"], comment["body"]) == (ISSUE, text)
        assert reply["permalink"] == comment["url"]
        [post] = [r for r in fake.requests if "commentCreate" in r.json["query"]]
        assert post.auth == API_KEY

        # Linear sends our own comment back as a Comment delivery: stored, no todo, no ring.
        echo = encode(comment_event(text, comment=comment["id"]))
        status, dropped = await _post(
            http, ingest_url, echo, linear_headers(SIGNING_SECRET, echo, event="Comment")
        )
        assert status == 202 and dropped["disposition"] == "self_reply" and dropped["created"] == 0, dropped
        # A person answering on the same issue is work again.
        person = encode(comment_event("Thanks! Still broken on Safari though."))
        status, answered = await _post(
            http, ingest_url, person, linear_headers(SIGNING_SECRET, person, event="Comment")
        )
        assert status == 202 and answered["created"] == 1
        while (heard := await listener.next_ring(timeout=10)).meta["todo_id"] == todo_id:
            pass
        assert heard.meta["todo_id"] == answered["todos"][0]["id"]
        assert await listener.silence(0.5), "the echo must not ring"

    shown = await sb.cli("todo", "show", todo_id)
    assert [(r["state"], r["provider_object_id"]) for r in shown["todo"]["replies"]] == [
        ("sent", comment["id"])
    ]
    assert await sb.stop() == 0
    sb.check_log()
