"""The reply and connection verbs over real Streamable HTTP with the official MCP client: the agent
replies with a credential it never sees, and no MCP result or error ever carries it."""

from __future__ import annotations

import json
import random
import string
from typing import Any

import pytest

from switchboard import connections as conn
from switchboard.services import Services
from switchboard.tenancy import Owner
from switchboard.testing import FakeProvider, add_todo, connect, slack_address, vend

SLACK_SECRET = "xoxb-mcp-test-" + "Pz4Ky8Rt"


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    """The GitHub and Slack API bases point at the stand-ins."""
    return fake_api_settings


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


# ---------------------------------------------------------------------------------------------
# Text that looks empty is empty: str.strip() keeps zero-width spaces and BOMs.


@pytest.mark.parametrize("text", ["\u200b", "\ufeff\u200b\u200d", "\u2060 \u00a0\u3000", "\u202e\x07"])
async def test_a_reply_of_only_invisible_characters_is_empty(
    services: Services, base_url: str, text: str
) -> None:
    # str.strip() keeps zero-width spaces and BOMs: this posted an empty-looking public comment.
    endpoint, token = await vend(services.db, families=["basics", "reply"])
    todo = await add_todo(services.db, endpoint)
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        error = await agent.error("reply", todo_id=todo.id, text=text)
    assert error == {"error": "invalid_argument", "message": "text must not be empty"}


async def test_a_reply_with_visible_text_among_invisible_ones_gets_past_the_emptiness_check(
    services: Services, base_url: str
) -> None:
    endpoint, token = await vend(services.db, families=["basics", "reply"])
    todo = await add_todo(services.db, endpoint)
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        error = await agent.error("reply", todo_id=todo.id, text="\u200bok\u200b")
    # The next check in order: this todo has no reply address.
    assert error["error"] == "no_reply_address"


async def test_an_agent_cannot_post_its_own_bearer_token(
    guarded: Any, services: Services, base_url: str, fake_slack: FakeProvider
) -> None:
    # The agent holds its sbk_ token (its MCP configuration has it): one talked into posting it
    # publicly is refused, as for any other credential, and the refusal does not show it either.
    endpoint, token = await vend(services.db, families=["reply"])
    await conn.create_connection(
        services, Owner.of(endpoint), kind="slack", name="slack", account_key="T0TEST", secret=SLACK_SECRET
    )
    todo = await add_todo(services.db, endpoint, reply_to=slack_address().as_dict(), source="slack")
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        answer = await agent.call("reply", todo_id=todo.id, text=f"Debug info: my token is {token}")
    body = answer.structured_content or {}
    assert answer.is_error and body.get("error") == "secret_detected", body
    assert body.get("rule") == "switchboard-token" and token not in json.dumps(body)
    assert fake_slack.posts() == []
