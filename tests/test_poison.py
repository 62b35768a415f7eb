"""Poison todos (issue 13, item 8): a payload nested too deep for MCP, or holding NaN/Infinity, is
kept as text at ingest; a todo that still cannot be serialised (stored before that, or by another
path) is delivered with its data as text, and failing that is a tool error that releases the
claim, never a JSON-RPC internal error with the todo claimed behind the agent's back. The API
never answers with a bare ``NaN``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import aiohttp
import pytest
from sqlalchemy import select

from switchboard import tenancy
from switchboard.db import Database
from switchboard.mcp import wire
from switchboard.models import Todo
from switchboard.sanitize import MAX_PAYLOAD_DEPTH, NOT_FINITE, TOO_DEEP, storable_encoded
from switchboard.services import Services
from switchboard.testing import add_todo, connect, github_headers, make_webhook, post
from switchboard.todos import encode_payload

FIXTURES = Path(__file__).parent / "fixtures" / "github"


def _nested(depth: int) -> str:
    """A JSON object ``depth`` levels deep, compact: {"a":{"a":…1…}}."""
    return '{"a":' * depth + "1" + "}" * depth


def _strict(text: str) -> Any:
    """Parse as standard JSON: a NaN or Infinity token is an error, as in most languages."""

    def refuse(token: str) -> NoReturn:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


async def _agent_endpoint(services: Services) -> tuple[Any, str, str]:
    """Human ada (and her sbo_ token) with the endpoint ``ada-agent`` (and its sbk_ token)."""
    human, human_token = await tenancy.add_human(services.db, "ada")
    endpoint, token = await tenancy.vend_endpoint(
        services.db, name="ada-agent", owner=tenancy.Owner(human_id=human.id)
    )
    return endpoint, token, human_token


# ---------------------------------------------------------------------------------------------
# Kept as text where the payload is made storable


def test_a_payload_deeper_than_the_bound_or_not_finite_is_kept_whole_as_text() -> None:
    ok = json.loads(_nested(MAX_PAYLOAD_DEPTH))
    assert storable_encoded(ok) == (ok, encode_payload(ok))
    deep = json.loads(_nested(MAX_PAYLOAD_DEPTH + 1))
    kept, encoded = storable_encoded(deep)
    assert kept == {"body": _nested(MAX_PAYLOAD_DEPTH + 1), "kept_as_text": TOO_DEEP}
    assert encoded == encode_payload(kept) and _strict(encoded.decode()) == kept
    # Brackets inside strings do not count as nesting.
    flat = {"text": "[" * 1000 + "{" * 1000}
    assert storable_encoded(flat)[0] == flat
    strange = {"x": float("nan"), "y": [float("inf"), -float("inf")], "z": "\ud800"}
    kept, encoded = storable_encoded(strange)
    assert kept == {"body": '{"x":NaN,"y":[Infinity,-Infinity],"z":"\ufffd"}', "kept_as_text": NOT_FINITE}
    assert _strict(encoded.decode()) == kept


@pytest.mark.parametrize("depth", [500, 1000])
async def test_a_deep_generic_payload_goes_through_ingest_and_claim_next(
    services: Services, base_url: str, depth: int
) -> None:
    endpoint, token, _ = await _agent_endpoint(services)
    ingest, _, _ = await make_webhook(services, "generic")
    body = _nested(depth)
    status, answer, _ = await post(base_url, ingest, body.encode(), {"Content-Type": "application/json"})
    assert status == 202 and answer["created"] == 1, answer
    async with connect(base_url, token, endpoint) as agent:
        claimed = (await agent.ok("claim_next"))["todo"]
        # 500 levels parse and are kept as text here; 1,000 do not parse at all and the generic
        # source keeps the body as text, as it does for any body that is not a JSON object.
        assert claimed["payload"]["body"] == body
        assert claimed["payload"].get("kept_as_text") == (TOO_DEEP if depth == 500 else None)
        detail = await agent.ok("get_todo", todo_id=claimed["id"])
        assert detail["payload"] == claimed["payload"] and detail["state"] == "claimed"
        await agent.ok("complete", todo_id=claimed["id"])


async def test_nan_and_infinity_in_a_verified_body_are_kept_as_text_and_never_reemitted(
    services: Services, base_url: str
) -> None:
    endpoint, token, human_token = await _agent_endpoint(services)
    ingest, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    raw = (FIXTURES / "issues" / "opened.payload.json").read_text().rstrip()
    assert raw.endswith("}")
    body = (raw[:-1] + ', "score": NaN, "range": [Infinity, -Infinity]}').encode()
    status, answer, _ = await post(base_url, ingest, body, github_headers(secret, body, "issues"))
    assert status == 202 and answer["verified"] is True and answer["created"] == 1, answer
    todo_id = answer["todos"][0]["id"]
    async with connect(base_url, token, endpoint) as agent:
        detail = await agent.ok("get_todo", todo_id=todo_id)
    assert detail["payload"]["kept_as_text"] == NOT_FINITE
    assert "NaN" in detail["payload"]["body"] and detail["reply_to"]["kind"] == "forge_comment"
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"{base_url}/api/v1/todos/{todo_id}", headers={"Authorization": f"Bearer {human_token}"}
        ) as resp,
    ):
        text = await resp.text()
    assert resp.status == 200, text
    assert _strict(text)["todo"]["payload"]["kept_as_text"] == NOT_FINITE


async def test_the_api_writes_a_stored_nan_as_null(services: Services, base_url: str) -> None:
    endpoint, _, human_token = await _agent_endpoint(services)
    # As a todo stored before ingest kept such payloads as text.
    todo = await add_todo(services.db, endpoint, payload={"score": float("nan"), "big": float("inf")})
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"{base_url}/api/v1/todos/{todo.id}", headers={"Authorization": f"Bearer {human_token}"}
        ) as resp,
    ):
        text = await resp.text()
    assert resp.status == 200, text
    assert _strict(text)["todo"]["payload"] == {"score": None, "big": None}


# ---------------------------------------------------------------------------------------------
# Defence in depth over MCP: a poison todo stored before the bound


async def _state(db: Database, todo_id: str) -> tuple[str, int]:
    async with db.read() as s:
        row = await s.scalar(select(Todo).where(Todo.id == todo_id))
    assert row is not None
    return row.state, row.attempt


async def test_a_stored_poison_todo_is_delivered_with_its_payload_as_text(
    services: Services, base_url: str
) -> None:
    endpoint, token, _ = await _agent_endpoint(services)
    poison = json.loads(_nested(400))
    todo = await add_todo(services.db, endpoint, payload=poison)
    async with connect(base_url, token, endpoint) as agent:
        claimed = (await agent.ok("claim_next", fence=True))["todo"]
        assert claimed["id"] == todo.id and claimed["lease_token"]
        assert claimed["payload"] == {"body": _nested(400), "kept_as_text": wire.UNSENDABLE}
        detail = await agent.ok("get_todo", todo_id=todo.id)
        assert detail["payload"]["kept_as_text"] == wire.UNSENDABLE
        # The agent holds the claim and can finish it.
        await agent.ok("complete", todo_id=todo.id, lease_token=claimed["lease_token"])
    assert await _state(services.db, todo.id) == ("done", 1)


async def test_an_undeliverable_claim_is_a_tool_error_and_the_claim_is_released(
    services: Services, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if even the text form could not be written: the last line of defence.
    monkeypatch.setattr(wire, "data_as_text", lambda result: result)
    endpoint, token, _ = await _agent_endpoint(services)
    todo = await add_todo(services.db, endpoint, payload=json.loads(_nested(400)))
    async with connect(base_url, token, endpoint) as agent:
        for verb, arguments in (("claim_next", {"fence": True}), ("claim", {"todo_id": todo.id})):
            refused = await agent.error(verb, **arguments)
            assert refused["error"] == "unserializable" and refused["released"] == [todo.id], refused
            assert todo.id in refused["message"]
            # Pending again, and the attempt was not spent.
            assert await _state(services.db, todo.id) == ("pending", 0)
        assert (await agent.error("get_todo", todo_id=todo.id))["error"] == "unserializable"
        assert (await agent.ok("list_todos"))["todos"][0]["id"] == todo.id


async def test_in_a_batch_only_the_poison_todo_goes_as_text_and_all_are_released_if_none_can_go(
    services: Services, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, token, _ = await _agent_endpoint(services)
    poison = await add_todo(services.db, endpoint, payload=json.loads(_nested(400)))
    fine = await add_todo(services.db, endpoint, payload={"ok": 1})
    async with connect(base_url, token, endpoint) as agent:
        batch = (await agent.ok("claim_next", max=5))["todos"]
        payloads = {t["id"]: t["payload"] for t in batch}
        assert payloads == {
            poison.id: {"body": _nested(400), "kept_as_text": wire.UNSENDABLE},
            fine.id: {"ok": 1},
        }
        for todo in batch:
            await agent.ok("release", todo_id=todo["id"])
        monkeypatch.setattr(wire, "data_as_text", lambda result: result)
        refused = await agent.error("claim_next", max=5, fence=True)
        assert refused["error"] == "unserializable" and sorted(refused["released"]) == sorted(
            [poison.id, fine.id]
        )
    for todo_id in (poison.id, fine.id):
        assert await _state(services.db, todo_id) == ("pending", 0)
