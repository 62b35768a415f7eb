"""A reply's destination is exact (issue 13, items 2 and 12).

Two Gitea (or Cairn) instances under one host name are two instances: a todo from B's issue replies
to B's API path with B's token, whichever connection was made first. An address that more than one
connection of the scope matches is refused before any dial, never a pick. And a webhook serves one
instance: a later delivery naming another one gets no reply address.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from fixtures.ingest_kit import cairn_body, fixture
from sqlalchemy import func, select, update

from switchboard import connections as conn
from switchboard import instances, reply, tenancy
from switchboard.db import utcnow
from switchboard.errors import SwitchboardError
from switchboard.models import Endpoint, Reply, Todo, Webhook
from switchboard.provider import DISPLAY_MAX, Address
from switchboard.services import Services
from switchboard.tenancy import Owner, resolve_owner
from switchboard.testing import (
    PROVIDER_SECRETS,
    FakeProvider,
    FakeProviders,
    Recorded,
    cairn_headers,
    claimed_todo,
    events,
    forge_address,
    gitea_headers,
    github_headers,
    human_and_endpoint,
    make_webhook,
    post,
    slack_headers,
    todo,
)
from switchboard.testing.providers import Answer

TOKEN_A = "gitea-token-instance-a-" + "Wq4Lp8"
TOKEN_B = "gitea-token-instance-b-" + "Zr7Kx2"


def instances_under_paths(kind: str) -> Any:
    """A stand-in serving several instances of ``kind`` under path prefixes of one host: Gitea's
    ``/{instance}/api/v1/repos/…/comments`` or Cairn's ``/{instance}/v1/artifacts/…/comments``."""
    ids = itertools.count(501)
    pattern = {
        "gitea": r"/([a-z-]+)/api/v1/repos/([^/]+)/([^/]+)/issues/(\d+)/comments",
        "cairn": r"/([a-z-]+)/v1/artifacts/([^/]+)/comments",
    }[kind]

    def answer(rec: Recorded) -> Answer:
        match = re.fullmatch(pattern, rec.path)
        if match is None or rec.method != "POST":
            return 404, {"message": "not found"}
        comment_id = next(ids)
        link = f"https://{rec.headers.get('Host')}/{match.group(1)}/c/{comment_id}"
        return 201, {"id": comment_id, "html_url": link, "url": link}

    return answer


async def claim_directly(services: Services, todo_id: str) -> Endpoint:
    """Put the todo in the claimed state (the lifecycle verbs are tested elsewhere)."""
    async with services.db.write() as s:
        await s.execute(
            update(Todo)
            .where(Todo.id == todo_id)
            .values(state="claimed", attempt=1, lease_expires_at=utcnow() + timedelta(minutes=5))
        )
        row = await s.get(Todo, todo_id)
        assert row is not None
        endpoint = await s.get(Endpoint, row.endpoint_id)
    assert endpoint is not None
    return endpoint


async def reply_rows(services: Services) -> int:
    async with services.db.read() as s:
        return int(await s.scalar(select(func.count()).select_from(Reply)) or 0)


async def deliver_gitea_issue(
    services: Services, base_url: str, token: str, secret: str, html_url: str, number: int
) -> str:
    """A signed Gitea ``issues`` delivery for issue ``number`` of the repository at ``html_url``;
    the id of the todo it minted."""
    payload = copy.deepcopy(fixture("gitea/issues.opened.json"))
    payload["repository"]["html_url"] = html_url
    payload["issue"]["number"] = number
    body = json.dumps(payload).encode()
    headers = gitea_headers(secret, body, "issues", delivery=f"d-{html_url}-{number}")
    status, answer, _ = await post(base_url, token, body, headers)
    assert status == 202 and answer["created"] == 1, answer
    return str(answer["todos"][0]["id"])


async def two_gitea_connections(services: Services, gitea: FakeProvider) -> Owner:
    """Ada's connections to instances A and B on the stand-in's one host, A made first."""
    ada = await resolve_owner(services.db, human="ada")
    for name, secret in (("gitea-a", TOKEN_A), ("gitea-b", TOKEN_B)):
        await conn.create_connection(
            services, ada, kind="gitea", name=name, account_key=f"{gitea.base_url}/{name}", secret=secret
        )
    return ada


