"""Cairn's wire format end to end over real HTTP: the artifact.created body as Cairn sends it
(``data/``), signed and posted to the running app, becomes a todo with a reply address; an agent
on the MCP SDK client adds the owner's connection, claims and replies; the stand-in Cairn records the
comment; the comment coming back as a comment event mints nothing, a person's comment does. Runs on
the test database's engine (SQLite, or PostgreSQL with ``SWITCHBOARD_TEST_DATABASE_URL``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from switchboard.sdk import HttpClient
from switchboard.testing import (
    FakeProvider,
    Services,
    cairn_headers,
    connect,
    human_and_endpoint,
    make_webhook,
    now_rfc3339,
    post,
    todo,
    vend,
)

WIRE = json.loads((Path(__file__).parent / "data" / "artifact.created.json").read_text())


def artifact_created(base_url: str) -> bytes:
    """The fixture as Cairn would send it now, about an artifact on the stand-in Cairn."""
    payload = copy.deepcopy(WIRE)
    payload["created_at"] = now_rfc3339()
    payload["data"]["url"] = f"{base_url}/a/{payload['data']['id']}"
    return json.dumps(payload).encode()


def comment_created(base_url: str, comment_id: str, body: str) -> bytes:
    artifact = WIRE["data"]
    return json.dumps(
        {
            "source": "cairn",
            "kind": "comment.created",
            "event_id": f"evt_{comment_id}",
            "created_at": now_rfc3339(),
            "data": {
                "id": comment_id,
                "body": body,
                "artifact": {"id": artifact["id"], "url": f"{base_url}/a/{artifact['id']}"},
            },
        }
    ).encode()


async def test_cairns_wire_format_end_to_end(
    services: Services, base_url: str, guarded: HttpClient, fake_cairn: FakeProvider
) -> None:
    owner, _ = await human_and_endpoint(services.db, "ada")
    endpoint, token = await vend(services.db, families=["reply", "connections"], owner=owner)
    ingest, secret, _ = await make_webhook(services, "cairn", owner="ada", endpoint=endpoint.slug)
    assert secret is not None

    body = artifact_created(fake_cairn.base_url)
    status, answer, _ = await post(base_url, ingest, body, cairn_headers(secret, body, WIRE["event_id"]))
    assert status == 202 and answer["created"] == 1, answer
    stored = await todo(services, answer["todos"][0]["id"])
    assert (stored.source, stored.kind) == ("cairn", "artifact.created")
    assert stored.title == "cairn artifact.created — Q3 audit notes (markdown)"
    instance = fake_cairn.host
    assert stored.reply_to is not None and stored.reply_to["display"] == f"cairn {instance} artifact a1b2c3"

    async with connect(base_url, token, endpoint) as agent:
        await agent.ok(
            "create_connection",
            kind="cairn",
            name="ada-cairn",
            account_key=fake_cairn.base_url,
            secret="cairn-tok-1",
        )
        claimed = await agent.ok("claim_next")
        assert claimed["todo"]["id"] == stored.id
        reply: dict[str, Any] = await agent.ok(
            "reply", todo_id=stored.id, text="Audit notes read; two questions."
        )
        assert reply["state"] == "sent", reply

    [sent] = fake_cairn.posts()
    assert (sent.path, sent.auth) == ("/v1/artifacts/a1b2c3/comments", "Bearer cairn-tok-1")
    comment_id = "cm_1001"

    # Cairn's event for our own comment: stored as our reply, no todo.
    echo = comment_created(fake_cairn.base_url, comment_id, sent.json["body"])
    status, dropped, _ = await post(base_url, ingest, echo, cairn_headers(secret, echo))
    assert status == 202 and dropped["disposition"] == "self_reply" and dropped["created"] == 0, dropped
    # A person's comment on the artifact is work.
    person = comment_created(fake_cairn.base_url, "cm_2002", "What about Q4?")
    status, routed, _ = await post(base_url, ingest, person, cairn_headers(secret, person))
    assert status == 202 and routed["created"] == 1
