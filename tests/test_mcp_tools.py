"""/mcp over real Streamable HTTP with the official SDK client: auth, grants, every verb and error."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from sqlalchemy import select

from switchboard import tenancy
from switchboard.db import Database
from switchboard.mcp import DOORBELL, doorbell, sessions
from switchboard.models import Todo
from switchboard.services import Services
from switchboard.testing import Agent, add_todo, connect, vend

BASICS = ["list_todos", "get_todo", "claim", "claim_next", "heartbeat", "complete", "fail", "release"]
CONNECTION_VERBS = ["list_connections", "create_connection", "rotate_connection", "delete_connection"]
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def test_initialize_declares_the_channel_and_explains_it(db: Database, base_url: str) -> None:
    ep, token = await vend(db)
    async with connect(base_url, token, ep) as agent:
        caps = agent.client.server_capabilities
        assert caps.experimental == {"claude/channel": {}}
        text = agent.client.instructions or ""
        for phrase in ("<channel", "record", "hint", "reply_to", "reply", "todo_id", "publicly"):
            assert phrase in text, phrase


@pytest.mark.parametrize(
    ("families", "expected"),
    [
        ([], BASICS),
        (["reply"], [*BASICS, "reply"]),
        (["connections"], [*BASICS, *CONNECTION_VERBS]),
    ],
)
async def test_tools_list_shows_exactly_the_grant(
    db: Database, base_url: str, families: list[str], expected: list[str]
) -> None:
    ep, token = await vend(db, families=families)
    async with connect(base_url, token, ep) as agent:
        tools = {t.name: t for t in (await agent.client.list_tools()).tools}
        assert sorted(tools) == sorted(expected)
        for name, tool in tools.items():
            assert tool.input_schema["type"] == "object", name
        if "reply" in tools:
            assert "posted publicly" in (tools["reply"].description or "").lower()
        for name in CONNECTION_VERBS:
            if name in tools:
                assert "credentials" in (tools[name].description or ""), name


async def test_a_known_verb_outside_the_grant_is_forbidden(db: Database, base_url: str) -> None:
    ep, token = await vend(db)
    todo = await add_todo(db, ep)
    async with connect(base_url, token, ep) as agent:
        for name, args in (
            ("reply", {"todo_id": todo.id, "text": "hi"}),
            ("list_connections", {}),
            (
                "create_connection",
                {"kind": "github", "name": "x", "account_key": "github.com", "secret": "s"},
            ),
        ):
            body = await agent.error(name, **args)
            assert body["error"] == "forbidden", name
        body = await agent.error("drop_tables")
        assert body["error"] == "invalid_argument"


async def test_every_drain_verb_works_end_to_end(db: Database, base_url: str) -> None:
    ep, token = await vend(db, queues=["default", "ops"])
    first = await add_todo(db, ep, title="first", payload={"n": 1})
    second = await add_todo(db, ep, title="second", queue="ops", payload={"n": 2})
    third = await add_todo(db, ep, title="third")
    async with connect(base_url, token, ep) as agent:
        listed = await agent.ok("list_todos")
        assert [t["id"] for t in listed["todos"]] == [third.id, second.id, first.id]
        assert all("payload" not in t for t in listed["todos"])
        row = listed["todos"][0]
        assert set(row) == {
            "id", "queue", "source", "kind", "title", "state", "attempt", "max_attempts", "lease_expires_at",
            "next_retry_at", "dead_letter", "created_at", "updated_at", "payload_size", "reply_to", "replies",
        }  # fmt: skip
        assert row["replies"] == {"count": 0, "last_state": None, "last_permalink": None}
        assert row["created_at"].endswith("Z")
        assert [t["id"] for t in (await agent.ok("list_todos", queue="ops"))["todos"]] == [second.id]
        assert len((await agent.ok("list_todos", limit=1))["todos"]) == 1

        got = await agent.ok("get_todo", todo_id=first.id)
        assert got["payload"] == {"n": 1} and got["attempts"] == [] and got["replies"] == []
        assert got["result"] is None

        claimed = (await agent.ok("claim_next", queue="default"))["todo"]
        assert claimed["id"] == first.id and claimed["payload"] == {"n": 1} and claimed["state"] == "claimed"
        beat = await agent.ok("heartbeat", todo_id=first.id, lease_seconds=900)
        assert beat["lease_expires_at"] > claimed["lease_expires_at"]
        done = await agent.ok("complete", todo_id=first.id, result={"merged": True}, summary="ok")
        assert done["state"] == "done"
        detail = await agent.ok("get_todo", todo_id=first.id)
        assert detail["result"] == {"merged": True}
        assert detail["attempts"][0]["outcome"] == "completed" and detail["attempts"][0]["heartbeats"] == 1

        claimed = await agent.ok("claim", todo_id=second.id)
        assert claimed["payload"] == {"n": 2}
        failed = await agent.ok("fail", todo_id=second.id, error="flaky", summary="retry me")
        assert failed["state"] == "failed" and failed["next_retry_at"] is not None
        assert failed["dead_letter"] is False

        await agent.ok("claim", todo_id=third.id)
        released = await agent.ok("release", todo_id=third.id)
        assert released["state"] == "pending"
        assert (await agent.ok("list_todos", state="done"))["todos"][0]["id"] == first.id

        again = await agent.ok("claim_next", queue="default")
        assert again["todo"]["id"] == third.id
        assert await agent.ok("claim_next", queue="default") == {"empty": True}


async def test_error_codes(db: Database, base_url: str) -> None:
    ep, token = await vend(db)
    other, _ = await vend(db)
    mine = await add_todo(db, ep)
    theirs = await add_todo(db, other)
    async with connect(base_url, token, ep) as agent:
        # Another endpoint's todo does not exist for this one.
        for name in ("get_todo", "claim", "heartbeat", "complete", "fail", "release"):
            assert (await agent.error(name, todo_id=theirs.id))["error"] == "not_found", name
        assert (await agent.error("get_todo", todo_id="td_missing"))["error"] == "not_found"
        # A queue outside the grant.
        assert (await agent.error("claim_next", queue="billing"))["error"] == "forbidden"
        assert (await agent.error("list_todos", queue="billing"))["error"] == "forbidden"
        # Bad input, checked against each tool's schema.
        bad = [
            ("get_todo", {}),
            ("claim", {"todo_id": 7}),
            ("claim", {"todo_id": mine.id, "lease_seconds": 86401}),
            ("claim", {"todo_id": mine.id, "fence": "yes"}),
            ("list_todos", {"limit": 201}),
            ("list_todos", {"state": "lost"}),
            ("complete", {"todo_id": mine.id, "surprise": 1}),
        ]
        for name, args in bad:
            body = await agent.error(name, **args)
            assert body["error"] == "invalid_argument", (name, args)
        # Not holding the claim.
        for name in ("heartbeat", "complete", "fail", "release"):
            assert (await agent.error(name, todo_id=mine.id))["error"] == "conflict", name
        await agent.ok("claim", todo_id=mine.id)
        assert (await agent.error("claim", todo_id=mine.id))["error"] == "conflict"
    async with db.read() as s:
        assert (await s.get(Todo, theirs.id)).state == "pending"  # type: ignore[union-attr]


async def test_a_bad_argument_error_never_echoes_the_value(db: Database, base_url: str) -> None:
    ep, token = await vend(db, families=["connections"])
    async with connect(base_url, token, ep) as agent:
        result = await agent.call(
            "create_connection",
            kind="github",
            name="gh",
            account_key="github.com",
            secret=["sekrit-value-123"],
        )
        assert result.is_error
        assert "sekrit-value-123" not in json.dumps(result.model_dump(mode="json"))


async def test_requests_without_a_live_token_are_401(db: Database, base_url: str) -> None:
    _, token = await vend(db)
    async with aiohttp.ClientSession() as http:
        for headers in ({}, {"Authorization": "Bearer sbk_nope"}, {"Authorization": f"Basic {token}"}):
            async with http.post(f"{base_url}/mcp", json=INIT, headers={**MCP_HEADERS, **headers}) as resp:
                assert resp.status == 401
                assert resp.headers["WWW-Authenticate"] == "Bearer"
                body = await resp.json()
                assert body["error"] == "unauthorized" and body["message"]
                assert token not in json.dumps(body)
        async with http.get(f"{base_url}/mcp") as resp:
            assert resp.status == 401
        # And with the token, the same request opens a session.
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        async with http.post(f"{base_url}/mcp", json=INIT, headers=headers) as resp:
            assert resp.status == 200 and resp.headers.get("Mcp-Session-Id")


async def test_a_session_belongs_to_the_endpoint_that_opened_it(db: Database, base_url: str) -> None:
    _, token = await vend(db)
    _, intruder = await vend(db)
    async with aiohttp.ClientSession() as http:
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        async with http.post(f"{base_url}/mcp", json=INIT, headers=headers) as resp:
            session_id = resp.headers["Mcp-Session-Id"]
        list_tools = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        stolen = {**MCP_HEADERS, "Authorization": f"Bearer {intruder}", "Mcp-Session-Id": session_id}
        async with http.post(f"{base_url}/mcp", json=list_tools, headers=stolen) as resp:
            assert resp.status == 404


async def test_a_client_on_the_newest_stateless_revision_calls_every_tool(
    db: Database, base_url: str
) -> None:
    ep, token = await vend(db, families=["reply", "connections"])
    todo = await add_todo(db, ep, payload={"k": "v"})
    async with connect(base_url, token, ep, mode="2026-07-28") as agent:
        assert agent.client.protocol_version == "2026-07-28"
        names = {t.name for t in (await agent.client.list_tools()).tools}
        assert names == {*BASICS, "reply", *CONNECTION_VERBS}
        assert [t["id"] for t in (await agent.ok("list_todos"))["todos"]] == [todo.id]
        assert (await agent.ok("get_todo", todo_id=todo.id))["payload"] == {"k": "v"}
        assert (await agent.ok("claim_next"))["todo"]["id"] == todo.id
        await agent.ok("heartbeat", todo_id=todo.id)
        await agent.ok("release", todo_id=todo.id)
        await agent.ok("claim", todo_id=todo.id)
        await agent.ok("fail", todo_id=todo.id, error="x")
        assert (await agent.error("complete", todo_id=todo.id))["error"] == "conflict"
        assert (await agent.error("reply", todo_id=todo.id, text="hello"))["error"] == "no_reply_address"
        assert (await agent.ok("list_connections")) == {"connections": []}
        assert (await agent.error("claim_next", queue="nope"))["error"] == "forbidden"


async def test_connection_verbs_never_return_the_secret(db: Database, base_url: str) -> None:
    ep, token = await vend(db, families=["connections"])
    secret, rotated = "ghp_" + "a1B2" * 9, "ghp_" + "z9Y8" * 9
    async with connect(base_url, token, ep) as agent:
        seen: list[str] = []
        created = await agent.ok(
            "create_connection", kind="github", name="gh", account_key="github.com", secret=secret
        )
        seen.append(json.dumps(created))
        listed = await agent.ok("list_connections")
        seen.append(json.dumps(listed))
        assert [c["id"] for c in listed["connections"]] == [created["id"]]
        seen.append(
            json.dumps(await agent.ok("rotate_connection", connection_id=created["id"], secret=rotated))
        )
        dup = await agent.error(
            "create_connection", kind="github", name="gh", account_key="github.com", secret=secret
        )
        seen.append(json.dumps(dup))
        await agent.ok("delete_connection", connection_id=created["id"])
        assert (await agent.ok("list_connections")) == {"connections": []}
        missing = await agent.error("delete_connection", connection_id=created["id"])
        assert missing["error"] == "not_found"
        for text in seen:
            assert secret not in text and rotated not in text


async def test_two_clients_racing_claim_next_get_disjoint_sets(db: Database, base_url: str) -> None:
    ep, token = await vend(db)
    ids = set()
    async with db.write() as s:
        from switchboard.todos import new_todo_row

        for i in range(200):
            todo = new_todo_row(
                endpoint_id=ep.id, queue="default", source="manual", kind="manual", title=f"t{i}", payload={}
            )
            s.add(todo)
            ids.add(todo.id)

    async def drain(agent: Agent) -> list[str]:
        got = []
        while "todo" in (result := await agent.ok("claim_next")):
            got.append(result["todo"]["id"])
        return got

    async with connect(base_url, token, ep) as a, connect(base_url, token, ep) as b:
        got_a, got_b = await asyncio.gather(drain(a), drain(b))
    assert not set(got_a) & set(got_b)
    assert set(got_a) | set(got_b) == ids and len(got_a) + len(got_b) == 200
    assert got_a and got_b


async def test_an_expired_lease_returns_the_todo(db: Database, base_url: str) -> None:
    ep, token = await vend(db)
    todo = await add_todo(db, ep)
    async with connect(base_url, token, ep) as slow, connect(base_url, token, ep) as other:
        # Long enough that the other agent's claim_next comes well inside it on a loaded machine
        # (with 1 s, a slow CI run saw the lease expire and the todo reaped before it).
        await slow.ok("claim", todo_id=todo.id, lease_seconds=3)
        assert await other.ok("claim_next") == {"empty": True}
        # The reaper runs every second in the server.
        for _ in range(80):
            await asyncio.sleep(0.1)
            if (await other.ok("get_todo", todo_id=todo.id))["state"] == "pending":
                break
        assert (await slow.error("complete", todo_id=todo.id))["error"] == "conflict"
        got = await other.ok("claim_next")
        assert got["todo"]["id"] == todo.id and got["todo"]["attempt"] == 2
        detail = await other.ok("get_todo", todo_id=todo.id)
        assert [a["outcome"] for a in detail["attempts"]] == ["expired", None]
        await other.ok("complete", todo_id=todo.id)


async def test_fencing_refuses_a_stale_holder_over_mcp(db: Database, base_url: str) -> None:
    ep, token = await vend(db)
    todo = await add_todo(db, ep)
    async with connect(base_url, token, ep) as agent:
        first = await agent.ok("claim", todo_id=todo.id, fence=True)
        token_one = first["lease_token"]
        assert (await agent.error("complete", todo_id=todo.id))["error"] == "conflict"
        await agent.ok("heartbeat", todo_id=todo.id, lease_token=token_one)
        await agent.ok("release", todo_id=todo.id, lease_token=token_one)
        second = (await agent.ok("claim_next", fence=True))["todo"]
        stale = await agent.error("complete", todo_id=todo.id, lease_token=token_one)
        assert stale["error"] == "conflict" and token_one not in stale["message"]
        done = await agent.ok("complete", todo_id=todo.id, lease_token=second["lease_token"])
        assert done["state"] == "done"
        detail = await agent.ok("get_todo", todo_id=todo.id)
        assert token_one not in json.dumps(detail) and second["lease_token"] not in json.dumps(detail)


async def test_revoking_an_endpoint_closes_its_sessions_and_then_401(
    db: Database, services: Services, server: TestServer, base_url: str
) -> None:
    ep, token = await vend(db)
    todo = await add_todo(db, ep)
    async with aiohttp.ClientSession() as http:
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        async with http.post(f"{base_url}/mcp", json=INIT, headers=headers) as resp:
            session_id = resp.headers["Mcp-Session-Id"]
        headers["Mcp-Session-Id"] = session_id
        async with http.post(
            f"{base_url}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
        ) as resp:
            assert resp.status == 202
        stream = await http.get(f"{base_url}/mcp", headers={**headers, "Accept": "text/event-stream"})
        assert stream.status == 200
        bell = server.app[DOORBELL]
        assert session_id in bell.sessions

        # Revoked from "another process": straight in the database, as the CLI does.
        await tenancy.revoke_endpoint(db, ep.slug)
        # The notification stream ends when the sweep closes the session.
        await asyncio.wait_for(stream.read(), 5)
        stream.close()
        assert session_id not in bell.sessions
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "list_todos", "arguments": {}},
        }
        async with http.post(f"{base_url}/mcp", json=call, headers=headers) as resp:
            assert resp.status == 401
            assert resp.headers["WWW-Authenticate"] == "Bearer"
    async with db.read() as s:
        row = await s.scalar(select(Todo).where(Todo.id == todo.id))
        assert row is not None and row.dead_letter


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Everything at DEBUG, set before the server starts (as an operator's LOG_LEVEL=DEBUG)."""
    caplog.set_level(logging.DEBUG)
    return caplog