async def refused(code: str, call: Any) -> SwitchboardError:
    with pytest.raises(SwitchboardError) as err:
        await call
    assert err.value.code == code, err.value.as_dict()
    return err.value


# ---------------------------------------------------------------------------------------------
# Item 2: addresses carry the instance base; the connection must be that instance's.


async def test_two_gitea_instances_on_one_host_each_reply_goes_to_its_own_instance(
    services: Services, server: Any, base_url: str, guarded: Any, fake_providers: FakeProviders
) -> None:
    gitea = await fake_providers.start("gitea", answer=instances_under_paths("gitea"))
    # Each instance has its own webhook (a webhook serves one instance), both into Ada's endpoint.
    token_b, secret_b, _ = await make_webhook(services, "gitea")
    token_a, secret_a, _ = await make_webhook(services, "gitea")
    assert secret_a is not None and secret_b is not None
    to_b = await deliver_gitea_issue(
        services, base_url, token_b, secret_b, f"{gitea.base_url}/gitea-b/acme/api", 5
    )
    to_a = await deliver_gitea_issue(
        services, base_url, token_a, secret_a, f"{gitea.base_url}/gitea-a/acme/api", 5
    )
    address = (await todo(services, to_b)).reply_to
    assert address is not None
    assert address["base"] == f"{gitea.base_url}/gitea-b"
    assert address["display"] == f"gitea {gitea.host}/gitea-b/acme/api#5"
    await two_gitea_connections(services, gitea)

    # B's issue: B's API path and B's token, though A's connection is older and on the same host.
    endpoint = await claim_directly(services, to_b)
    result = await reply.send_reply(services, endpoint, to_b, "Fixed on B.")
    assert result["state"] == "sent" and result["display"] == f"gitea {gitea.host}/gitea-b/acme/api#5"
    [to_instance_b] = gitea.posts()
    assert to_instance_b.path == "/gitea-b/api/v1/repos/acme/api/issues/5/comments"
    assert to_instance_b.auth == f"token {TOKEN_B}"

    # A's issue with the same repository and number: A's path and A's token.
    await claim_directly(services, to_a)
    assert (await reply.send_reply(services, endpoint, to_a, "Fixed on A."))["state"] == "sent"
    to_instance_a = gitea.posts()[1]
    assert to_instance_a.path == "/gitea-a/api/v1/repos/acme/api/issues/5/comments"
    assert to_instance_a.auth == f"token {TOKEN_A}"
    assert TOKEN_A not in json.dumps(to_instance_b.headers) and TOKEN_B not in json.dumps(
        to_instance_a.headers
    )


async def test_an_instance_with_no_connection_is_refused_though_its_host_has_others(
    services: Services, server: Any, base_url: str, guarded: Any, fake_providers: FakeProviders
) -> None:
    gitea = await fake_providers.start("gitea", answer=instances_under_paths("gitea"))
    token, secret, _ = await make_webhook(services, "gitea")
    assert secret is not None
    to_c = await deliver_gitea_issue(
        services, base_url, token, secret, f"{gitea.base_url}/gitea-c/acme/api", 9
    )
    await two_gitea_connections(services, gitea)
    endpoint = await claim_directly(services, to_c)
    err = await refused("no_connection", reply.send_reply(services, endpoint, to_c, "hello"))
    assert "gitea-c" in err.message
    assert gitea.requests == [] and await reply_rows(services) == 0


