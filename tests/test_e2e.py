"""The operator's walkthrough (README, docs/) as one automated run, with nothing in-process.

A real `switchboard serve` subprocess on a free port, set up by `switchboard` CLI subprocesses the
way the README's first steps do; deliveries signed the way GitHub and Slack sign them, sent over
HTTP; an agent on the official `mcp` SDK client over Streamable HTTP (handshake mode, as
docs/agents.md says) that hears the doorbell, claims, completes and replies; stand-in GitHub and
Slack APIs on 127.0.0.1 (plain http, admitted by `SWITCHBOARD_OUTBOUND_ALLOW_HTTP` and
`SWITCHBOARD_OUTBOUND_ALLOW_CIDRS`, reached through `SWITCHBOARD_GITHUB_API_URL` /
`SWITCHBOARD_SLACK_API_URL`) that record what they receive; then our own comment coming back as a
webhook, which must mint no todo. Finally the server's whole log is searched for every secret.

The database is the run's engine (`database_url`): a SQLite file, or the PostgreSQL test database.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from switchboard.testing import (
    ChannelListener,
    FakeProvider,
    FakeProviders,
    Scripted,
    ServeProcess,
    ServeProcesses,
    github_headers,
    slack_headers,
)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
async def fake_github(fake_providers: FakeProviders) -> FakeProvider:
    # Plain http: serve reaches it because SWITCHBOARD_OUTBOUND_ALLOW_HTTP says it may.
    return await fake_providers.start("github", tls_on=False)


@pytest.fixture
async def fake_slack(fake_providers: FakeProviders) -> FakeProvider:
    return await fake_providers.start("slack", tls_on=False)


@pytest.fixture
async def instance(
    switchboard_serve: ServeProcesses, fake_github: FakeProvider, fake_slack: FakeProvider
) -> AsyncIterator[ServeProcess]:
    """README's order: a key first (the server needs it to open secrets), then serve; the test's CLI
    set-up runs while the server starts, and waits for `/healthz` before it speaks HTTP."""
    sb = switchboard_serve.new(
        {
            "github_api_url": fake_github.base_url,
            "slack_api_url": f"{fake_slack.base_url}/api",
            # Set below from `switchboard keygen`, as the README does.
            "secret_encryption_key": None,
        }
    )
    key = (await sb.cli("keygen"))["key"]
    assert isinstance(key, str) and key
    sb.env["SWITCHBOARD_SECRET_ENCRYPTION_KEY"] = key
    sb.secrets.append(key)
    await sb.launch()
    yield sb
    assert await sb.stop() == 0, sb.log()
    # No traceback and no secret in the whole log; the access log was captured (so that search
    # means something), ingest tokens shortened.
    log = sb.check_log()
    assert '"POST /webhooks/wh_' in log and "…" in log, log


async def _first_steps(sb: ServeProcess) -> tuple[str, dict[str, Any]]:
    """`human add ada`, then `endpoint vend --name "Ada's agent" --owner ada --queue triage --reply`."""
    human = await sb.cli("human", "add", "ada")
    sbo = human["token"]
    assert sbo.startswith("sbo_")
    vended = await sb.cli(
        "endpoint", "vend", "--name", "Ada's agent", "--owner", "ada", "--queue", "triage", "--reply"
    )
    assert vended["endpoint"]["slug"] == "ada-s-agent"
    assert vended["mcp_url"] == f"{sb.base_url}/mcp"
    assert "reply" in vended["endpoint"]["verbs"]
    sb.secrets += [sbo, vended["token"]]
    await sb.ready()
    return sbo, vended


async def _post(
    http: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> tuple[int, Any]:
    async with http.post(url, data=body, headers=headers) as resp:
        return resp.status, await resp.json()


def _agent(mcp_url: str, token: str, listener: ChannelListener) -> tuple[httpx2.AsyncClient, Client]:
    """docs/agents.md's snippet: the bearer on every request, the handshake, a doorbell listener."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=300.0)
    )
    client = Client(streamable_http_client(mcp_url, http_client=http), mode="legacy", extensions=[listener])
    return http, client


