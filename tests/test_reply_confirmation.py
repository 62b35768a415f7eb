"""The seed record's Confirmation list (ADR-0033), one test per line, end to end: signed deliveries
into the real ingest, the agent on real MCP, stand-in providers on 127.0.0.1."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import re
import uuid
from typing import Any

import aiohttp
import pytest
from fixtures.ingest_kit import fixture

from switchboard import connections as conn
from switchboard import tenancy
from switchboard.errors import SwitchboardError
from switchboard.models import Endpoint, Todo
from switchboard.testing import (
    PROVIDER_SECRETS,
    FakeProvider,
    connect,
    github_headers,
    make_webhook,
    post,
    slack_headers,
)
from switchboard.vault import Vault

SLACK_SECRET = "xoxb-confirmation-" + "Hw2Jq7Lc"
GITHUB_SECRET = "github-confirmation-" + "Vb5Xn3"
CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    """The GitHub and Slack API bases point at the stand-ins."""
    return fake_api_settings


async def agent_for(services: Any, slug: str, handle: str) -> tuple[Endpoint, str, tenancy.Owner]:
    """A fresh endpoint with the reply family for an existing endpoint's owner (tokens are shown once,
    so the test vends its own)."""
    owner = await tenancy.resolve_owner(services.db, human=handle)
    endpoint, token = await tenancy.vend_endpoint(
        services.db, name=f"{slug}-replier", owner=owner, families=["reply", "connections"]
    )
    return endpoint, token, owner


def issue_opened() -> dict[str, Any]:
    return fixture("github/issues/opened.payload.json")


async def github_connection(services: Any, owner: tenancy.Owner) -> dict[str, Any]:
    return await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=GITHUB_SECRET
    )


async def move_todo(services: Any, todo_id: str, endpoint: Endpoint) -> None:
    """Hand a minted todo to the replying endpoint of the same owner (same scope, same address)."""
    async with services.db.write() as s:
        todo = await s.get(Todo, todo_id)
        assert todo is not None
        todo.endpoint_id = endpoint.id


async def deliver_github(base_url: str, token: str, secret: str, event: str, payload: dict[str, Any]) -> dict:
    body = json.dumps(payload).encode()
    headers = github_headers(secret, body, event, str(uuid.uuid4()))
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 202, answer
    return answer


async def test_slack_event_reply_goes_to_its_thread_and_a_repeated_key_posts_nothing(
    guarded: Any, services: Any, base_url: str, fake_slack: FakeProvider
) -> None:
    token, _, _ = await make_webhook(services, "slack")
    body = json.dumps(fixture("slack/app_mention.json")).encode()
    status, minted, _ = await post(base_url, token, body, slack_headers(PROVIDER_SECRETS["slack"], body))
    assert status == 202 and minted["created"] == 1
    endpoint, sbk, owner = await agent_for(services, "ada-agent", "ada")
    await move_todo(services, minted["todos"][0]["id"], endpoint)
    await conn.create_connection(
        services, owner, kind="slack", name="slack", account_key="T0123ABCD", secret=SLACK_SECRET
    )
    async with connect(base_url, sbk, endpoint) as agent:
        todo = await agent.ok("claim", todo_id=minted["todos"][0]["id"])
        assert todo["reply_to"]["kind"] == "slack_thread"
        assert (todo["reply_to"]["channel"], todo["reply_to"]["thread_ts"]) == (
            "C0456EFGH",
            "1726990000.000100",
        )
        first = await agent.ok("reply", todo_id=todo["id"], text="On it.", idempotency_key="ack")
        second = await agent.ok("reply", todo_id=todo["id"], text="On it!", idempotency_key="ack")
    assert first["state"] == "sent" and second == {**first, "duplicate": True}
    [sent] = fake_slack.posts()
    assert sent.auth == f"Bearer {SLACK_SECRET}"
    assert (sent.json["channel"], sent.json["thread_ts"], sent.json["text"]) == (
        "C0456EFGH",
        "1726990000.000100",
        "On it.",
    )


async def test_generic_delivery_with_a_forge_payload_has_no_address(
    guarded: Any, services: Any, base_url: str, fake_github: FakeProvider
) -> None:
    token, _, _ = await make_webhook(services, "generic")
    body = json.dumps(fixture("github/issues/opened.payload.json")).encode()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-1"}
    status, minted, _ = await post(base_url, token, body, headers)
    assert status == 202 and minted["created"] == 1 and minted["verified"] is False
    endpoint, sbk, owner = await agent_for(services, "ada-agent", "ada")
    await move_todo(services, minted["todos"][0]["id"], endpoint)
    await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=GITHUB_SECRET
    )
    async with connect(base_url, sbk, endpoint) as agent:
        todo = await agent.ok("claim", todo_id=minted["todos"][0]["id"])
        assert todo["reply_to"] is None
        err = await agent.error("reply", todo_id=todo["id"], text="hello")
    assert err["error"] == "no_reply_address"
    assert fake_github.requests == []


async def test_a_routed_todo_of_b_never_uses_as_connection(
    guarded: Any, services: Any, base_url: str, fake_github: FakeProvider
) -> None:
    token, secret, webhook_id = await make_webhook(services, "github", owner="ada", endpoint="ada-agent")
    assert secret is not None
    ada = await tenancy.resolve_owner(services.db, human="ada")
    await conn.create_connection(
        services, ada, kind="github", name="gh", account_key=None, secret=GITHUB_SECRET
    )
    await tenancy.add_human(services.db, "bea")
    bea = await tenancy.resolve_owner(services.db, human="bea")
    bea_endpoint, bea_token = await tenancy.vend_endpoint(
        services.db, name="bea-agent", owner=bea, families=["reply"]
    )
    await tenancy.add_route(services.db, webhook_id, bea_endpoint.slug)
    minted = await deliver_github(
        base_url, token, secret, "issues", fixture("github/issues/opened.payload.json")
    )
    assert minted["created"] == 2
    bea_todo = next(t for t in minted["todos"] if t["endpoint"] == "bea-agent")
    async with connect(base_url, bea_token, bea_endpoint) as agent:
        await agent.ok("claim", todo_id=bea_todo["id"])
        err = await agent.error("reply", todo_id=bea_todo["id"], text="from Bea")
    assert err["error"] == "no_connection"
    assert fake_github.requests == []


async def test_a_payload_naming_another_forge_host_never_dials(
    guarded: Any, services: Any, base_url: str, fake_github: FakeProvider
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    payload = copy.deepcopy(fixture("github/issues/opened.payload.json"))
    payload["repository"]["html_url"] = "https://github.evil.example/Codertocat/Hello-World"
    minted = await deliver_github(base_url, token, secret, "issues", payload)
    endpoint, sbk, owner = await agent_for(services, "ada-agent", "ada")
    await move_todo(services, minted["todos"][0]["id"], endpoint)
    await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=GITHUB_SECRET
    )
    async with connect(base_url, sbk, endpoint) as agent:
        todo = await agent.ok("claim", todo_id=minted["todos"][0]["id"])
        assert todo["reply_to"]["host"] == "github.evil.example"
        err = await agent.error("reply", todo_id=todo["id"], text="hello")
    assert err["error"] == "no_connection"
    assert fake_github.requests == []


async def test_without_an_encryption_key_no_connection_can_be_created(services: Any, base_url: str) -> None:
    await tenancy.add_human(services.db, "ada")
    owner = await tenancy.resolve_owner(services.db, human="ada")
    endpoint, sbk = await tenancy.vend_endpoint(services.db, name="a", owner=owner, families=["connections"])
    keyless = dataclasses.replace(services, vault=Vault(None))
    with pytest.raises(SwitchboardError) as err:
        await conn.create_connection(keyless, owner, kind="github", name="gh", account_key=None, secret="s")
    assert err.value.code == "encryption_required"
    # The same over MCP, against a server whose vault has no key.
    services.vault = Vault(None)
    async with connect(base_url, sbk, endpoint) as agent:
        body = await agent.error(
            "create_connection", kind="github", name="gh", account_key="github.com", secret="s"
        )
        assert body["error"] == "encryption_required"
        assert (await agent.ok("list_connections"))["connections"] == []


async def test_our_own_comment_delivered_back_mints_no_todo(
    guarded: Any, services: Any, base_url: str, fake_github: FakeProvider
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    minted = await deliver_github(
        base_url, token, secret, "issues", fixture("github/issues/opened.payload.json")
    )
    endpoint, sbk, owner = await agent_for(services, "ada-agent", "ada")
    await move_todo(services, minted["todos"][0]["id"], endpoint)
    await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=GITHUB_SECRET
    )
    async with connect(base_url, sbk, endpoint) as agent:
        await agent.ok("claim", todo_id=minted["todos"][0]["id"])
        sent = await agent.ok("reply", todo_id=minted["todos"][0]["id"], text="Fixed in main.")
    assert sent["state"] == "sent"
    [comment] = fake_github.posts()
    echo = copy.deepcopy(fixture("github/issue_comment/created.payload.json"))
    echo["comment"].update(id=1001, body=comment.json["body"])
    answer = await deliver_github(base_url, token, secret, "issue_comment", echo)
    assert (answer["created"], answer["disposition"]) == (0, "self_reply")


async def test_no_mcp_response_log_line_or_page_contains_a_connection_secret(
    guarded: Any, services: Any, base_url: str, fake_slack: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    human, sbo = await tenancy.add_human(services.db, "ada")
    owner = tenancy.Owner(human_id=human.id)
    endpoint, sbk = await tenancy.vend_endpoint(
        services.db, name="ada-agent", owner=owner, families=["reply", "connections"]
    )
    token, _, _ = await make_webhook(services, "slack", owner="ada", endpoint="ada-agent")
    body = json.dumps(fixture("slack/message.json")).encode()
    _, minted, _ = await post(base_url, token, body, slack_headers(PROVIDER_SECRETS["slack"], body))
    todo_id = minted["todos"][0]["id"]
    responses: list[Any] = []
    async with connect(base_url, sbk, endpoint) as agent:
        made = await agent.ok(
            "create_connection", kind="slack", name="slack", account_key="T0123ABCD", secret=SLACK_SECRET
        )
        for tool, args in (
            ("list_connections", {}),
            ("claim", {"todo_id": todo_id}),
            ("reply", {"todo_id": todo_id, "text": "On it."}),
            ("get_todo", {"todo_id": todo_id}),
            ("list_todos", {}),
            ("rotate_connection", {"connection_id": made["id"], "secret": SLACK_SECRET + "-2"}),
            (
                "create_connection",
                {"kind": "slack", "name": "slack", "account_key": "T0123ABCD", "secret": SLACK_SECRET},
            ),
        ):
            result = await agent.call(tool, **args)
            responses.append(result.model_dump(mode="json"))
        responses.append(made)
    await conn.test_connection(services, owner, made["id"])
    pages: list[str] = []
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(f"{base_url}/ui/login") as resp:
            login_csrf = CSRF_RE.search(await resp.text())
        assert login_csrf is not None
        async with http.post(
            f"{base_url}/ui/login", data={"csrf": login_csrf.group(1), "token": sbo}, allow_redirects=False
        ) as resp:
            assert resp.status == 303
        for path in ("/ui", "/ui/connections", f"/ui/todos/{todo_id}", "/metrics"):
            async with http.get(f"{base_url}{path}") as resp:
                assert resp.status == 200, path
                pages.append(await resp.text())
        headers = {"Authorization": f"Bearer {sbo}"}
        for path in ("/api/v1/connections", f"/api/v1/todos/{todo_id}"):
            async with http.get(f"{base_url}{path}", headers=headers) as resp:
                assert resp.status == 200, path
                pages.append(await resp.text())
    assert re.search(r"fp_[0-9a-f]{20}", pages[1]), "the connections page shows the fingerprint"
    # Server-side log lines only: the agent's own MCP client logs the arguments it sends.
    server_lines = [
        r.getMessage() for r in caplog.records if not r.name.startswith(("mcp.client", "httpcore", "httpx"))
    ]
    assert any(r.name.startswith("switchboard") for r in caplog.records)
    haystack = json.dumps(responses) + "\n".join(pages) + "\n".join(server_lines)
    for secret in (SLACK_SECRET, SLACK_SECRET + "-2"):
        assert secret not in haystack
    assert fake_slack.posts()[0].auth == f"Bearer {SLACK_SECRET}"
