"""A provider's rate-limit answer with a far-off reset (GitHub's ``x-ratelimit-reset`` given in
milliseconds by a proxy, say) is still a ``rate_limited`` failure that blocks the connection: never
an internal error that leaves the reply ``pending``."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from switchboard import connections as conn
from switchboard import reply
from switchboard.models import Connection, Reply
from switchboard.testing import FakeProvider, Scripted, claimed_todo, forge_address, human_and_endpoint


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    return fake_api_settings


@pytest.mark.parametrize("reset", ["1733400000000", "9" * 30])
async def test_a_far_off_rate_limit_reset_is_a_rate_limited_failure(
    services: Any, db: Any, guarded: Any, fake_github: FakeProvider, reset: str
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    connection = await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret="github-test-" + "Qm7Tz1"
    )
    fake_github.script(
        "POST",
        "/repos/acme/api/issues/7/comments",
        Scripted(
            403,
            {"message": "API rate limit exceeded"},
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset},
        ),
    )
    todo = await claimed_todo(db, endpoint, forge_address("github", "github.com"))
    result = await reply.send_reply(services, endpoint, todo.id, "hi")
    assert (result["state"], result["error_class"]) == ("failed", "rate_limited")
    assert len(fake_github.posts()) == 1
    async with db.read() as s:
        [row] = (await s.scalars(select(Reply))).all()
        blocked = await s.scalar(select(Connection.blocked_until).where(Connection.id == connection["id"]))
    assert row.state == "failed"
    assert blocked is not None
