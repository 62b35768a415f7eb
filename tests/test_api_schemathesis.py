"""The operator API keeps its contract: schemathesis (PyPI) generates requests from
``/api/v1/openapi.json`` and sends them to a live server (the ``server``/``base_url`` fixtures, on
whichever engine the suite runs: SQLite, or PostgreSQL with SWITCHBOARD_TEST_DATABASE_URL).

Every response must be documented (status, content type, headers) and validate against its schema,
and none may be a 5xx. The document's object schemas are closed (``additionalProperties: false``),
so a field the server returns but the document does not name fails here. The world is seeded so
that each route's path names something real (its own victim for the destructive ones), and the
run is bounded (a few examples per operation) to stay near two minutes per engine.

Left out: rotating and revoking the caller's own token (they end the run's authentication; the
human lifecycle tests cover them).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from switchboard import quarantine, tenancy, todos
from switchboard.db import utcnow
from switchboard.ids import new_id, token_hash
from switchboard.intake_config import Caller
from switchboard.models import Reply, WebSession
from switchboard.outbound import Outbound
from switchboard.services import Services
from switchboard.testing import FakeProvider, claimed_todo, forge_address, github_headers, post

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "unsupported_method",
    "ignored_auth",
    "negative_data_rejection",
)
EXAMPLES = int(os.environ.get("SWITCHBOARD_SCHEMATHESIS_EXAMPLES", "25"))
RUN_SECONDS = 900


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    # A connection test dials the GitHub API: here, the stand-in on 127.0.0.1, never the internet.
    return fake_api_settings


async def seed(services: Services, base_url: str) -> dict[str, str]:
    """Ada's world: endpoints, webhooks with a route, connections, teams, todos in several states
    with an attempt and a reply, held todos (signed deliveries from an actor the webhook does not
    trust), and a second web session. Returns the ids the routes need."""
    db = services.db
    _, token = await tenancy.add_human(db, "ada")
    await tenancy.add_human(db, "bob")
    ada = await tenancy.resolve_owner(db, human="ada")
    bot, _ = await tenancy.vend_endpoint(db, name="bot", owner=ada, families=["reply", "connections"])
    await tenancy.vend_endpoint(db, name="helper", owner=ada)
    await tenancy.vend_endpoint(db, name="doomed", owner=ada)
    main = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="bot", source="github", name="acme/api"
    )
    route = await tenancy.add_route(db, main.webhook.id, "helper")
    secret = await tenancy.rotate_webhook_secret(db, services.vault, services.providers, main.webhook.id)
    # Created without trusted actors: it trusts nobody, so each delivery is held in quarantine.
    for n in range(2):
        body = json.dumps({"action": "opened", "sender": {"login": "stranger"}, "n": n}).encode()
        status, answer, _ = await post(
            base_url, main.ingest_token, body, github_headers(secret, body, "issues", f"d-{n}")
        )
        assert status == 202 and answer["disposition"] == "quarantined", answer
    held = [row["id"] for row in (await quarantine.list_held(db, Caller.cli())).rows]
    assert len(held) == 2
    doomed = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="bot", source="generic"
    )
    slack = await tenancy.create_webhook(
        db, services.vault, services.providers, endpoint_slug="bot", source="slack"
    )
    await tenancy.add_team(db, "platform", "ada")
    await tenancy.set_member(db, "platform", "bob", "member")
    await tenancy.add_team(db, "doomed-team", "ada")

    from switchboard import connections

    made = await connections.create_connection(
        services, ada, kind="github", name="gh", account_key=None, secret="ghp_" + "a1" * 20
    )
    gone = await connections.create_connection(
        services, ada, kind="github", name="gh-old", account_key="ghes.example.com", secret="ghp_" + "b2" * 20
    )
    await connections.test_connection(services, ada, made["id"])

    pending = await todos.push(db, endpoint_slug="bot", title="a pending todo", payload={"n": 1})
    claimed = await claimed_todo(db, bot, forge_address("github", "github.com"), state="pending")
    await todos.claim(db, bot, claimed.id)  # a real claim: the detail lists its attempt
    failed = await claimed_todo(
        db, bot, None, state="failed", dead_letter=True, dead_reason="attempts_exhausted"
    )
    now = utcnow()
    async with db.write() as s:
        s.add(
            Reply(
                id=new_id("rp"),
                todo_id=claimed.id,
                endpoint_id=bot.id,
                idempotency_key="k1",
                state="sent",
                connection_id=made["id"],
                connection_name="gh",
                connection_fingerprint=made["fingerprint"],
                owner_scope=ada.id,
                address_kind="forge_comment",
                provider="github",
                display="github.com/acme/api#7",
                thread_key="github.com/acme/api#7",
                text_hash="0" * 64,
                provider_object_id="123",
                permalink="https://github.com/acme/api/issues/7#issuecomment-123",
                created_at=now,
                updated_at=now,
            )
        )
        human = await tenancy.human_by_token(db, token)
        assert human is not None
        ref = new_id("ws")
        s.add(
            WebSession(
                id_hash=token_hash(new_id("sbw")),
                ref=ref,
                human_id=human.id,
                csrf_token="x",
                created_at=now,
                expires_at=now.replace(year=now.year + 1),
                last_seen_at=now,
                user_agent="a browser",
            )
        )
    return {
        "token": token,
        "webhook": main.webhook.id,
        "doomed_webhook": doomed.webhook.id,
        "slack_webhook": slack.webhook.id,
        "route": route.id,
        "connection": made["id"],
        "doomed_connection": gone["id"],
        "pending": pending.id,
        "claimed": claimed.id,
        "failed": failed.id,
        "session": ref,
        "held": held[0],
        "held_too": held[1],
    }


def config(ids: dict[str, str]) -> str:
    """Each operation's path parameters pinned to something real (schemathesis.toml)."""
    pinned = {
        "getEndpoint": {"slug": "bot"},
        "revokeEndpoint": {"slug": "doomed"},
        "getWebhook": {"id": ids["webhook"]},
        "getWebhookTrust": {"id": ids["webhook"]},
        "setWebhookTrust": {"id": ids["webhook"]},
        "getWebhookRules": {"id": ids["webhook"]},
        "setWebhookRules": {"id": ids["webhook"]},
        "testWebhookRules": {"id": ids["webhook"]},
        "releaseHeldTodo": {"id": ids["held"]},
        "discardHeldTodo": {"id": ids["held_too"]},
        "updateWebhook": {"id": ids["webhook"]},
        "rotateWebhookSecret": {"id": ids["webhook"]},
        "expirePreviousWebhookSecret": {"id": ids["webhook"]},
        "addWebhookRoute": {"id": ids["webhook"]},
        "removeWebhookRoute": {"id": ids["webhook"], "endpoint": "helper"},
        "deleteWebhook": {"id": ids["doomed_webhook"]},
        "setWebhookSecret": {"id": ids["slack_webhook"]},
        "removeRoute": {"id": ids["route"]},
        "getConnection": {"id": ids["connection"]},
        "updateConnection": {"id": ids["connection"]},
        "rotateConnection": {"id": ids["connection"]},
        "testConnection": {"id": ids["connection"]},
        "deleteConnection": {"id": ids["doomed_connection"]},
        "getTeam": {"slug": "platform"},
        "putTeamMember": {"slug": "platform", "handle": "bob"},
        "deleteTeamMember": {"slug": "platform", "handle": "bob"},
        "deleteTeam": {"slug": "doomed-team"},
        "getTodo": {"id": ids["claimed"]},
        "requeueTodo": {"id": ids["failed"]},
        "releaseTodo": {"id": ids["claimed"]},
        "cancelTodo": {"id": ids["pending"]},
        "endMySession": {"id": ids["session"]},
    }
    blocks = []
    for operation_id, params in pinned.items():
        values = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in params.items())
        blocks.append(
            f'[[operations]]\ninclude-operation-id = "{operation_id}"\nparameters = {{ {values} }}\n'
        )
    return "\n".join(blocks)


