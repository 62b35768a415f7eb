"""A provider's ``Retry-After`` is the far side's text: an HTTP date whose zone offset, year or day
is a number past what a date can hold must read as "no usable wait", never turn a rate limit into
a plugin fault (a reply recorded ``unknown`` that was never posted, a test that "failed
unexpectedly")."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import select

from switchboard import connections as conn
from switchboard.models import Connection
from switchboard.tenancy import Owner
from switchboard.testing import FakeProvider, Scripted, add_todo, connect, forge_address, slack_address, vend

SECRET = "github-test-" + "Qm7Tz1Lx"
SLACK_SECRET = "xoxb-retry-test-" + "Pz4Ky8Rt"
COMMENTS = "/repos/acme/api/issues/7/comments"
HUGE_DATES = [
    "Mon, 01 Jan 2024 00:00:00 +99999999999999999999",  # a zone offset past a C int
    "Mon, 01 Jan 99999999999999999999 00:00:00 GMT",  # a year past a C long
    "Mon, 99999999999999999999 Jan 2024 00:00:00 GMT",  # a day past a C long
]


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    return fake_api_settings


@pytest.mark.parametrize("retry_after", HUGE_DATES)
async def test_a_429_with_an_overflowing_retry_after_date_is_rate_limited(
    guarded: Any,
    services: Any,
    base_url: str,
    fake_github: FakeProvider,
    retry_after: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint, token = await vend(services.db, families=["reply"])
    owner = Owner.of(endpoint)
    made = await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=SECRET
    )
    todo = await add_todo(
        services.db, endpoint, reply_to=forge_address("github", "github.com").as_dict(), source="github"
    )
    fake_github.script(
        "POST", COMMENTS, Scripted(429, {"message": "slow down"}, {"Retry-After": retry_after})
    )
    with caplog.at_level(logging.ERROR, logger="switchboard"):
        async with connect(base_url, token, endpoint) as agent:
            await agent.ok("claim", todo_id=todo.id)
            result = await agent.ok("reply", todo_id=todo.id, text="Looking into it.")
    # Refused by the provider, so nothing was posted: failed and rate-limited, not unknown.
    assert (result["state"], result["error_class"]) == ("failed", "rate_limited")
    assert len(fake_github.posts()) == 1
    async with services.db.read() as s:
        blocked = await s.scalar(select(Connection.blocked_until).where(Connection.id == made["id"]))
    assert blocked is not None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("retry_after", HUGE_DATES[:1])
async def test_a_slack_rate_limit_with_an_overflowing_retry_after_date_is_rate_limited(
    guarded: Any, services: Any, base_url: str, fake_slack: FakeProvider, retry_after: str
) -> None:
    endpoint, token = await vend(services.db, families=["reply"])
    await conn.create_connection(
        services, Owner.of(endpoint), kind="slack", name="s", account_key="T0TEST", secret=SLACK_SECRET
    )
    todo = await add_todo(services.db, endpoint, reply_to=slack_address().as_dict(), source="slack")
    fake_slack.script(
        "POST",
        "/api/chat.postMessage",
        Scripted(200, {"ok": False, "error": "ratelimited"}, {"Retry-After": retry_after}),
    )
    async with connect(base_url, token, endpoint) as agent:
        await agent.ok("claim", todo_id=todo.id)
        result = await agent.ok("reply", todo_id=todo.id, text="Looking into it.")
    assert (result["state"], result["error_class"]) == ("failed", "rate_limited")
    assert len(fake_slack.posts()) == 1


async def test_a_connection_test_answered_with_an_overflowing_retry_after_gets_the_verdict(
    guarded: Any, services: Any, fake_github: FakeProvider
) -> None:
    endpoint, _ = await vend(services.db, families=["reply"])
    owner = Owner.of(endpoint)
    made = await conn.create_connection(
        services, owner, kind="github", name="gh", account_key=None, secret=SECRET
    )
    fake_github.script("GET", "/user", Scripted(403, {"message": "slow"}, {"Retry-After": HUGE_DATES[0]}))
    verdict = await conn.test_connection(services, owner, made["id"])
    assert (verdict["ok"], verdict["error_class"]) == (False, "rate_limited")
    assert "HTTP 403" in verdict["detail"]