async def test_no_secret_or_lease_token_reaches_a_log_line_even_at_debug(
    debug_logs: pytest.LogCaptureFixture, db: Database, base_url: str
) -> None:
    ep, token = await vend(db, families=["connections"])
    todo = await add_todo(db, ep)
    secret = "xoxb-" + "1234567890-" * 3 + "abcdefghijklmnop"
    async with connect(base_url, token, ep) as agent:
        await agent.ok("create_connection", kind="slack", name="sl", account_key="T0123ABC", secret=secret)
        lease_token = (await agent.ok("claim", todo_id=todo.id, fence=True))["lease_token"]
        await agent.ok("complete", todo_id=todo.id, lease_token=lease_token)
    assert any(r.levelno == logging.DEBUG for r in debug_logs.records)  # logging really was at DEBUG
    for value in (secret, lease_token, token):
        assert value not in debug_logs.text


async def test_an_endpoint_over_its_session_limit_loses_its_oldest_session(
    db: Database, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions, "MAX_SESSIONS_PER_ENDPOINT", 2)
    _, token = await vend(db)
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    list_tools = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with aiohttp.ClientSession() as http:
        ids = []
        for _ in range(3):
            async with http.post(f"{base_url}/mcp", json=INIT, headers=headers) as resp:
                assert resp.status == 200
                ids.append(resp.headers["Mcp-Session-Id"])
        statuses = []
        for session_id in ids:
            async with http.post(
                f"{base_url}/mcp", json=list_tools, headers={**headers, "Mcp-Session-Id": session_id}
            ) as resp:
                statuses.append(resp.status)
        assert statuses[0] == 404 and statuses[1:] == [200, 200]


