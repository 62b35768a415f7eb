"""Echo suppression end to end: our own posted reply, delivered back by the provider as a signed
webhook, mints no todo, whether it arrives before our POST returned (marker) or after (object id,
Slack bot id); a human's message in the same thread still becomes work."""

from __future__ import annotations

import copy
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from fixtures.ingest_kit import fixture
from sqlalchemy import update

from switchboard import connections as conn
from switchboard import reply
from switchboard.db import utcnow
from switchboard.models import Endpoint, Todo
from switchboard.tenancy import Owner, resolve_owner
from switchboard.testing import (
    PROVIDER_SECRETS,
    FakeProvider,
    Recorded,
    Scripted,
    github_headers,
    make_webhook,
    post,
    slack_headers,
)


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    """The GitHub and Slack API bases point at the stand-ins."""
    return fake_api_settings


async def claim_directly(services: Any, todo_id: str) -> Endpoint:
    """Put the todo in the claimed state (the lifecycle verbs are tested elsewhere)."""
    async with services.db.write() as s:
        await s.execute(
            update(Todo)
            .where(Todo.id == todo_id)
            .values(state="claimed", attempt=1, lease_expires_at=utcnow() + timedelta(minutes=5))
        )
        todo = await s.get(Todo, todo_id)
        assert todo is not None
        endpoint = await s.get(Endpoint, todo.endpoint_id)
    assert endpoint is not None
    return endpoint


async def deliver_github(base_url: str, token: str, secret: str, event: str, payload: dict[str, Any]) -> dict:
    body = json.dumps(payload).encode()
    status, answer, _ = await post(
        base_url, token, body, github_headers(secret, body, event, str(uuid.uuid4()))
    )
    assert status == 202, answer
    return answer


def comment_payload(body: str, comment_id: int) -> dict[str, Any]:
    payload = copy.deepcopy(fixture("github/issue_comment/created.payload.json"))
    payload["comment"]["id"] = comment_id
    payload["comment"]["body"] = body
    return payload


async def test_github_comment_echoed_before_and_after_the_post_returned_mints_no_todo(
    services: Any, server: Any, base_url: str, guarded: Any, fake_github: FakeProvider
) -> None:
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    ada = await resolve_owner(services.db, human="ada")
    await conn.create_connection(
        services, ada, kind="github", name="gh", account_key=None, secret="gh-cred-1"
    )
    opened = await deliver_github(
        base_url, token, secret, "issues", fixture("github/issues/opened.payload.json")
    )
    assert opened["created"] == 1
    todo_id = opened["todos"][0]["id"]
    endpoint = await claim_directly(services, todo_id)

    # The forge fires its webhook for our comment while our POST is still waiting for an answer:
    # only the marker can tell, because the comment id is not recorded yet.
    early: list[dict[str, Any]] = []

    async def fire_webhook(rec: Recorded, answer: dict[str, Any]) -> None:
        payload = comment_payload(answer["body"], answer["id"])
        early.append(await deliver_github(base_url, token, secret, "issue_comment", payload))

    fake_github.on_post = fire_webhook
    result = await reply.send_reply(services, endpoint, todo_id, "Looking into it now.")
    assert result["state"] == "sent"
    [echo] = early
    assert (echo["created"], echo["disposition"]) == (0, "self_reply")

    # The same comment delivered again later (say after an edit stripped the marker): its id matches.
    fake_github.on_post = None
    [posted] = fake_github.posts()
    comment_id = 1001
    later = await deliver_github(
        base_url, token, secret, "issue_comment", comment_payload("Looking into it now.", comment_id)
    )
    assert (later["created"], later["disposition"]) == (0, "self_reply")
    assert posted.json["body"].startswith("Looking into it now.")

    # A human answering in the same thread is work.
    human = await deliver_github(
        base_url, token, secret, "issue_comment", comment_payload("Thanks! Any update?", 987654)
    )
    assert (human["created"], human["disposition"]) == (1, "routed")
    assert services.metrics.value("switchboard_echo_drops_total", source="github") == 2