async def test_every_response_matches_the_openapi_document(
    server: TestServer,
    base_url: str,
    services: Services,
    guarded: Outbound,
    fake_github: FakeProvider,
    tmp_path: Path,
) -> None:
    ids = await seed(services, base_url)
    (tmp_path / "schemathesis.toml").write_text(config(ids))
    # The document the server serves is the one tested.
    async with aiohttp.ClientSession() as http, http.get(f"{base_url}/api/v1/openapi.json") as resp:
        assert resp.status == 200
        document = await resp.json()
    assert document["openapi"] == "3.1.0"

    command = [
        str(SCHEMATHESIS),
        "--no-color",
        "--config-file",
        str(tmp_path / "schemathesis.toml"),
        "run",
        f"{base_url}/api/v1/openapi.json",
        "--header",
        f"Authorization: Bearer {ids['token']}",
        "--checks",
        ",".join(CHECKS),
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(EXAMPLES),
        "--workers",
        "1",
        "--seed",
        "20261201",
        "--exclude-operation-id",
        "rotateMyToken",
        "--exclude-operation-id",
        "revokeMyToken",
        "--suppress-health-check",
        "all",
    ]
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_HOOKS": ""},
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), RUN_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    text = output.decode(errors="replace")
    assert process.returncode == 0, text[-12000:]
    assert "Selected: 46/48" in text or "Tested:" in text, text[-4000:]
    assert ids["token"] not in text
