"""The rules dry run and echo suppression (docs/routing.md, "Saving is safe"): a stored delivery
that is the agent's own reply coming back is a ``self_reply`` at ingest, which never runs the
rules on it. The dry run must say what ingest would do with it now, not route it through the rules
as if a person had written it: shown as work for the agent, and a rule that faults on it refused
a save that ingest would never have run into.

A real reply posted to the GitHub stand-in, the forge's webhook for it delivered back over HTTP,
then ``switchboard webhook rules test|set`` through the real click entry point.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fixtures.ingest_kit import fixture
from sqlalchemy import update

from switchboard import connections as conn
from switchboard import reply
from switchboard.cli import main
from switchboard.db import utcnow
from switchboard.models import Endpoint, Todo
from switchboard.tenancy import resolve_owner
from switchboard.testing import TEST_ENCRYPTION_KEY, FakeProvider, github_headers, make_webhook, post

# Faults on the agent's own comment only ("Looking into it now."), matches everything else.
FAULTS_ON_OWN_REPLY = {
    "rules": [
        {
            "id": "picky",
            "expr": 'if ((.payload.comment.body // "") | startswith("Looking")) then error("own reply") '
            "else true end",
            "action": {"type": "queue"},
        }
    ]
}


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    return fake_api_settings


async def _cli(database_url: str, *args: str, stdin: str) -> Result:
    env = {"SWITCHBOARD_DATABASE_URL": database_url, "SWITCHBOARD_SECRET_ENCRYPTION_KEY": TEST_ENCRYPTION_KEY}
    runner = CliRunner(env=env)
    return await asyncio.to_thread(runner.invoke, main, list(args), input=stdin, catch_exceptions=False)


async def _deliver(base_url: str, token: str, secret: str, event: str, payload: dict[str, Any]) -> dict:
    body = json.dumps(payload).encode()
    status, answer, _ = await post(
        base_url, token, body, github_headers(secret, body, event, str(uuid.uuid4()))
    )
    assert status == 202, answer
    return answer


async def test_the_dry_run_does_not_route_the_agents_own_reply(
    services: Any, server: Any, base_url: str, database_url: str, guarded: Any, fake_github: FakeProvider
) -> None:
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    ada = await resolve_owner(services.db, human="ada")
    await conn.create_connection(services, ada, kind="github", name="gh", account_key=None, secret="gh-cred")
    opened = await _deliver(base_url, token, secret, "issues", fixture("github/issues/opened.payload.json"))
    todo_id = opened["todos"][0]["id"]
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
    result = await reply.send_reply(services, endpoint, todo_id, "Looking into it now.")
    assert result["state"] == "sent"
    assert len(fake_github.posts()) == 1
    # The forge's webhook for our own comment: recognised by its id, a self_reply.
    payload = copy.deepcopy(fixture("github/issue_comment/created.payload.json"))
    payload["comment"]["id"], payload["comment"]["body"] = 1001, "Looking into it now."
    echo = await _deliver(base_url, token, secret, "issue_comment", payload)
    assert echo["disposition"] == "self_reply", echo

    tried = await _cli(
        database_url,
        "webhook",
        "rules",
        "test",
        webhook_id,
        "-",
        "--json",
        stdin=json.dumps(FAULTS_ON_OWN_REPLY),
    )
    assert tried.exit_code == 0, (tried.stdout, tried.stderr)
    dry = json.loads(tried.stdout)
    assert dry["error"] is None, dry["error"]
    rows = {row["event"]: row for row in dry["results"]}
    own = rows["issue_comment.created"]
    assert own["was"] == "self_reply" and own["disposition"] == "self_reply", own
    assert own["todos"] == [] and own["fault"] is None
    assert rows["issues.opened"]["disposition"] == "routed"

    saved = await _cli(
        database_url, "webhook", "rules", "set", webhook_id, "-", stdin=json.dumps(FAULTS_ON_OWN_REPLY)
    )
    assert saved.exit_code == 0, (saved.stdout, saved.stderr)
    assert "saved: webhook" in saved.stdout