async def test_malformed_requests_get_a_4xx_and_leave_no_session(
    db: Database,
    services: Services,
    base_url: str,
    bell: doorbell.Doorbell,
) -> None:
    _, token = await vend(db)
    auth = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        cases = [
            ("POST", {**MCP_HEADERS, **auth}, b"{not json"),
            ("POST", {**MCP_HEADERS, **auth}, b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'),
            (
                "POST",
                {**auth, "Accept": "application/json, text/event-stream", "Content-Type": "text/plain"},
                b"{}",
            ),
            ("POST", {**MCP_HEADERS, **auth}, b"[]"),
            ("GET", {**auth, "Accept": "text/event-stream"}, b""),
            ("DELETE", {**auth, "Mcp-Session-Id": "0" * 32}, b""),
            ("POST", {**MCP_HEADERS, **auth, "Mcp-Protocol-Version": "2099-01-01"}, b"{}"),
            ("POST", {**MCP_HEADERS, **auth}, b"x" * (4 * 1024 * 1024 + 10)),
        ]
        for method, headers, body in cases:
            async with http.request(method, f"{base_url}/mcp", headers=headers, data=body) as resp:
                assert 400 <= resp.status < 500, (method, headers, body[:40], resp.status)
    assert not bell.sessions


# ---------------------------------------------------------------------------------------------
# NUL: PostgreSQL text cannot hold it, so an argument carrying one is refused as invalid on
# both engines; inside a result it is data.


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("get_todo", {"todo_id": "td_\x00"}),
        ("claim", {"todo_id": "a\x00b"}),
        ("complete", {"todo_id": "\x00"}),
        ("reply", {"todo_id": "\x00", "text": "hello"}),
        ("rotate_connection", {"connection_id": "cn_\x00", "secret": "s"}),
        ("delete_connection", {"connection_id": "\x00"}),
        (
            "create_connection",
            {
                "kind": "github",
                "name": "n",
                "account_key": "github.com",
                "secret": "s",
                "endpoints": ["\x00"],
            },
        ),
    ],
)
async def test_a_nul_in_a_tool_argument_is_invalid_argument_on_every_engine(
    services: Services, base_url: str, tool: str, arguments: dict[str, Any]
) -> None:
    # PostgreSQL text cannot hold NUL: these answered `internal` there before.
    endpoint, token = await vend(services.db, families=["basics", "reply", "connections"])
    async with connect(base_url, token, endpoint) as agent:
        error = await agent.error(tool, **arguments)
    assert error["error"] == "invalid_argument"
    assert "NUL" in error["message"]


async def test_a_nul_inside_a_result_is_data_not_an_argument_error(services: Services, base_url: str) -> None:
    endpoint, token = await vend(services.db)
    todo = await add_todo(services.db, endpoint)
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        done = await agent.ok("complete", todo_id=todo.id, result={"note": "a\x00b"})
    assert done["state"] == "done"
