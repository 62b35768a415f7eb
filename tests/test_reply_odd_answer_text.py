"""A provider's answer to a post is the far side's text: a comment id or permalink holding a NUL
(which PostgreSQL text cannot store) or a lone surrogate (a JSON ``\\ud800`` escape, which neither
engine can encode) must not fail the recording of a post that was made. The reply is ``sent``,
the unusable value is dropped, and the row does not stay ``pending`` for the sweeper to call
``unknown``."""

from __future__ import annotations

from typing import Any

import pytest

from switchboard import connections as conn
from switchboard.tenancy import Owner
from switchboard.testing import FakeProvider, Scripted, add_todo, connect, forge_address, vend

SECRET = "github-test-" + "Qm7Tz1Lx"
COMMENTS = "/repos/acme/api/issues/7/comments"
ODD = {
    "nul": "https://github.com/acme/api/issues/7#issuecomment-1\u0000",
    "surrogate": "https://github.com/acme/api/issues/7#issuecomment-\ud800",
    "newline": "https://github.com/acme/api/issues/7\r\n#issuecomment-1",
}


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    return fake_api_settings


@pytest.mark.parametrize("shape", sorted(ODD))
async def test_a_permalink_the_database_cannot_hold_still_records_the_post_as_sent(
    guarded: Any, services: Any, base_url: str, fake_github: FakeProvider, shape: str
) -> None:
    endpoint, token = await vend(services.db, families=["reply"])
    await conn.create_connection(
        services, Owner.of(endpoint), kind="github", name="gh", account_key=None, secret=SECRET
    )
    todo = await add_todo(
        services.db, endpoint, reply_to=forge_address("github", "github.com").as_dict(), source="github"
    )
    fake_github.script("POST", COMMENTS, Scripted(201, {"id": 4242, "html_url": ODD[shape]}))
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        result = await agent.ok("reply", todo_id=todo.id, text="Fixed in main.")
        detail = await agent.ok("get_todo", todo_id=todo.id)
    assert result["state"] == "sent" and "permalink" not in result
    assert len(fake_github.posts()) == 1
    [row] = detail["replies"]
    assert (row["state"], row["permalink"]) == ("sent", None)
