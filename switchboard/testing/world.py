"""Set up the world a test needs through the same functions the CLI and API call: a human, an
endpoint (with its token), a webhook (with its signing secret), a todo in a given state with a reply
address; deliver a signed body over HTTP; read back what was stored.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
from typing import Any

import aiohttp
from sqlalchemy import func, select

from switchboard import tenancy
from switchboard.db import Database, utcnow
from switchboard.models import Endpoint, Event, Todo
from switchboard.owners import Owner, add_human, list_humans, resolve_owner
from switchboard.plugins import Providers
from switchboard.provider import Address
from switchboard.services import Services
from switchboard.todos import new_todo_row, payload_of, stored_payload

_handles = itertools.count(1)

# Signing secrets for kinds whose provider issues the secret (the owner pastes it into Switchboard):
# make_webhook sets these unless the test passes its own.
PROVIDER_SECRETS = {"slack": "8f742231b10e8888abcd99yyyzzz85a5", "stripe": "whsec_stripe_test_secret_abc123"}
# For a provider-secret kind not listed above.
DEFAULT_PROVIDER_SECRET = "provider_issued_test_secret_0123456789"


# ---------------------------------------------------------------------------------------------
# Owners and endpoints


async def vend(
    db: Database,
    *,
    queues: list[str] | None = None,
    families: list[str] | None = None,
    default_lease_seconds: int = 300,
    owner: Owner | None = None,
) -> tuple[Endpoint, str]:
    """A fresh endpoint and its ``sbk_`` token; owned by a fresh human unless ``owner`` is given."""
    if owner is None:
        human, _ = await add_human(db, f"human-{next(_handles)}")
        owner = Owner(human_id=human.id)
    return await tenancy.vend_endpoint(
        db,
        name=f"agent {next(_handles)}",
        owner=owner,
        queues=queues or ["default"],
        families=families or [],
        default_lease_seconds=default_lease_seconds,
    )


async def human_and_endpoint(db: Database, handle: str = "alice") -> tuple[Owner, Endpoint]:
    """A human ``handle`` and an endpoint ``<handle>-agent`` of theirs allowed to reply."""
    human, _ = await add_human(db, handle)
    owner = Owner(human_id=human.id)
    endpoint, _ = await tenancy.vend_endpoint(db, name=f"{handle}-agent", owner=owner, families=["reply"])
    return owner, endpoint


# ---------------------------------------------------------------------------------------------
# Todos


async def add_todo(
    db: Database,
    endpoint: Endpoint,
    *,
    title: str = "work",
    queue: str | None = None,
    payload: Any = None,
    reply_to: dict[str, Any] | None = None,
    source: str = "manual",
    kind: str = "manual",
) -> Todo:
    """A pending todo (as ingest would mint one), committed; the caller rings via todos_created."""
    todo = new_todo_row(
        endpoint_id=endpoint.id,
        queue=queue or endpoint.queues[0],
        source=source,
        kind=kind,
        title=title,
        payload=payload if payload is not None else {"n": 1},
        reply_to=reply_to,
    )
    async with db.write() as s:
        s.add(todo)
    return todo


async def claimed_todo(
    db: Database, endpoint: Endpoint, address: Address | None, *, state: str = "claimed", **values: Any
) -> Todo:
    """A todo of ``endpoint`` in ``state`` (claimed with a live lease by default) whose reply goes
    to ``address``; ``values`` set any other column."""
    now = utcnow()
    todo = new_todo_row(
        endpoint_id=endpoint.id,
        queue=endpoint.queues[0],
        source=address.provider if address else "generic",
        kind="test",
        title="a test todo",
        payload={"hello": "world"},
        reply_to=address.as_dict() if address else None,
    )
    todo.state = state
    if state == "claimed":
        todo.attempt = 1
        todo.lease_expires_at = now + dt.timedelta(seconds=300)
    for key, value in values.items():
        setattr(todo, key, value)
    async with db.write() as s:
        s.add(todo)
    return todo


# ---------------------------------------------------------------------------------------------
# Reply addresses of the bundled kinds (``host`` is a stand-in's ``FakeProvider.host``)


def forge_address(kind: str, host: str, repo: str = "acme/api", number: int = 7) -> Address:
    return Address(
        kind="forge_comment",
        provider=kind,
        display=f"{kind} {host}/{repo}#{number}",
        fields={"host": host, "repo": repo, "number": number},
    )


def slack_address(team: str = "T0TEST", channel: str = "C0456", thread: str = "1726990000.000100") -> Address:
    return Address(
        kind="slack_thread",
        provider="slack",
        display=f"slack {team}/{channel} thread {thread}",
        fields={"team_id": team, "channel": channel, "thread_ts": thread},
    )


def cairn_address(instance: str, artifact_id: str = "art_42") -> Address:
    host = instance.partition("://")[2]
    return Address(
        kind="cairn_comment",
        provider="cairn",
        display=f"cairn {host} artifact {artifact_id}",
        fields={"instance": instance, "artifact_id": artifact_id},
    )


# ---------------------------------------------------------------------------------------------
# Webhooks and deliveries


def trust_all(providers: Providers, source: str) -> dict[str, Any] | None:
    """The trust setting that lets every sender's delivery become work: ``{"allow_all": true}`` for
    a kind whose deliveries name actors (without one they would all be quarantined), None for the
    others, which take no trust setting."""
    kind = providers.sources.get(source)
    return {"allow_all": True} if kind is not None and kind.trust is not None else None


async def make_webhook(
    services: Services,
    source: str,
    *,
    owner: str = "ada",
    endpoint: str = "ada-agent",
    queue: str = "default",
    secret: str | None = None,
    trust: dict[str, Any] | None = None,
) -> tuple[str, str | None, str]:
    """A human, an endpoint and a webhook of ``source``: (ingest token, signing secret, webhook id).

    The human and endpoint are made only if missing, so several webhooks can share them. For a kind
    whose provider issues the secret, ``secret`` (default: ``PROVIDER_SECRETS``) is set the way an
    owner pastes it; a minted secret is returned as created. A kind whose deliveries name actors is
    given ``trust`` (default ``{"allow_all": true}``: every delivery becomes work, as before trusted
    actors existed; docs/routing.md).
    """
    db = services.db
    if owner not in {h.handle for h in await list_humans(db)}:
        await add_human(db, owner)
    if endpoint not in {e.slug for e in await tenancy.list_endpoints(db)}:
        await tenancy.vend_endpoint(
            db, name=endpoint, owner=await resolve_owner(db, human=owner), queues=[queue]
        )
    kind = services.providers.sources.get(source)
    if trust is None:
        trust = trust_all(services.providers, source)
    created = await tenancy.create_webhook(
        db,
        services.vault,
        services.providers,
        endpoint_slug=endpoint,
        source=source,
        queue=queue,
        trust=trust,
    )
    if kind is not None and kind.secret == "provider":
        secret = secret or PROVIDER_SECRETS.get(source, DEFAULT_PROVIDER_SECRET)
        await tenancy.set_webhook_secret(db, services.vault, services.providers, created.webhook.id, secret)
        return created.ingest_token, secret, created.webhook.id
    if secret is not None:
        raise ValueError(f"a {source} webhook's secret is minted or absent, never set by hand")
    return created.ingest_token, created.secret, created.webhook.id


async def post(
    base_url: str, token: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """POST a delivery to ``/webhooks/{token}``: (status, JSON answer, response headers)."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base_url}/webhooks/{token}", data=body, headers=headers) as resp,
    ):
        text = await resp.text()
        answer: dict[str, Any] = json.loads(text) if text else {}
        return resp.status, answer, dict(resp.headers)


