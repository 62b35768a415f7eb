# ruff: noqa: F811  (pytest fixtures imported from tests.fakes are parameters here)
"""The reply and connection verbs over real Streamable HTTP with the official MCP client: the agent
replies with a credential it never sees, and no MCP result or error ever carries it."""

from __future__ import annotations

import json
import random
import string
from typing import Any

from tests.fakes import (  # noqa: F401 (fixtures)
    FakeProvider,
    fake_github,
    fake_slack,
    guarded,
    settings_overrides,
    slack_address,
)
from tests.mcp_client import add_todo, connect, vend

SLACK_SECRET = "xoxb-mcp-test-" + "Pz4Ky8Rt"


async def test_an_agent_manages_its_connection_and_replies_without_seeing_the_secret(
    guarded: Any, services: Any, base_url: str, fake_slack: FakeProvider
) -> None:
    endpoint, token = await vend(services.db, families=["reply", "connections"])
    todo = await add_todo(services.db, endpoint, reply_to=slack_address().as_dict(), source="slack")
    seen: list[Any] = []
    async with connect(base_url, token, endpoint) as agent:
        made = await agent.ok(
            "create_connection", kind="slack", name="slack", account_key="t0test", secret=SLACK_SECRET
        )
        seen.append(made)
        assert made["account_key"] == "T0TEST" and made["fingerprint"].startswith("fp_")
        seen.append(await agent.ok("list_connections"))

        refused = await agent.error("reply", todo_id=todo.id, text="before claiming")
        assert refused["error"] == "not_claimed"
        seen.append(await agent.ok("claim", todo_id=todo.id))

        sent = await agent.ok("reply", todo_id=todo.id, text="On it.", idempotency_key="progress-1")
        assert sent["state"] == "sent" and sent["duplicate"] is False and sent["permalink"]
        assert sent["display"] == slack_address().display
        again = await agent.ok("reply", todo_id=todo.id, text="On it.", idempotency_key="progress-1")
        assert again == {**sent, "duplicate": True}

        rng = random.Random(3)
        leaked = "gh" + "p_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))
        blocked = await agent.error("reply", todo_id=todo.id, text=f"token: {leaked}")
        assert blocked["error"] == "secret_detected" and blocked.get("rule") == "github-pat"
        assert leaked not in json.dumps(blocked)

        seen.append(await agent.ok("complete", todo_id=todo.id, summary="done"))
        # Within the grace window after completing it, the outcome can still be posted.
        done = await agent.ok("reply", todo_id=todo.id, text="Done: deployed.")
        assert done["state"] == "sent"

        detail = await agent.ok("get_todo", todo_id=todo.id)
        seen.append(detail)
        assert [r["state"] for r in detail["replies"]] == ["sent", "sent"]
        assert detail["replies"][0]["permalink"] == sent["permalink"]

        rotated = await agent.ok("rotate_connection", connection_id=made["id"], secret=SLACK_SECRET + "2")
        seen.append(rotated)
        assert rotated["fingerprint"] != made["fingerprint"]
        seen.append(await agent.ok("delete_connection", connection_id=made["id"]))
        seen.extend([sent, again, blocked, done])
    assert [p.auth for p in fake_slack.posts()] == [f"Bearer {SLACK_SECRET}"] * 2
    for secret in (SLACK_SECRET, SLACK_SECRET + "2"):
        assert secret not in json.dumps(seen, default=str)


async def test_another_owners_connection_is_invisible_and_unusable(
    guarded: Any, services: Any, base_url: str, fake_slack: FakeProvider
) -> None:
    alice_ep, alice_token = await vend(services.db, families=["reply", "connections"])
    bob_ep, bob_token = await vend(services.db, families=["reply", "connections"])
    async with connect(base_url, alice_token, alice_ep) as alice:
        made = await alice.ok(
            "create_connection", kind="slack", name="slack", account_key="T0TEST", secret=SLACK_SECRET
        )
    todo = await add_todo(services.db, bob_ep, reply_to=slack_address().as_dict(), source="slack")
    async with connect(base_url, bob_token, bob_ep) as bob:
        assert (await bob.ok("list_connections"))["connections"] == []
        err = await bob.error("delete_connection", connection_id=made["id"])
        assert err["error"] == "not_found"
        await bob.ok("claim", todo_id=todo.id)
        err = await bob.error("reply", todo_id=todo.id, text="hello")
        assert err["error"] == "no_connection"
    assert fake_slack.requests == []