async def test_several_matching_connections_are_refused_never_a_pick(
    services: Services, server: Any, guarded: Any, fake_providers: FakeProviders
) -> None:
    """A todo stored before addresses carried their base names only the host: the host rule still
    serves it when exactly one connection of the scope is on that host, and refuses it (naming the
    ambiguity) when several are, before any dial and without a reply row."""
    gitea = await fake_providers.start("gitea", answer=instances_under_paths("gitea"))
    await make_webhook(services, "gitea")
    ada = await resolve_owner(services.db, human="ada")
    async with services.db.read() as s:
        endpoint = await s.scalar(select(Endpoint).where(Endpoint.slug == "ada-agent"))
    assert endpoint is not None
    legacy: Address = forge_address("gitea", gitea.host, number=5)
    assert "base" not in legacy.fields

    only = await conn.create_connection(
        services, ada, kind="gitea", name="gitea-b", account_key=f"{gitea.base_url}/gitea-b", secret=TOKEN_B
    )
    first = await claimed_todo_of(services, endpoint, legacy)
    assert (await reply.send_reply(services, endpoint, first, "one connection"))["state"] == "sent"
    assert [r.auth for r in gitea.posts()] == [f"token {TOKEN_B}"]

    await conn.create_connection(
        services, ada, kind="gitea", name="gitea-a", account_key=f"{gitea.base_url}/gitea-a", secret=TOKEN_A
    )
    second = await claimed_todo_of(services, endpoint, legacy)
    err = await refused("no_connection", reply.send_reply(services, endpoint, second, "two connections"))
    assert "ambiguous" in err.message and "'gitea-a'" in err.message and "'gitea-b'" in err.message
    assert len(gitea.requests) == 1 and await reply_rows(services) == 1
    assert only["account_key"] == f"{gitea.base_url}/gitea-b"


async def claimed_todo_of(services: Services, endpoint: Endpoint, address: Address) -> str:
    return (await claimed_todo(services.db, endpoint, address)).id


async def test_two_cairn_instances_on_one_host_each_reply_goes_to_its_own_instance(
    services: Services, server: Any, base_url: str, guarded: Any, fake_providers: FakeProviders
) -> None:
    cairn = await fake_providers.start("cairn", answer=instances_under_paths("cairn"))
    artifact = fixture("cairn/artifact.created.json")["artifact"]
    todos = {}
    for name in ("cairn-a", "cairn-b"):
        token, secret, _ = await make_webhook(services, "cairn")
        assert secret is not None
        moved = {**artifact, "url": f"{cairn.base_url}/{name}/artifacts/{artifact['id']}"}
        body = cairn_body("artifact.created.json", artifact=moved, event_id=f"evt_{name.replace('-', '_')}")
        status, answer, _ = await post(base_url, token, body, cairn_headers(secret, body))
        assert status == 202 and answer["created"] == 1, answer
        todos[name] = str(answer["todos"][0]["id"])
    ada = await resolve_owner(services.db, human="ada")
    for name, secret_value in (("cairn-a", TOKEN_A), ("cairn-b", TOKEN_B)):
        await conn.create_connection(
            services,
            ada,
            kind="cairn",
            name=name,
            account_key=f"{cairn.base_url}/{name}",
            secret=secret_value,
        )
    endpoint = await claim_directly(services, todos["cairn-b"])
    assert (await reply.send_reply(services, endpoint, todos["cairn-b"], "On B."))["state"] == "sent"
    [req] = cairn.posts()
    assert (req.path, req.auth) == (f"/cairn-b/v1/artifacts/{artifact['id']}/comments", f"Bearer {TOKEN_B}")


# ---------------------------------------------------------------------------------------------
# Item 12: a webhook serves one instance.


@pytest.fixture
def settings_overrides(fake_api_settings: dict[str, Any]) -> dict[str, Any]:
    """The GitHub and Slack API bases point at the stand-ins."""
    return fake_api_settings


def naming(host: str, number: int = 1) -> dict[str, Any]:
    """A GitHub ``issues`` payload whose repository lives on ``host``."""
    payload = copy.deepcopy(fixture("github/issues/opened.payload.json"))
    payload["repository"]["html_url"] = f"https://{host}/Codertocat/Hello-World"
    payload["issue"]["number"] = number
    return payload


