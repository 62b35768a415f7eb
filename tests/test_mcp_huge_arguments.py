"""Review: a tool call with a huge list argument is refused at once, without stalling the server.

``create_connection`` takes ``targets`` and ``endpoints`` lists. Their schema had no bound, so the
argument check walked every item (and made an error object for each bad one) on the event loop: a
2 MB call of 500,000 numbers held the whole server, every other tenant's requests included, for
tens of seconds before answering ``invalid_argument``.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from switchboard import connections
from switchboard.db import Database
from switchboard.errors import SwitchboardError
from switchboard.mcp import tools
from switchboard.services import Services
from switchboard.tenancy import Owner
from switchboard.testing import add_todo, connect, vend

ITEMS = 500_000


@pytest.mark.parametrize("argument", ["targets", "endpoints"])
@pytest.mark.parametrize("item", [1, "a/*"])
async def test_a_huge_list_argument_is_refused_at_once_and_others_are_served(
    db: Database, base_url: str, argument: str, item: object
) -> None:
    agent_ep, agent_token = await vend(db, families=["connections"])
    other_ep, other_token = await vend(db)
    await add_todo(db, other_ep)
    arguments: dict[str, object] = {
        "kind": "github",
        "name": "bot",
        "account_key": "github.com",
        "secret": "s3cret",
    }
    arguments[argument] = [item] * ITEMS
    async with (
        connect(base_url, agent_token, agent_ep) as agent,
        connect(base_url, other_token, other_ep) as other,
    ):
        started = time.monotonic()
        hostile = asyncio.create_task(agent.error("create_connection", **arguments))
        # Another tenant's call, sent while the huge one is being checked.
        await asyncio.sleep(0.2)
        sent = time.monotonic()
        listed = await other.ok("list_todos")
        other_took = time.monotonic() - sent
        refused = await hostile
        took = time.monotonic() - started
    # Parsing a few MB of JSON takes a moment; walking it item by item took tens of seconds.
    assert other_took < 3.0, f"another tenant's call waited {other_took:.1f} s"
    assert took < 5.0, f"the refusal took {took:.1f} s"
    assert len(listed["todos"]) == 1
    assert refused["error"] == "invalid_argument", refused
    assert refused["message"] == f"{argument} violates maxItems {tools.LIST_ITEMS_MAX[argument]}"


def test_the_list_bounds_are_the_ones_the_connection_takes() -> None:
    schema = tools.TOOLS["create_connection"].input_schema["properties"]
    assert schema["targets"]["maxItems"] == connections.TARGETS_LIMIT
    assert schema["endpoints"]["maxItems"] == connections.ENDPOINTS_LIMIT
    message = tools.validation_message(
        "create_connection",
        {"kind": "k", "name": "n", "account_key": "a", "secret": "s", "targets": ["x"] * 101},
    )
    assert message == f"targets violates maxItems {connections.TARGETS_LIMIT}"


@pytest.mark.parametrize("argument", ["targets", "endpoints"])
async def test_an_empty_list_is_refused_not_read_as_every_target(
    db: Database, base_url: str, argument: str
) -> None:
    # An allowlist naming nothing was stored as no allowlist at all: a connection serving every
    # repository, channel or endpoint of the owner, the opposite of what the agent asked for.
    agent_ep, agent_token = await vend(db, families=["connections"])
    arguments: dict[str, object] = {
        "kind": "github",
        "name": "bot",
        "account_key": "github.com",
        "secret": "s3cret",
        argument: [],
    }
    async with connect(base_url, agent_token, agent_ep) as agent:
        refused = await agent.error("create_connection", **arguments)
        assert refused["error"] == "invalid_argument", refused
        assert refused["message"] == f"{argument} violates minItems 1"
        assert (await agent.ok("list_connections"))["connections"] == []


async def test_the_core_refuses_an_empty_allowlist_whatever_the_surface(services: Services) -> None:
    # Below every surface's schema: a caller of ``connections`` (a plugin's, the CLI's) gets the same.
    owner_ep, _ = await vend(services.db, families=["connections"])
    for field in ("targets", "endpoints"):
        with pytest.raises(SwitchboardError) as refused:
            await connections.create_connection(
                services,
                Owner.of(owner_ep),
                kind="github",
                name="bot",
                account_key="github.com",
                secret="s3cret",
                **{field: []},
            )
        assert refused.value.code == "invalid_argument" and "at least one" in refused.value.message
