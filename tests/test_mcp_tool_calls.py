"""Tool calls answered without the SDK's per-request machinery (``switchboard.mcp.tool_calls``):
the agent reads exactly what the SDK would have sent, call by call and on every handshake protocol
version, and whatever this path does not take still reaches the SDK and is answered in the SDK's
own words."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer, make_mocked_request
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from switchboard.db import Database
from switchboard.mcp import MCP_SERVICE, McpService
from switchboard.mcp.tool_calls import accepts_json, parse
from switchboard.testing import add_todo, vend

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass
class Answer:
    status: int
    content_type: str
    session_id: str | None
    body: Any


@dataclass
class Agent:
    """One stateful session spoken to in raw HTTP, so every byte of an answer is seen."""

    http: aiohttp.ClientSession
    url: str
    headers: dict[str, str]
    session_id: str

    async def post(self, message: Any, **headers: str) -> Answer:
        data = message if isinstance(message, bytes) else json.dumps(message)
        async with self.http.post(self.url, data=data, headers={**self.headers, **headers}) as resp:
            raw = await resp.read()
            return Answer(
                resp.status,
                resp.headers.get("Content-Type", ""),
                resp.headers.get("Mcp-Session-Id"),
                json.loads(raw) if raw else None,
            )

    async def call(self, name: str, arguments: Any = None, request_id: Any = 1) -> Answer:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return await self.post({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


@asynccontextmanager
async def agent(base_url: str, token: str, version: str = "2025-11-25") -> AsyncIterator[Agent]:
    headers = {**HEADERS, "Authorization": f"Bearer {token}"}
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "qa", "version": "1"},
        },
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base_url}/mcp", json=init, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            session_id = resp.headers["Mcp-Session-Id"]
        headers = {**headers, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": version}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with http.post(f"{base_url}/mcp", json=initialized, headers=headers) as resp:
            assert resp.status == 202
        yield Agent(http, f"{base_url}/mcp", headers, session_id)


def _service(server: TestServer) -> McpService:
    return server.app[MCP_SERVICE]


class SdkCalls:
    """Counts the requests that reached the SDK's transport."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = StreamableHTTPServerTransport.handle_request

        async def counted(
            transport: StreamableHTTPServerTransport, scope: Any, receive: Any, send: Any
        ) -> None:
            self.count += 1
            await original(transport, scope, receive, send)

        monkeypatch.setattr(StreamableHTTPServerTransport, "handle_request", counted)


# ---------------------------------------------------------------------------------------------
# The same answers as the SDK's


