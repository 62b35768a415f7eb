"""A todo whose payload is its delivery's body as it came keeps no copy: ``todos.payload`` is null
and every reader takes the event's raw body (migration 0012, ``SourceKind.payload_is_body``).

Checked where a user meets the payload: an agent's claim (the batch claim and the claim by id),
``get_todo``, the web page's raw download, a quarantined todo released; and where the copy is still
kept: a form-encoded body, a body stored as text, and a kind that does not declare its payload to be
the body. The migration goes down (the copies written back) and up again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import aiohttp
import pytest
from alembic import command
from fixtures.ingest_kit import fixture_bytes
from sqlalchemy import select

from switchboard import migrate, quarantine, tenancy, todos
from switchboard.db import Database
from switchboard.intake_config import Caller, trust_for_create
from switchboard.models import Endpoint, Event, Todo
from switchboard.sanitize import MAX_PAYLOAD_DEPTH
from switchboard.services import Services
from switchboard.testing import github_form, github_headers, make_webhook, post, todo_payload, ui_login
from switchboard.todos.operator import Actor


async def _stored(services: Services, todo_id: str) -> tuple[bytes | None, int, bytes]:
    """(the todo's own payload column, its payload size, its event's body) as stored."""
    async with services.db.read() as s:
        row = (
            await s.execute(
                select(Todo.payload, Todo.payload_size, Event.body)
                .join(Event, Event.id == Todo.event_id)
                .where(Todo.id == todo_id)
            )
        ).one()
    return row[0], row[1], row[2]


async def _deliver(services: Services, base_url: str, body: bytes, **headers: str) -> str:
    token, secret, _ = await make_webhook(services, "github")
    sent = github_headers(secret, body, "issues") | headers
    status, answer, _ = await post(base_url, token, body, sent)
    assert status == 202, answer
    [made] = answer["todos"]
    return str(made["id"])


async def _endpoint(services: Services) -> Endpoint:
    [endpoint] = [e for e in await tenancy.list_endpoints(services.db) if e.slug == "ada-agent"]
    return endpoint


async def test_a_signed_json_delivery_keeps_its_payload_only_on_the_event(
    services: Services, base_url: str
) -> None:
    body = fixture_bytes("github/issues/opened.payload.json")
    first = await _deliver(services, base_url, body)
    own, size, event_body = await _stored(services, first)
    assert own is None and event_body == body and size == len(body)
    # An agent's claim (the one-statement batch claim) and get_todo read the body's JSON.
    endpoint = await _endpoint(services)
    claimed = await todos.claim_next(services.db, endpoint)
    assert claimed is not None and claimed["id"] == first
    assert claimed["payload"] == json.loads(body) and claimed["payload_size"] == len(body)
    shown = await todos.get_todo(services.db, endpoint, first)
    assert shown["payload"] == json.loads(body)


async def test_every_reader_takes_the_event_body(services: Services, base_url: str) -> None:
    """The claim by id, a batch of claims, and the web page's raw download (the bytes themselves)."""
    _, human_token = await tenancy.add_human(services.db, "ada")
    bodies = [
        fixture_bytes(f"github/{name}.payload.json") for name in ("issues/opened", "pull_request/opened")
    ]
    made = [await _deliver(services, base_url, body) for body in bodies]
    for todo_id in made:
        assert (await _stored(services, todo_id))[0] is None
    endpoint = await _endpoint(services)
    by_id = await todos.claim(services.db, endpoint, made[1])
    assert by_id["payload"] == json.loads(bodies[1])
    batch = await todos.claim_next(services.db, endpoint, max=5)
    assert batch is not None and [t["id"] for t in batch["todos"]] == [made[0]]
    assert batch["todos"][0]["payload"] == json.loads(bodies[0])

    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await ui_login(http, base_url, human_token)
        async with http.get(f"{base_url}/ui/todos/{made[0]}/payload") as raw:
            assert raw.status == 200 and await raw.read() == bodies[0]
        async with http.get(f"{base_url}/ui/todos/{made[0]}") as page:
            text = await page.text()
            assert page.status == 200 and "Spelling error in the README file" in text