async def test_a_marker_naming_another_scopes_reply_is_not_an_echo(
    services: Any, server: Any, base_url: str, guarded: Any, fake_github: FakeProvider
) -> None:
    """A human can paste a marker into a comment; it only counts for a reply of the same scope."""
    token, secret, _ = await make_webhook(services, "github")
    assert secret is not None
    other_token, other_secret, _ = await make_webhook(services, "github", owner="bob", endpoint="bob-agent")
    assert other_secret is not None
    bob = await resolve_owner(services.db, human="bob")
    await conn.create_connection(
        services, bob, kind="github", name="gh", account_key=None, secret="gh-cred-2"
    )
    opened = await deliver_github(
        base_url, other_token, other_secret, "issues", fixture("github/issues/opened.payload.json")
    )
    endpoint = await claim_directly(services, opened["todos"][0]["id"])
    result = await reply.send_reply(services, endpoint, opened["todos"][0]["id"], "Bob's agent here.")
    # Ada's webhook receives a comment carrying Bob's marker: not Ada's reply, so it is work.
    body = fake_github.posts()[0].json["body"]
    assert result["reply_id"] in body
    answer = await deliver_github(base_url, token, secret, "issue_comment", comment_payload(body, 555))
    assert (answer["created"], answer["disposition"]) == (1, "routed")


async def deliver_slack(base_url: str, token: str, payload: dict[str, Any]) -> dict:
    body = json.dumps(payload).encode()
    status, answer, _ = await post(base_url, token, body, slack_headers(PROVIDER_SECRETS["slack"], body))
    assert status == 202, answer
    return answer


async def test_slack_reply_echoed_by_bot_or_by_message_id_mints_no_todo(
    services: Any, server: Any, base_url: str, guarded: Any, fake_slack: FakeProvider
) -> None:
    token, _, _ = await make_webhook(services, "slack")
    ada: Owner = await resolve_owner(services.db, human="ada")
    fake_slack.script(
        "POST",
        "/api/auth.test",
        Scripted(200, {"ok": True, "team_id": "T0123ABCD", "user_id": "U0BOT1234", "bot_id": "B0SWITCH1"}),
    )
    made = await conn.create_connection(
        services, ada, kind="slack", name="slack", account_key="T0123ABCD", secret="xoxb-test-cred"
    )
    assert (await conn.test_connection(services, ada, made["id"]))["ok"] is True

    opened = await deliver_slack(base_url, token, fixture("slack/message.json"))
    assert opened["created"] == 1
    todo_id = opened["todos"][0]["id"]
    endpoint = await claim_directly(services, todo_id)
    result = await reply.send_reply(services, endpoint, todo_id, "Looking into it now.")
    assert result["state"] == "sent"
    [sent] = fake_slack.posts()[-1:]
    assert sent.json["channel"] == "C0456EFGH" and sent.json["thread_ts"] == "1726990000.000100"

    # Our bot's message comes back (by bot id: the marker in the fixture names no real reply).
    by_bot = await deliver_slack(base_url, token, fixture("slack/bot_reply.json"))
    assert (by_bot["created"], by_bot["disposition"]) == (0, "self_reply")

    # Posted with a user token there is no bot id; the message id (channel:ts) still matches.
    echo = copy.deepcopy(fixture("slack/thread_reply.json"))
    echo["event_id"] = "Ev0ECHO0001"
    echo["event"].update(ts="1726990001.000100", text="Looking into it now.", user="U0BOT1234")
    by_id = await deliver_slack(base_url, token, echo)
    assert (by_id["created"], by_id["disposition"]) == (0, "self_reply")

    # A human's reply in the same thread routes normally.
    human = await deliver_slack(base_url, token, fixture("slack/thread_reply.json"))
    assert (human["created"], human["disposition"]) == (1, "routed")