async def _ok(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {result.content}"
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def _next_ring_past(listener: ChannelListener, handled: str) -> Any:
    """The next doorbell about another todo than ``handled``: a todo may be rung more than once
    while it is pending (a doorbell is a hint, not the record), so repeats may still be queued."""
    while (heard := await listener.next_ring(timeout=10)).meta["todo_id"] == handled:
        pass
    return heard


async def _error(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
    body = result.structured_content
    assert isinstance(body, dict)
    assert result.content[0].text == f"{body['error']}: {body['message']}"  # type: ignore[union-attr]
    return body


async def test_github_walkthrough(instance: ServeProcess, fake_github: FakeProvider) -> None:
    sb = instance
    sbo, vended = await _first_steps(sb)
    connection_secret = "ghp_e2eTestTokenNotRealAbCdEfGhIjKlMnOpQrSt"
    sb.secrets.append(connection_secret)
    webhook, connection = await asyncio.gather(
        sb.cli("webhook", "create", "--endpoint", "ada-s-agent", "--source", "github", "--allow-all"),
        sb.cli(
            "connection", "add", "--owner", "ada", "--kind", "github", "--name", "acme-bot",
            "--account-key", "github.com", "--target", "Codertocat/*",
            stdin=connection_secret,
        ),
    )  # fmt: skip
    ingest_url, whsec = webhook["ingest_url"], webhook["secret"]
    assert ingest_url.startswith(f"{sb.base_url}/webhooks/") and whsec.startswith("whsec_")
    sb.secrets += [whsec, ingest_url.rsplit("/", 1)[1]]
    connection_id = connection["connection"]["id"]
    assert connection["connection"]["fingerprint"].startswith("fp_")

    # `connection test` dials the stand-in GitHub from the CLI process (same environment as serve).
    tested = await sb.cli("connection", "test", connection_id)
    assert tested["test"]["ok"] is True
    assert [(r.method, r.path, r.auth) for r in fake_github.requests] == [
        ("GET", "/user", f"Bearer {connection_secret}")
    ]

    listener = ChannelListener()
    agent_http, agent = _agent(vended["mcp_url"], vended["token"], listener)
    async with aiohttp.ClientSession() as http, agent_http, agent:
        tools = {tool.name for tool in (await agent.list_tools()).tools}
        assert "reply" in tools and "claim_next" in tools and "create_connection" not in tools

        body = (FIXTURES / "github/issues/opened.payload.json").read_bytes()
        # A forged signature is refused and stores nothing.
        status, refused = await _post(
            http, ingest_url, body, github_headers("whsec_wrong", body, "issues", "e2e-forged")
        )
        assert (status, refused["error"]) == (401, "signature_invalid")
        # GitHub's own signature is accepted, once; the redelivery answers with the same todo.
        headers = github_headers(whsec, body, "issues", "e2e-delivery-1")
        status, routed = await _post(http, ingest_url, body, headers)
        assert status == 202, routed
        assert routed["created"] == 1 and routed["verified"] is True and routed["disposition"] == "routed"
        todo_id = routed["todos"][0]["id"]
        assert routed["todos"][0]["endpoint"] == "ada-s-agent" and routed["todos"][0]["queue"] == "triage"
        status, again = await _post(http, ingest_url, body, headers)
        assert (status, again["created"], again["todos"][0]["id"]) == (202, 0, todo_id)

        ring = await listener.next_ring(timeout=10)
        assert ring.meta == {
            "todo_id": todo_id,
            "queue": "triage",
            "kind": "issues.opened",
            "source": "github",
            "reply_to": "forge_comment",
        }
        assert todo_id in ring.content

        # The refusals an agent meets first are tool errors with stable codes, and dial nothing.
        refused_reply = await _error(agent, "reply", todo_id=todo_id, text="On it.")
        assert refused_reply["error"] == "not_claimed"

        claimed = (await _ok(agent, "claim_next", queue=ring.meta["queue"]))["todo"]
        assert claimed["id"] == todo_id and claimed["state"] == "claimed"
        assert (
            claimed["title"]
            == "Issue #1 opened in Codertocat/Hello-World — Spelling error in the README file"
        )
        assert claimed["reply_to"]["display"] == "github github.com/Codertocat/Hello-World#1"
        assert claimed["payload"]["issue"]["number"] == 1
        done = await _ok(agent, "complete", todo_id=todo_id, summary="typo fixed")
        assert done["state"] == "done"

        leaked = "ghp_" + hashlib.sha256(b"e2e").hexdigest()[:36]
        sb.secrets.append(leaked)
        blocked = await _error(agent, "reply", todo_id=todo_id, text=f"use this token: {leaked}")
        assert blocked["error"] == "secret_detected" and blocked["rule"] == "github-pat"
        assert leaked not in json.dumps(blocked)
        assert fake_github.posts() == []

        # Within the grace window after completing, the agent answers the issue it came from.
        text = "Fixed the typo in #2 — thanks for the report!"
        reply = await _ok(agent, "reply", todo_id=todo_id, text=text, idempotency_key="e2e-1")
        assert reply["state"] == "sent" and reply["duplicate"] is False
        assert reply["display"] == "github github.com/Codertocat/Hello-World#1"
        again_reply = await _ok(agent, "reply", todo_id=todo_id, text=text, idempotency_key="e2e-1")
        assert again_reply["duplicate"] is True and again_reply["reply_id"] == reply["reply_id"]

        posts = fake_github.posts()
        assert len(posts) == 1, "the retried reply must not post twice"
        post = posts[0]
        assert post.path == "/repos/Codertocat/Hello-World/issues/1/comments"
        assert post.auth == f"Bearer {connection_secret}"
        assert post.json == {"body": f"{text}\n\n<!-- switchboard:reply:{reply['reply_id']} -->"}
        comment_id = 1001
        assert (
            reply["permalink"]
            == f"https://github.com/Codertocat/Hello-World/issues/1#issuecomment-{comment_id}"
        )

        # GitHub sends our own comment back as an issue_comment delivery: no todo, no doorbell.
        comment_event = json.loads((FIXTURES / "github/issue_comment/created.payload.json").read_bytes())
        assert comment_event["issue"]["number"] == 1
        comment_event["comment"]["id"] = comment_id
        comment_event["comment"]["body"] = post.json["body"]
        echo = json.dumps(comment_event).encode()
        status, dropped = await _post(
            http, ingest_url, echo, github_headers(whsec, echo, "issue_comment", "e2e-echo")
        )
        assert status == 202 and dropped["disposition"] == "self_reply" and dropped["created"] == 0
        # A person answering in the same thread is work again.
        comment_event["comment"]["id"] = comment_id + 500
        comment_event["comment"]["body"] = "Thanks, looks good now."
        human = json.dumps(comment_event).encode()
        status, routed_human = await _post(
            http, ingest_url, human, github_headers(whsec, human, "issue_comment", "e2e-human")
        )
        assert status == 202 and routed_human["created"] == 1
        human_todo = routed_human["todos"][0]["id"]
        assert (await _next_ring_past(listener, todo_id)).meta["todo_id"] == human_todo
        assert await listener.silence(0.5), "the echo must not ring"

        # The operator API (docs/api.md) shows the reply on the todo, never the text or the token.
        auth = {"Authorization": f"Bearer {sbo}"}
        async with http.get(f"{sb.base_url}/api/v1/todos/{todo_id}", headers=auth) as resp:
            assert resp.status == 200
            shown = (await resp.json())["todo"]
        assert shown["state"] == "done"
        assert [(r["state"], r["provider_object_id"], r["connection"]["name"]) for r in shown["replies"]] == [
            ("sent", str(comment_id), "acme-bot")
        ]
        assert text not in json.dumps(shown) and connection_secret not in json.dumps(shown)
        async with http.get(f"{sb.base_url}/api/v1/todos", headers=auth, params={"state": "pending"}) as resp:
            assert [t["id"] for t in (await resp.json())["todos"]] == [human_todo]
        async with http.get(
            f"{sb.base_url}/api/v1/todos/{todo_id}", headers={"Authorization": f"Bearer {vended['token']}"}
        ) as resp:
            assert resp.status == 401 and (await resp.json())["error"] == "unauthorized"

        async with http.get(f"{sb.base_url}/metrics") as resp:
            metrics = await resp.text()
        assert re.search(r'^switchboard_replies_total\{[^}]*state="sent"[^}]*\} 1(\.0)?$', metrics, re.M)
        assert re.search(r'^switchboard_echo_drops_total\{source="github"\} 1(\.0)?$', metrics, re.M)
        assert re.search(
            r'^switchboard_ingest_total\{[^}]*disposition="refused"[^}]*status="401"[^}]*\} 1', metrics, re.M
        )

        await _web_board_shows(sb, http_base=sb.base_url, sbo=sbo, permalink=reply["permalink"])

    # The CLI sees the same end state: the todo done, the person's comment pending.
    listed = await sb.cli("todo", "list", "--endpoint", "ada-s-agent")
    assert {(t["id"], t["state"]) for t in listed["todos"]} == {(todo_id, "done"), (human_todo, "pending")}


async def _web_board_shows(sb: ServeProcess, *, http_base: str, sbo: str, permalink: str) -> None:
    """docs/web.md: log in with the sbo_ token through the CSRF-protected form; the board lists the
    todo with its reply's permalink; a form posted without the CSRF token is refused."""
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as browser:
        async with browser.get(f"{http_base}/ui/login") as resp:
            assert resp.status == 200
            page = await resp.text()
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf, page
        form = {"csrf": csrf.group(1), "token": sbo}
        async with browser.post(f"{http_base}/ui/login", data=form, allow_redirects=False) as resp:
            assert resp.status == 303 and resp.headers["Location"] == "/ui"
        async with browser.get(f"{http_base}/ui") as resp:
            assert resp.status == 200
            assert "script-src" not in resp.headers["Content-Security-Policy"]
            board = await resp.text()
        assert "Spelling error in the README file" in board and permalink in board
        for secret in sb.secrets:
            assert secret not in board
        async with browser.post(
            f"{http_base}/ui/teams", data={"slug": "acme"}, allow_redirects=False
        ) as resp:
            assert resp.status == 403


async def test_slack_walkthrough(instance: ServeProcess, fake_slack: FakeProvider) -> None:
    """docs/sources/slack.md: the provider issues the secret; url_verification; a thread reply."""
    sb = instance
    _, vended = await _first_steps(sb)
    bot_token = "xoxb-1111111111-2222222222-e2eNotARealSlackBotToken"
    signing_secret = "8f742231b10e8888abcd99yyyzzz85a5"
    sb.secrets += [bot_token, signing_secret]
    webhook, connection = await asyncio.gather(
        sb.cli("webhook", "create", "--endpoint", "ada-s-agent", "--source", "slack"),
        sb.cli(
            "connection", "add", "--owner", "ada", "--kind", "slack", "--name", "acme-slack",
            "--account-key", "T0123ABCD", stdin=bot_token,
        ),
    )  # fmt: skip
    ingest_url = webhook["ingest_url"]
    sb.secrets.append(ingest_url.rsplit("/", 1)[1])
    assert "secret" not in webhook or webhook["secret"] is None

    challenge = (FIXTURES / "slack/url_verification.json").read_bytes()
    async with aiohttp.ClientSession() as http:
        # Until the owner pastes Slack's signing secret, ingest answers 503.
        status, waiting = await _post(http, ingest_url, challenge, slack_headers(signing_secret, challenge))
        assert (status, waiting["error"]) == (503, "unavailable")
        await sb.cli("webhook", "set-secret", webhook["webhook"]["id"], stdin=signing_secret)
        # The stand-in Slack workspace is the connection's team; `test` records the bot for echoes.
        fake_slack.script(
            "POST",
            "/api/auth.test",
            Scripted(
                200, {"ok": True, "team_id": "T0123ABCD", "user_id": "U0BOT1234", "bot_id": "B0SWITCH1"}
            ),
        )
        tested = await sb.cli("connection", "test", connection["connection"]["id"])
        assert tested["test"]["ok"] is True

        status, answered = await _post(http, ingest_url, challenge, slack_headers(signing_secret, challenge))
        assert (status, answered) == (200, {"challenge": json.loads(challenge)["challenge"]})

        listener = ChannelListener()
        agent_http, agent = _agent(vended["mcp_url"], vended["token"], listener)
        async with agent_http, agent:
            mention = (FIXTURES / "slack/app_mention.json").read_bytes()
            status, routed = await _post(http, ingest_url, mention, slack_headers(signing_secret, mention))
            assert status == 202 and routed["created"] == 1, routed
            todo_id = routed["todos"][0]["id"]
            # Slack sends the same message again as a plain `message` event: still one todo.
            message = (FIXTURES / "slack/message.json").read_bytes()
            status, same = await _post(http, ingest_url, message, slack_headers(signing_secret, message))
            assert status == 202 and same["created"] == 0 and same["todos"][0]["id"] == todo_id
            ring = await listener.next_ring(timeout=10)
            assert ring.meta["todo_id"] == todo_id and ring.meta["reply_to"] == "slack_thread"

            claimed = await _ok(agent, "claim", todo_id=todo_id)
            assert claimed["reply_to"]["display"] == "slack T0123ABCD/C0456EFGH thread 1726990000.000100"
            reply = await _ok(agent, "reply", todo_id=todo_id, text="Looking into it now.")
            assert reply["state"] == "sent"
            await _ok(agent, "complete", todo_id=todo_id)

            (post,) = [r for r in fake_slack.posts() if r.path == "/api/chat.postMessage"]
            assert post.auth == f"Bearer {bot_token}"
            sent = post.json
            assert (sent["channel"], sent["thread_ts"], sent["text"]) == (
                "C0456EFGH",
                "1726990000.000100",
                "Looking into it now.",
            )
            assert sent["metadata"]["event_payload"]["reply_id"] == reply["reply_id"]

            # Slack delivers our bot's message back to the Events API: stored as self_reply.
            echo_event = json.loads((FIXTURES / "slack/bot_reply.json").read_bytes())
            echo_event["event"]["metadata"]["event_payload"]["reply_id"] = reply["reply_id"]
            echo = json.dumps(echo_event).encode()
            status, dropped = await _post(http, ingest_url, echo, slack_headers(signing_secret, echo))
            assert status == 202 and dropped["disposition"] == "self_reply" and dropped["created"] == 0
            # A person answering in the thread is new work, rung like any other.
            person = (FIXTURES / "slack/thread_reply.json").read_bytes()
            status, answered_in_thread = await _post(
                http, ingest_url, person, slack_headers(signing_secret, person)
            )
            assert status == 202 and answered_in_thread["created"] == 1
            thread_todo = answered_in_thread["todos"][0]["id"]
            assert (await _next_ring_past(listener, todo_id)).meta["todo_id"] == thread_todo
            assert await listener.silence(0.5), "the echo must not ring"

    shown = await sb.cli("todo", "show", todo_id)
    assert shown["todo"]["state"] == "done"
    assert [r["state"] for r in shown["todo"]["replies"]] == ["sent"]
