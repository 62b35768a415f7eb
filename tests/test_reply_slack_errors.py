"""Slack's ``internal_error`` and ``fatal_error`` say "it's possible some aspect of the operation
succeeded before the error was raised" (the Web API's error list): the message may be in the
thread, so the reply is ``unknown`` (check before posting again), never ``failed`` (nothing was
posted); errors that refuse the call before it runs stay ``failed``."""

from __future__ import annotations

from typing import Any

import pytest

from switchboard import connections as conn
from switchboard import reply
from switchboard.testing import FakeProvider, Scripted, claimed_todo, human_and_endpoint, slack_address


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    return fake_api_settings


@pytest.mark.parametrize(
    ("error", "state"),
    [
        ("internal_error", "unknown"),
        ("fatal_error", "unknown"),
        ("service_unavailable", "failed"),
        ("request_timeout", "failed"),
    ],
)
async def test_a_slack_error_that_may_have_posted_is_unknown(
    services: Any, db: Any, guarded: Any, fake_slack: FakeProvider, error: str, state: str
) -> None:
    owner, endpoint = await human_and_endpoint(db)
    await conn.create_connection(
        services, owner, kind="slack", name="slack", account_key="T0TEST", secret="slack-test-" + "Yk3Rw9"
    )
    fake_slack.script("POST", "/api/chat.postMessage", Scripted(200, {"ok": False, "error": error}))
    todo = await claimed_todo(db, endpoint, slack_address())
    result = await reply.send_reply(services, endpoint, todo.id, "Deployed.")
    assert (result["state"], result["error_class"]) == (state, "server")
    assert len(fake_slack.posts()) == 1
    # Not retried, and recorded as the caller was told.
    [row] = await reply.replies_of(services, todo.id)
    assert (row["state"], row["error_code"]) == (state, error)