async def test_a_released_todo_keeps_the_payload_where_the_held_one_kept_it(
    services: Services, base_url: str
) -> None:
    body = fixture_bytes("github/issue_comment/created.payload.json")
    trust = trust_for_create(services.providers, "github", {"logins": ["nobody"]})
    token, secret, _ = await make_webhook(services, "github", trust=trust)
    status, answer, _ = await post(base_url, token, body, github_headers(secret, body, "issue_comment"))
    assert status == 202 and answer["disposition"] == "quarantined", answer
    async with services.db.read() as s:
        held = (await s.scalars(select(Todo).where(Todo.state == "held"))).one()
    assert held.payload is None
    owner = await tenancy.resolve_owner(services.db, human="ada")
    caller = Caller(Actor("human:test"), scopes=[owner])
    released = await quarantine.release(services, caller, held.id, queue="default")
    [new] = released["todos"]
    assert (await _stored(services, new["id"]))[0] is None
    assert await todo_payload(services, new["id"]) == json.loads(body)


@pytest.mark.parametrize(
    ("body", "form"),
    [
        # Form-encoded: the payload was read from a form field, not from the body.
        (fixture_bytes("github/issues/opened.payload.json"), True),
        # Nested past the limit: stored as text, not as it came.
        (('{"deep": ' + "[" * MAX_PAYLOAD_DEPTH + "1" + "]" * MAX_PAYLOAD_DEPTH + "}").encode(), False),
        # An integer past 64 bits: read by the standard library.
        (b'{"action": "opened", "n": 123456789012345678901234567890}', False),
    ],
    ids=["form", "too-deep", "big-integer"],
)
async def test_a_body_not_stored_as_it_came_keeps_its_own_copy(
    services: Services, base_url: str, body: bytes, form: bool
) -> None:
    sent = github_form(body) if form else body
    content_type = "application/x-www-form-urlencoded" if form else "application/json"
    todo_id = await _deliver(services, base_url, sent, **{"Content-Type": content_type})
    own, size, event_body = await _stored(services, todo_id)
    assert own is not None and event_body == sent and size == len(own)
    payload = await todo_payload(services, todo_id)
    if form:
        assert payload == json.loads(body)
    elif b"deep" in body:
        assert payload["kept_as_text"] and json.loads(payload["body"]) == json.loads(body)
    else:
        assert payload["n"] == 123456789012345678901234567890


async def test_a_kind_that_does_not_declare_its_payload_the_body_keeps_a_copy(
    services: Services, base_url: str
) -> None:
    kind = services.providers.sources["github"]
    services.providers.sources["github"] = dataclasses.replace(kind, payload_is_body=False)
    try:
        body = fixture_bytes("github/issues/opened.payload.json")
        todo_id = await _deliver(services, base_url, body)
    finally:
        services.providers.sources["github"] = kind
    own, _, _ = await _stored(services, todo_id)
    assert own is not None and json.loads(own) == json.loads(body) and own != body


def _to(database_url: str, revision: str, *, down: bool) -> None:
    config = migrate.alembic_config(database_url)
    (command.downgrade if down else command.upgrade)(config, revision)


async def test_the_migration_writes_the_copies_back_going_down(
    services: Services, base_url: str, database_url: str
) -> None:
    body = fixture_bytes("github/issues/opened.payload.json")
    todo_id = await _deliver(services, base_url, body)
    assert (await _stored(services, todo_id))[0] is None
    await services.db.dispose()
    await asyncio.to_thread(_to, database_url, "0011", down=True)
    database = Database(database_url)
    try:
        async with database.read() as s:
            own = await s.scalar(select(Todo.payload).where(Todo.id == todo_id))
        assert own == body
    finally:
        await database.dispose()
    await asyncio.to_thread(_to, database_url, "head", down=False)