_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


async def ui_login(http: aiohttp.ClientSession, base_url: str, token: str) -> None:
    """Sign ``http`` in to the web UI with a human's token, as the login form does (its session
    needs a cookie jar that keeps an IP address's cookies: ``aiohttp.CookieJar(unsafe=True)``)."""
    async with http.get(f"{base_url}/ui/login") as resp:
        found = _CSRF.search(await resp.text())
    assert found is not None, "the login page has no CSRF field"
    form = {"csrf": found.group(1), "token": token}
    async with http.post(f"{base_url}/ui/login", data=form, allow_redirects=False) as resp:
        assert resp.status == 303, f"login answered {resp.status}"


# ---------------------------------------------------------------------------------------------
# What was stored


async def counts(services: Services) -> tuple[int, int]:
    """(events, todos) in the database."""
    async with services.db.read() as s:
        events = await s.scalar(select(func.count()).select_from(Event))
        todos = await s.scalar(select(func.count()).select_from(Todo))
    return int(events or 0), int(todos or 0)


async def todo(services: Services, todo_id: str) -> Todo:
    """The stored todo (it must exist)."""
    async with services.db.read() as s:
        row = await s.get(Todo, todo_id)
    assert row is not None, f"no todo {todo_id}"
    return row


async def todo_payload(services: Services, todo_id: str) -> Any:
    """The stored todo's payload as every surface shows it (``todos.payload_of``), whether the todo
    keeps its own bytes or reads its event's body."""
    async with services.db.read() as s:
        row = await s.get(Todo, todo_id)
        assert row is not None, f"no todo {todo_id}"
        return payload_of(await stored_payload(s, row))


async def events(services: Services) -> list[Event]:
    """Every stored event, oldest first."""
    async with services.db.read() as s:
        return list((await s.scalars(select(Event).order_by(Event.received_at))).all())
