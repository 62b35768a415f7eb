"""``reply`` honours fencing (issue 13, item 13), over real MCP: while the current claim is fenced,
a reply must carry its ``lease_token``; a superseded fenced worker is refused ``conflict`` exactly
as its ``complete`` is, and nothing is posted or recorded for it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from switchboard import todos
from switchboard.db import utcnow
from switchboard.services import Services
from switchboard.testing import FakeProvider, add_todo, connect, slack_address, vend

SLACK_SECRET = "xoxb-fence-test-" + "Qw7Zr2Lp"


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    return fake_api_settings


async def test_a_superseded_fenced_worker_cannot_reply_and_the_current_holder_must_show_its_token(
    guarded: Any, services: Services, base_url: str, fake_slack: FakeProvider
) -> None:
    endpoint, token = await vend(services.db, families=["reply", "connections"])
    todo = await add_todo(services.db, endpoint, reply_to=slack_address().as_dict(), source="slack")
    async with connect(base_url, token, endpoint) as first, connect(base_url, token, endpoint) as second:
        await first.ok(
            "create_connection", kind="slack", name="slack", account_key="T0TEST", secret=SLACK_SECRET
        )
        old = (await first.ok("claim", todo_id=todo.id, fence=True))["lease_token"]
        # The first worker's lease runs out (the reaper sees it expired) and the second claims.
        assert await todos.reap_leases(services.db, now=utcnow() + timedelta(hours=1)) == [todo.id]
        new = (await second.ok("claim_next", fence=True))["todo"]["lease_token"]
        assert new != old

        for arguments in ({"lease_token": old}, {}):
            refused = await first.error("reply", todo_id=todo.id, text="stale words", **arguments)
            assert refused["error"] == "conflict", refused
        assert (await first.error("complete", todo_id=todo.id, lease_token=old))["error"] == "conflict"
        # The holder too must present its token while the claim is fenced.
        missing = await second.error("reply", todo_id=todo.id, text="no token")
        assert missing["error"] == "conflict" and "lease_token" in missing["message"]
        assert (await second.error("reply", todo_id=todo.id, text="x", lease_token=""))["error"] == (
            "invalid_argument"
        )
        assert fake_slack.posts() == []

        sent = await second.ok("reply", todo_id=todo.id, text="On it.", lease_token=new)
        assert sent["state"] == "sent"
        await second.ok("complete", todo_id=todo.id, lease_token=new)
        # Within the grace window the claim that finished the todo still answers with its token,
        # and only it: the superseded worker is refused as it was while that claim was open.
        for arguments in ({"lease_token": old}, {}):
            refused = await first.error("reply", todo_id=todo.id, text="stale words", **arguments)
            assert refused["error"] == "conflict", refused
        missing = await second.error("reply", todo_id=todo.id, text="no token")
        assert missing["error"] == "conflict" and "lease_token" in missing["message"]
        after = await second.ok("reply", todo_id=todo.id, text="Done.", lease_token=new)
        assert after["state"] == "sent"
        detail = await second.ok("get_todo", todo_id=todo.id)
    assert [r["state"] for r in detail["replies"]] == ["sent", "sent"]
    assert [p.json["text"] for p in fake_slack.posts()] == ["On it.", "Done."]


async def test_a_failed_fenced_claim_answers_in_its_grace_window_with_its_token_only(
    guarded: Any, services: Services, base_url: str, fake_slack: FakeProvider
) -> None:
    endpoint, token = await vend(services.db, families=["reply", "connections"])
    todo = await add_todo(services.db, endpoint, reply_to=slack_address().as_dict(), source="slack")
    async with connect(base_url, token, endpoint) as first, connect(base_url, token, endpoint) as second:
        await first.ok(
            "create_connection", kind="slack", name="slack", account_key="T0TEST", secret=SLACK_SECRET
        )
        old = (await first.ok("claim", todo_id=todo.id, fence=True))["lease_token"]
        assert await todos.reap_leases(services.db, now=utcnow() + timedelta(hours=1)) == [todo.id]
        new = (await second.ok("claim_next", fence=True))["todo"]["lease_token"]
        assert (await second.ok("fail", todo_id=todo.id, error="flaky", lease_token=new))["state"] == "failed"
        refused = await first.error("reply", todo_id=todo.id, text="stale words", lease_token=old)
        assert refused["error"] == "conflict", refused
        assert fake_slack.posts() == []
        sent = await second.ok("reply", todo_id=todo.id, text="Could not finish.", lease_token=new)
        assert sent["state"] == "sent"
    assert [p.json["text"] for p in fake_slack.posts()] == ["Could not finish."]


async def test_a_token_on_an_unfenced_claim_is_a_conflict_and_none_is_needed(
    guarded: Any, services: Services, base_url: str, fake_slack: FakeProvider
) -> None:
    endpoint, token = await vend(services.db, families=["reply", "connections"])
    todo = await add_todo(services.db, endpoint, reply_to=slack_address().as_dict(), source="slack")
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok(
            "create_connection", kind="slack", name="slack", account_key="T0TEST", secret=SLACK_SECRET
        )
        await agent.ok("claim", todo_id=todo.id)
        stray = await agent.error("reply", todo_id=todo.id, text="hello", lease_token="sbl_not_a_real_token")
        assert stray["error"] == "conflict"
        assert fake_slack.posts() == []
        assert (await agent.ok("reply", todo_id=todo.id, text="hello"))["state"] == "sent"


async def test_the_reply_tool_declares_the_lease_token(services: Services, base_url: str) -> None:
    endpoint, token = await vend(services.db, families=["reply"])
    async with connect(base_url, token, endpoint) as agent:
        tools = {t.name: t for t in (await agent.client.list_tools()).tools}
    properties = tools["reply"].input_schema["properties"]
    assert properties["lease_token"]["type"] == "string"
    assert tools["reply"].input_schema["required"] == ["todo_id", "text"]