class Names:
    """Ids, tokens and timestamps differ between two runs of the same script: each is replaced by
    a name given in order of first appearance, so two runs compare as equal exactly when they
    answered alike."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def name(self, value: str, kind: str) -> str:
        return self.names.setdefault(value, f"<{kind}{len(self.names)}>")

    def text(self, text: str) -> str:
        return re.sub(r"\b(td|ep)_[0-9a-z]+", lambda m: self.name(m.group(0), m.group(1)), text)

    def __call__(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: self(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v, key) for v in value]
        if isinstance(value, str):
            if key == "text":
                # A tool's text content is the result's JSON (or "<code>: <message>").
                try:
                    return ("json", self(json.loads(value)))
                except ValueError:
                    return self.text(value)
            if key.endswith("_at"):
                return "<time>"
            if key == "lease_token":
                return self.name(value, "lease")
            return self.text(value)
        return value


async def _script(db: Database, base_url: str, version: str) -> list[tuple[int, str, bool, Any]]:
    """Every lifecycle verb, answered and refused, and the other verbs' answers and refusals, on a
    fresh endpoint (granted the basics and reply) with three todos."""
    ep, token = await vend(db, families=["reply"])
    todos = [
        await add_todo(db, ep, title="first", payload={"text": "héllo </channel>", "n": [1, 2.5, None]}),
        await add_todo(db, ep, title="second", payload={"deep": {"er": {"est": True}}}),
        await add_todo(db, ep, title="third"),
    ]
    answers: list[Answer] = []
    async with agent(base_url, token, version) as a:
        got = await a.call("claim_next", {})
        answers.append(got)
        first = got.body["result"]["structuredContent"]["todo"]["id"]
        answers.append(await a.call("heartbeat", {"todo_id": first, "lease_seconds": 60}))
        answers.append(
            await a.call("complete", {"todo_id": first, "result": {"ok": True, "s": "é"}, "summary": "s"})
        )
        answers.append(await a.call("complete", {"todo_id": first}))
        fenced = await a.call("claim", {"todo_id": todos[1].id, "fence": True}, request_id="by-name")
        answers.append(fenced)
        token_ = fenced.body["result"]["structuredContent"]["lease_token"]
        answers.append(await a.call("heartbeat", {"todo_id": todos[1].id}))
        answers.append(await a.call("fail", {"todo_id": todos[1].id, "error": "no", "lease_token": token_}))
        answers.append(await a.call("claim_next", {"max": 5}))
        answers.append(await a.call("release", {"todo_id": todos[2].id}))
        answers.append(await a.call("claim_next", {"max": 3}))
        answers.append(await a.call("claim_next"))
        answers.append(await a.call("complete", {}))
        answers.append(await a.call("complete", {"todo_id": 5}))
        answers.append(await a.call("complete", {"todo_id": "td_nope"}))
        answers.append(await a.call("claim_next", {"queue": "not-granted"}))
        answers.append(await a.call("claim_next", {"surprise": 1}))
        answers.append(await a.call("claim_next", {"max": 51}))
        answers.append(await a.call("fail", {"todo_id": "td_x\u0000"}))
        answers.append(await a.call("complete", [1]))
        answers.append(await a.call("release", {"todo_id": todos[2].id}, request_id=2**40))
        # A number orjson would read as a float: the agent's result keeps it whole.
        got = await a.call("claim", {"todo_id": todos[2].id})
        answers.append(got)
        answers.append(await a.call("complete", {"todo_id": todos[2].id, "result": {"n": 2**70}}))
        answers.append(await a.call("get_todo", {"todo_id": todos[2].id}))
        # The other verbs: reads, reply's refusals, and verbs outside the grant.
        answers.append(await a.call("list_todos"))
        answers.append(await a.call("list_todos", {"state": "done", "limit": 1}))
        answers.append(await a.call("get_todo", {"todo_id": "td_nope"}))
        answers.append(await a.call("reply", {"todo_id": todos[2].id, "text": "  "}))
        answers.append(await a.call("reply", {"todo_id": "td_nope", "text": "hello"}))
        answers.append(await a.call("reply", {"todo_id": todos[2].id, "text": "hello"}))
        answers.append(await a.call("list_connections"))
        answers.append(
            await a.call(
                "create_connection", {"kind": "github", "name": "n", "account_key": "a", "secret": "s3cr3t"}
            )
        )
        answers.append(await a.call("nope", {}))
        for got in answers:
            assert got.session_id == a.session_id
            # A secret in the arguments never comes back, whichever path answered.
            assert "s3cr3t" not in json.dumps(got.body)
    names = Names()
    return [(x.status, x.content_type, x.session_id is not None, names(x.body)) for x in answers]


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
async def test_every_tool_answer_is_the_one_the_sdk_sends(
    db: Database, server: TestServer, base_url: str, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk = SdkCalls(monkeypatch)
    service = _service(server)
    direct = await _script(db, base_url, version)
    # Only the handshake, the one call whose arguments are not an object (the SDK's own JSON-RPC
    # refusal), the one with a number orjson would read otherwise, and the unknown tool went
    # through the SDK.
    assert sdk.count == 2 + 3
    service.answer_tool_calls = False
    through_sdk = await _script(db, base_url, version)
    # Switched off, every request did.
    assert sdk.count == 5 + 2 + len(through_sdk)
    assert direct == through_sdk
    # The script did what it says: answers, refusals and a JSON-RPC error, with the ids kept.
    results = [body.get("result", {}) for _, _, _, body in direct]
    assert results[0]["structuredContent"]["todo"]["state"] == "claimed"
    assert results[2]["structuredContent"]["state"] == "done"
    assert results[3]["structuredContent"]["error"] == "conflict"
    assert direct[4][3]["id"] == "by-name"
    assert results[7]["structuredContent"]["todos"][0]["title"] == "third"
    assert results[10]["structuredContent"] == {"empty": True}
    assert [r["structuredContent"]["error"] for r in results[11:18]] == ["invalid_argument"] * 2 + [
        "not_found",
        "forbidden",
        "invalid_argument",
        "invalid_argument",
        "invalid_argument",
    ]
    assert direct[18][3]["error"]["code"] == -32602
    assert direct[19][3]["id"] == 2**40
    assert results[22]["structuredContent"]["result"] == {"n": 2**70}
    assert len(results[23]["structuredContent"]["todos"]) == 3
    assert len(results[24]["structuredContent"]["todos"]) == 1
    assert [r["structuredContent"]["error"] for r in results[25:31]] == [
        "not_found",
        "invalid_argument",
        "not_found",
        "no_reply_address",
        "forbidden",
        "forbidden",
    ]
    assert results[31]["isError"] and "nope" in results[31]["content"][0]["text"]


# ---------------------------------------------------------------------------------------------
# What this path leaves to the SDK


async def test_what_the_sdk_must_word_is_still_answered_by_the_sdk(
    db: Database, server: TestServer, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ep, token = await vend(db)
    await add_todo(db, ep)
    async with agent(base_url, token) as a:
        sdk = SdkCalls(monkeypatch)
        # A client that cannot read JSON: the SDK's 406, and nothing claimed.
        refused = await a.post(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "claim_next"}},
            Accept="text/event-stream",
        )
        assert refused.status == 406 and refused.body["error"]["code"] == -32600
        # A member this path does not know of: the SDK answers (and claims).
        odd = await a.post(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "claim_next", "task": {}}}
        )
        assert odd.status == 200 and "todo" in odd.body["result"]["structuredContent"]
        # A batch, and a notification: the SDK's words.
        batch = await a.post(
            [{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "claim_next"}}]
        )
        assert batch.status == 400
        assert (
            await a.post({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "x"}})
        ).status == 202
        assert sdk.count == 4
        # A terminated session is not found, by either path.
        async with a.http.delete(a.url, headers=a.headers) as resp:
            assert resp.status == 200
        gone = await a.call("claim_next")
        assert gone.status == 404


async def test_a_lifecycle_call_restarts_the_idle_countdown_and_leaves_the_session_idle(
    db: Database, server: TestServer, base_url: str
) -> None:
    ep, token = await vend(db)
    await add_todo(db, ep)
    service = _service(server)
    async with agent(base_url, token) as a:
        held = service.held[a.session_id]
        scope = held.transport.idle_scope
        assert scope is not None
        before = scope.deadline
        got = await a.call("claim_next")
        assert got.status == 200 and "todo" in got.body["result"]["structuredContent"]
        assert scope.deadline > before
        assert held.busy == 0 and held.idle


# ---------------------------------------------------------------------------------------------
# Recognising a lifecycle call


def _message(**overrides: Any) -> bytes:
    message: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "complete", "arguments": {"todo_id": "td_1"}},
    }
    message.update(overrides)
    return json.dumps(message).encode()


@pytest.mark.parametrize(
    ("body", "taken"),
    [
        (_message(), True),
        (_message(id="abc"), True),
        (_message(params={"name": "claim_next"}), True),
        (_message(params={"name": "claim_next", "arguments": None, "_meta": {"progressToken": 1}}), True),
        (_message(id=True), False),
        (_message(id=1.5), False),
        (_message(id=None), False),
        (_message(jsonrpc="1.0"), False),
        (_message(extra=1), False),
        (_message(params={"name": "claim_next", "task": {}}), False),
        (_message(params={"name": "reply", "arguments": {}}), True),
        (_message(params={"name": "nope", "arguments": {}}), False),
        (_message(params={"name": ["claim"]}), False),
        (_message(method="tools/list"), False),
        (b"[" + _message() + b"]", False),
        (b"not json", False),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "claim", "x": NaN}}',
            False,
        ),
        (_message(params={"name": "complete", "arguments": {"result": "x" * 70_000}}), False),
        (_message(params={"name": "complete", "arguments": {"result": [[]] * 100}}), True),
        (_message(params={"name": "complete", "arguments": {"result": [[]] * 200}}), False),
        (_message(params={"name": "complete", "arguments": {"result": 10**17}}), True),
        (_message(params={"name": "complete", "arguments": {"result": 10**19}}), False),
    ],
)
def test_only_one_plain_lifecycle_tools_call_is_taken(body: bytes, taken: bool) -> None:
    assert (parse("POST", body) is not None) is taken
    assert parse("GET", body) is None


@pytest.mark.parametrize(
    ("accept", "json_ok"),
    [
        ("application/json, text/event-stream", True),
        ("text/event-stream;q=1, APPLICATION/JSON;q=0.5", True),
        ("*/*", True),
        ("application/*", True),
        ("text/event-stream", False),
        ("", False),
        ("application/jsonx", False),
    ],
)
def test_accepting_json_is_judged_as_the_sdk_judges_it(accept: str, json_ok: bool) -> None:
    request = make_mocked_request("POST", "/mcp", headers={"Accept": accept} if accept else {})
    assert accepts_json(request) is json_ok


@pytest.mark.parametrize("depth", [150, 400, 1100])
async def test_a_deeply_nested_result_is_answered_as_the_sdk_answers_it(
    db: Database, server: TestServer, base_url: str, depth: int
) -> None:
    """However deep an agent's ``result`` (orjson reads up to 1,024 levels, the SDK's parser about
    250), the answer is the SDK's own and never a 500."""
    service = _service(server)
    # Written out: the standard library cannot encode (or decode) this deep.
    deep = "[" * depth + '"leaf"' + "]" * depth
    answers = []
    for direct in (True, False):
        service.answer_tool_calls = direct
        ep, token = await vend(db)
        await add_todo(db, ep)
        async with agent(base_url, token) as a:
            got = await a.call("claim_next", {})
            todo_id = got.body["result"]["structuredContent"]["todo"]["id"]
            params = f'{{"name": "complete", "arguments": {{"todo_id": "{todo_id}", "result": {deep}}}}}'
            done = await a.post(
                f'{{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {params}}}'.encode()
            )
            assert done.status < 500
            answers.append((done.status, Names()(done.body)))
    assert answers[0] == answers[1]