async def deliver_github(base_url: str, token: str, secret: str, payload: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps(payload).encode()
    status, answer, _ = await post(
        base_url, token, body, github_headers(secret, body, "issues", str(uuid.uuid4()))
    )
    assert status == 202 and answer["created"] == 1, answer
    return answer


async def instance_of_webhook(services: Services, webhook_id: str) -> str | None:
    async with services.db.read() as s:
        return await s.scalar(select(Webhook.instance).where(Webhook.id == webhook_id))


async def test_the_first_delivery_binds_the_webhook_and_another_instance_gets_no_address(
    services: Services, server: Any, base_url: str, guarded: Any, fake_github: FakeProvider
) -> None:
    """The reproduction: a github.com webhook whose payload names the owner's GHES host. With the
    webhook bound to github.com by its first delivery, the GHES-naming delivery still mints its todo,
    but without an address, so the owner's GHES token is never spent on it."""
    token, secret, webhook_id = await make_webhook(services, "github")
    assert secret is not None
    ada = await resolve_owner(services.db, human="ada")
    await conn.create_connection(
        services, ada, kind="github", name="ghes", account_key=fake_github.host, secret="ghes-cred-1"
    )
    first = await deliver_github(base_url, token, secret, naming("github.com"))
    assert (await todo(services, first["todos"][0]["id"])).reply_to is not None
    assert await instance_of_webhook(services, webhook_id) == "github.com"

    ghes = await deliver_github(base_url, token, secret, naming(fake_github.host, 2))
    row = await todo(services, ghes["todos"][0]["id"])
    assert row.reply_to is None and ghes["disposition"] == "routed"
    flagged = [e for e in await events(services) if "withheld" in e.verify_detail]
    assert len(flagged) == 1
    assert (
        f"names {fake_github.host}" in flagged[0].verify_detail
        and "serves github.com" in flagged[0].verify_detail
    )
    assert await instance_of_webhook(services, webhook_id) == "github.com"

    endpoint = await claim_directly(services, row.id)
    await refused("no_reply_address", reply.send_reply(services, endpoint, row.id, "hello"))
    assert fake_github.requests == [] and await reply_rows(services) == 0


async def test_a_pinned_webhook_keeps_its_instance_from_the_first_delivery(
    services: Services, server: Any, base_url: str, fake_github: FakeProvider
) -> None:
    await make_webhook(services, "github")  # ada and ada-agent
    created = await tenancy.create_webhook(
        services.db,
        services.vault,
        services.providers,
        endpoint_slug="ada-agent",
        source="github",
        instance=f"https://{fake_github.host}/",
        trust={"allow_all": True},
    )
    assert created.webhook.instance == fake_github.host and created.secret is not None
    assert tenancy.webhook_view(created.webhook, "ada-agent")["instance"] == fake_github.host
    token, secret = created.ingest_token, created.secret
    saas = await deliver_github(base_url, token, secret, naming("github.com"))
    assert (await todo(services, saas["todos"][0]["id"])).reply_to is None
    ghes = await deliver_github(base_url, token, secret, naming(fake_github.host, 2))
    assert (await todo(services, ghes["todos"][0]["id"])).reply_to is not None
    assert await instance_of_webhook(services, created.webhook.id) == fake_github.host


async def test_pinning_is_for_kinds_whose_addresses_name_an_instance(services: Services) -> None:
    await make_webhook(services, "github")

    async def create(source: str, instance: str) -> Any:
        return await tenancy.create_webhook(
            services.db,
            services.vault,
            services.providers,
            endpoint_slug="ada-agent",
            source=source,
            instance=instance,
        )

    gitea = await create("gitea", "https://Git.Example.com/gitea-b/")
    assert gitea.webhook.instance == "https://git.example.com/gitea-b"
    for source, instance in (
        ("gitea", "http://git.example.com"),  # an account key is an https base URL
        ("github", "https://github.com/path"),
        ("generic", "github.com"),  # no reply addresses at all
        ("slack", "T0123ABCD"),  # one app serves many workspaces through one API host
        ("github", ""),
    ):
        with pytest.raises(SwitchboardError) as err:
            await create(source, instance)
        assert err.value.code == "invalid_argument", (source, instance)


async def test_slack_webhooks_are_not_bound(services: Services, server: Any, base_url: str) -> None:
    token, _, webhook_id = await make_webhook(services, "slack")
    for team, event_id in (("T0123ABCD", "Ev0TEAM1"), ("T0OTHER99", "Ev0TEAM2")):
        payload = {**fixture("slack/message.json"), "team_id": team, "event_id": event_id}
        body = json.dumps(payload).encode()
        status, answer, _ = await post(base_url, token, body, slack_headers(PROVIDER_SECRETS["slack"], body))
        assert status == 202 and answer["created"] == 1, answer
        assert (await todo(services, answer["todos"][0]["id"])).reply_to is not None
    assert await instance_of_webhook(services, webhook_id) is None


async def test_of_two_first_deliveries_racing_the_one_that_bound_wins(services: Services) -> None:
    """Two processes decide first deliveries on their copies of an unbound webhook: the conditional
    update binds it to one instance, and the other delivery's address is withheld."""
    _, _, webhook_id = await make_webhook(services, "gitea")
    async with services.db.read() as s:
        stale = await s.get(Webhook, webhook_id)
    assert stale is not None and stale.instance is None
    a = gitea_address("https://git.example.com/gitea-a")
    b = gitea_address("https://git.example.com/gitea-b")
    assert (await instances.bind_address(services, stale, a)).address == a
    lost = await instances.bind_address(services, stale, b)
    assert lost.address is None and lost.withheld is not None
    assert (
        "https://git.example.com/gitea-b" in lost.withheld
        and "https://git.example.com/gitea-a" in lost.withheld
    )
    assert await instance_of_webhook(services, webhook_id) == "https://git.example.com/gitea-a"
    # On a bound webhook, an address that names no instance (no base) is withheld too: fail closed.
    async with services.db.read() as s:
        bound = await s.get(Webhook, webhook_id)
    assert bound is not None
    unnamed = await instances.bind_address(services, bound, forge_address("gitea", "git.example.com"))
    assert unnamed.address is None and unnamed.withheld is not None


def gitea_address(base: str) -> Address:
    where = base.partition("://")[2]
    return Address(
        kind="forge_comment",
        provider="gitea",
        display=f"gitea {where}/acme/api#5",
        fields={"host": where.split("/")[0], "base": base, "repo": "acme/api", "number": 5},
    )


# ---------------------------------------------------------------------------------------------
# An address longer than a reply row can record (``DISPLAY_MAX``: ``Reply.display`` and
# ``thread_key``), though every field of it is within its own bounds: a Gitea under a long path,
# with a repository of 100/100 characters. Its reply was an internal error on PostgreSQL (the row's
# insert refused the value).

LONG_REPO = f"{'o' * 100}/{'r' * 100}"
LONG_MOUNT = "/engineering-platform-shared-services/source-code-hosting/forgejo-instances/team-b"


async def deliver_gitea_repo(
    services: Services, base_url: str, token: str, secret: str, base: str, delivery: str
) -> Todo:
    payload = copy.deepcopy(fixture("gitea/issues.opened.json"))
    payload["repository"].update(html_url=f"{base}/{LONG_REPO}", full_name=LONG_REPO)
    payload["repository"]["owner"]["login"] = LONG_REPO.split("/")[0]
    body = json.dumps(payload).encode()
    status, answer, _ = await post(
        base_url, token, body, gitea_headers(secret, body, "issues", delivery=delivery)
    )
    assert status == 202 and answer["created"] == 1, answer
    return await todo(services, str(answer["todos"][0]["id"]))


async def test_an_address_too_long_for_a_reply_row_is_not_kept_and_an_old_one_is_refused(
    services: Services, server: Any, base_url: str, guarded: Any, fake_providers: FakeProviders
) -> None:
    assert Reply.__table__.c.display.type.length == DISPLAY_MAX == Reply.__table__.c.thread_key.type.length
    gitea = await fake_providers.start("gitea", answer=instances_under_paths("gitea"))
    token, secret, _ = await make_webhook(services, "gitea")
    assert secret is not None
    # The same repository at the instance's root keeps its address (under 300 characters)...
    kept = await deliver_gitea_repo(services, base_url, token, secret, gitea.base_url, "d-root")
    assert kept.reply_to is not None and len(kept.reply_to["display"]) <= DISPLAY_MAX
    # ...and under the long path it would be longer than a reply row records: the todo, no address.
    token, secret, _ = await make_webhook(services, "gitea")
    assert secret is not None
    base = f"{gitea.base_url}{LONG_MOUNT}"
    longer = await deliver_gitea_repo(services, base_url, token, secret, base, "d-long")
    assert longer.reply_to is None

    # A todo that kept such an address before: refused with a stable code, before any dial.
    address = Address.from_dict({**kept.reply_to, "base": base, "display": "gitea " + "x" * DISPLAY_MAX})
    _, endpoint = await human_and_endpoint(services.db)
    old = await claimed_todo(services.db, endpoint, address)
    await refused("no_reply_address", reply.send_reply(services, endpoint, old.id, "Fixed."))
    assert gitea.posts() == [] and await reply_rows(services) == 0
